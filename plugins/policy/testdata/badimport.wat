;; badimport.wat: imports a function the host does not provide (load error).
(module
  (import "env" "open_socket" (func $open (param i32) (result i32)))
  (memory (export "memory") 1)
  (func (export "kernelhost_policy_v1_evaluate") (param i32) (result i32) (call $open (i32.const 0))))

;; allow.wat: the smallest v1 policy, for the benchmarks' floor: it answers
;; "allow, unchanged" without reading its input.
(module
  (import "kernelhost_policy_v1" "write_output" (func $write_output (param i32 i32) (result i32)))
  (memory (export "memory") 1)
  (data (i32.const 0) "{}")
  (func (export "kernelhost_policy_v1_evaluate") (param i32) (result i32)
    (drop (call $write_output (i32.const 0) (i32.const 2)))
    (i32.const 0)))

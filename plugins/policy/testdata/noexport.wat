;; noexport.wat: exports memory but no kernelhost_policy_v1_evaluate (load error).
(module (memory (export "memory") 1) (func (export "evaluate") (param i32) (result i32) (i32.const 0)))

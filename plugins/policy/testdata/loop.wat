;; loop.wat: spins forever (per-call deadline).
;; Hostile test module: it answers {} (allow) when the request has no env vars
;; and misbehaves when it has some, so a test can show the host keeps serving
;; good calls on the same module after a bad one. It reads only the first 64
;; bytes of the canonical input: with an empty config, byte 25 is '"' exactly
;; when env_vars is non-empty.
(module
  (import "kernelhost_policy_v1" "read_input" (func $read_input (param i32 i32) (result i32)))
  (import "kernelhost_policy_v1" "write_output" (func $write_output (param i32 i32) (result i32)))

  (memory (export "memory") 1)
  (data (i32.const 0) "{}")

  (func $hostile (param $n i32) (result i32)
    (drop (call $read_input (i32.const 1024) (i32.const 64)))
    (i32.and (i32.gt_u (local.get $n) (i32.const 25))
             (i32.eq (i32.load8_u (i32.const 1049)) (i32.const 34))))
  (func (export "kernelhost_policy_v1_evaluate") (param $n i32) (result i32)
    (if (call $hostile (local.get $n)) (then
      (loop $forever (br $forever))
    ))
    (drop (call $write_output (i32.const 0) (i32.const 2)))
    (i32.const 0)))

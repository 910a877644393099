;; openfile.wat: tries to open etc/passwd through WASI path_open on fd 3, the
;; first preopened directory, as libc does for a relative path. The host
;; mounts nothing, so the open fails with an errno (EBADF, 8), which the module
;; reports as a rejection "open failed: errno NN"; if the open worked it would
;; rewrite OPENED=yes, which the test treats as a sandbox escape.
;; Like the other hostile modules it answers {} when the request has no env vars.
(module
  (import "kernelhost_policy_v1" "read_input" (func $read_input (param i32 i32) (result i32)))
  (import "kernelhost_policy_v1" "write_output" (func $write_output (param i32 i32) (result i32)))
  ;; path_open(dirfd, dirflags, path, path_len, oflags, rights_base, rights_inheriting, fdflags, out_fd) -> errno
  (import "wasi_snapshot_preview1" "path_open"
    (func $path_open (param i32 i32 i32 i32 i32 i64 i64 i32 i32) (result i32)))
  (memory (export "memory") 1)
  (data (i32.const 0) "{}")
  (data (i32.const 16) "etc/passwd")                                               ;; 10 bytes
  (data (i32.const 32) "{\"env_vars\":{\"OPENED\":\"yes\"}}")                       ;; 29 bytes
  (data (i32.const 96) "{\"rejections\":[{\"key\":\"\",\"reason\":\"open failed: errno ??\"}]}") ;; 60 bytes, digits at 150
  (func $hostile (param $n i32) (result i32)
    (drop (call $read_input (i32.const 1024) (i32.const 64)))
    (i32.and (i32.gt_u (local.get $n) (i32.const 25))
             (i32.eq (i32.load8_u (i32.const 1049)) (i32.const 34))))
  (func (export "kernelhost_policy_v1_evaluate") (param $n i32) (result i32)
    (local $errno i32)
    (if (call $hostile (local.get $n)) (then
      (local.set $errno (call $path_open (i32.const 3) (i32.const 0) (i32.const 16) (i32.const 10)
        (i32.const 0) (i64.const -1) (i64.const -1) (i32.const 0) (i32.const 512)))
      (if (i32.eqz (local.get $errno)) (then
        (drop (call $write_output (i32.const 32) (i32.const 29)))
        (return (i32.const 0))))
      (i32.store8 (i32.const 150) (i32.add (i32.const 48) (i32.rem_u (i32.div_u (local.get $errno) (i32.const 10)) (i32.const 10))))
      (i32.store8 (i32.const 151) (i32.add (i32.const 48) (i32.rem_u (local.get $errno) (i32.const 10))))
      (drop (call $write_output (i32.const 96) (i32.const 60)))
      (return (i32.const 0))))
    (drop (call $write_output (i32.const 0) (i32.const 2)))
    (i32.const 0)))

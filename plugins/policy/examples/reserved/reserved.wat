;; reserved.wat: the example policy written without Go, to show the ABI is
;; language-neutral. It refuses every per-request env var whose key starts with
;; a reserved prefix: the module's config value, or "KERNELHOST_" when the
;; config is empty. Build: wat2wasm reserved.wat -o reserved.wasm
;;
;; It relies on the host's canonical input layout (docs/policy-abi.md): the
;; document starts with {"config":"...","env_vars":{ and strings are compact
;; JSON. Keys are compared in their JSON-escaped form and copied into the
;; output as they are, so the output is valid JSON without re-escaping.
(module
  (import "kernelhost_policy_v1" "read_input" (func $read_input (param i32 i32) (result i32)))
  (import "kernelhost_policy_v1" "write_output" (func $write_output (param i32 i32) (result i32)))
  (memory (export "memory") 1)

  ;; constants at fixed addresses in page 0; input and output go from page 1 on
  (data (i32.const 0) "KERNELHOST_")                                  ;; 11 bytes
  (data (i32.const 32) "{\"config\":\"")                              ;; 11 bytes
  (data (i32.const 48) ",\"env_vars\":{")                             ;; 13 bytes
  (data (i32.const 64) "{\"rejections\":[")                           ;; 15 bytes
  (data (i32.const 80) "{\"key\":\"")                                 ;; 8 bytes
  (data (i32.const 96) "\",\"reason\":\"key uses a reserved prefix\"}") ;; 40 bytes
  (data (i32.const 144) "]}")                                         ;; 2 bytes
  (data (i32.const 152) "{}")                                         ;; 2 bytes
  (data (i32.const 160) "unexpected input layout")                    ;; 23 bytes

  (global $out (mut i32) (i32.const 0)) ;; next free output byte

  ;; $emit appends len bytes at src to the output.
  (func $emit (param $src i32) (param $len i32)
    (memory.copy (global.get $out) (local.get $src) (local.get $len))
    (global.set $out (i32.add (global.get $out) (local.get $len))))

  ;; The two scanning loops below look at 8 bytes per iteration. Why: to make
  ;; a deadline stop a looping module, the host's runtime (wazero) checks at
  ;; every loop iteration and function call whether the call was stopped, and
  ;; that check costs more than a byte-sized loop body. Reading up to 7 bytes
  ;; past the data is fine: the memory has room, and those bytes never decide
  ;; anything.

  ;; $eq reports whether the len bytes at a and b are equal.
  (func $eq (param $a i32) (param $b i32) (param $len i32) (result i32)
    (loop $words
      (if (i32.ge_u (local.get $len) (i32.const 8))
        (then
          (if (i64.ne (i64.load (local.get $a)) (i64.load (local.get $b)))
            (then (return (i32.const 0))))
          (local.set $a (i32.add (local.get $a) (i32.const 8)))
          (local.set $b (i32.add (local.get $b) (i32.const 8)))
          (local.set $len (i32.sub (local.get $len) (i32.const 8)))
          (br $words))))
    ;; the last 0-7 bytes: the low len bytes of one more word each
    ;; (little-endian: the first byte is the lowest)
    (i64.eqz (i64.and
      (i64.xor (i64.load (local.get $a)) (i64.load (local.get $b)))
      (i64.sub (i64.shl (i64.const 1) (i64.extend_i32_u (i32.shl (local.get $len) (i32.const 3))))
               (i64.const 1)))))

  ;; $zeros sets the high bit of the lowest zero byte of x (and maybe of bytes
  ;; above it, which $str_end never looks at): the classic
  ;; (x - 0x0101..01) & ~x & 0x8080..80.
  (func $zeros (param $x i64) (result i64)
    (i64.and (i64.and (i64.sub (local.get $x) (i64.const 0x0101010101010101))
                      (i64.xor (local.get $x) (i64.const -1)))
             (i64.const 0x8080808080808080)))

;; $str_end returns the position of the closing quote of the JSON string
  ;; whose first content byte is at p (a backslash escapes the byte after
  ;; it), or -1 if the string does not end before end.
  (func $str_end (param $p i32) (param $end i32) (result i32)
    (local $w i64) (local $m i64)
    (loop $next
      (if (i32.ge_u (local.get $p) (local.get $end)) (then (return (i32.const -1))))
      ;; m marks the quotes (") and backslashes (\) among the next 8 bytes
      (local.set $w (i64.load (local.get $p)))
      (local.set $m (i64.or
        (call $zeros (i64.xor (local.get $w) (i64.const 0x2222222222222222)))
        (call $zeros (i64.xor (local.get $w) (i64.const 0x5c5c5c5c5c5c5c5c)))))
      (if (i64.eqz (local.get $m))
        (then
          (local.set $p (i32.add (local.get $p) (i32.const 8)))
          (br $next)))
      ;; move to the first of them
      (local.set $p (i32.add (local.get $p)
        (i32.wrap_i64 (i64.shr_u (i64.ctz (local.get $m)) (i64.const 3)))))
      (if (i32.ge_u (local.get $p) (local.get $end)) (then (return (i32.const -1))))
      (if (i32.eq (i32.load8_u (local.get $p)) (i32.const 34)) (then (return (local.get $p))))
      ;; a backslash: skip it and the byte it escapes
      (local.set $p (i32.add (local.get $p) (i32.const 2)))
      (br $next))
    (i32.const -1))

  (func $bad (result i32)
    (drop (call $write_output (i32.const 160) (i32.const 23)))
    (i32.const 2))

  (func (export "kernelhost_policy_v1_evaluate") (param $n i32) (result i32)
    (local $in i32) (local $end i32) (local $p i32) (local $q i32)
    (local $pre i32) (local $plen i32) (local $outStart i32) (local $count i32)
    (local $need i32) (local $have i32)
    ;; input at 64 KiB, output right after it; output is at most ~12x the input.
    (local.set $in (i32.const 65536))
    (local.set $end (i32.add (local.get $in) (local.get $n)))
    (local.set $need (i32.add (i32.add (local.get $end) (i32.mul (local.get $n) (i32.const 12))) (i32.const 1024)))
    (local.set $have (i32.shl (memory.size) (i32.const 16)))
    (if (i32.gt_u (local.get $need) (local.get $have))
      (then
        (if (i32.eq (memory.grow (i32.shr_u (i32.add (i32.sub (local.get $need) (local.get $have)) (i32.const 65535)) (i32.const 16))) (i32.const -1))
          (then (return (i32.const 3))))))
    (drop (call $read_input (local.get $in) (local.get $n)))
    (local.set $outStart (local.get $end))
    (global.set $out (local.get $end))

    ;; {"config":"<prefix>"
    (if (i32.lt_u (local.get $n) (i32.const 26)) (then (return (call $bad))))
    (if (i32.eqz (call $eq (local.get $in) (i32.const 32) (i32.const 11))) (then (return (call $bad))))
    (local.set $pre (i32.add (local.get $in) (i32.const 11)))
    (local.set $q (call $str_end (local.get $pre) (local.get $end)))
    (if (i32.lt_s (local.get $q) (i32.const 0)) (then (return (call $bad))))
    (local.set $plen (i32.sub (local.get $q) (local.get $pre)))
    (if (i32.eqz (local.get $plen)) (then (local.set $pre (i32.const 0)) (local.set $plen (i32.const 11))))
    ;; ,"env_vars":{
    (local.set $p (i32.add (local.get $q) (i32.const 1)))
    (if (i32.gt_u (i32.add (local.get $p) (i32.const 13)) (local.get $end)) (then (return (call $bad))))
    (if (i32.eqz (call $eq (local.get $p) (i32.const 48) (i32.const 13))) (then (return (call $bad))))
    (local.set $p (i32.add (local.get $p) (i32.const 13)))

    ;; "key":"value" pairs separated by commas, up to }
    (block $done
      (loop $pair
        (br_if $done (i32.ge_u (local.get $p) (local.get $end)))
        (br_if $done (i32.eq (i32.load8_u (local.get $p)) (i32.const 125)))
        (if (i32.ne (i32.load8_u (local.get $p)) (i32.const 34)) (then (return (call $bad))))
        (local.set $p (i32.add (local.get $p) (i32.const 1)))
        (local.set $q (call $str_end (local.get $p) (local.get $end)))
        (if (i32.lt_s (local.get $q) (i32.const 0)) (then (return (call $bad))))
        ;; key is [p, q)
        (if (i32.ge_u (i32.sub (local.get $q) (local.get $p)) (local.get $plen))
          (then
            (if (call $eq (local.get $p) (local.get $pre) (local.get $plen))
              (then
                (if (i32.eqz (local.get $count))
                  (then (call $emit (i32.const 64) (i32.const 15)))
                  (else (call $emit (i32.const 48) (i32.const 1)))) ;; the "," of ,"env_vars"
                (call $emit (i32.const 80) (i32.const 8))
                (call $emit (local.get $p) (i32.sub (local.get $q) (local.get $p)))
                (call $emit (i32.const 96) (i32.const 40))
                (local.set $count (i32.add (local.get $count) (i32.const 1)))))))
        ;; skip :"value"
        (local.set $p (i32.add (local.get $q) (i32.const 3)))
        (if (i32.gt_u (local.get $p) (local.get $end)) (then (return (call $bad))))
        (local.set $q (call $str_end (local.get $p) (local.get $end)))
        (if (i32.lt_s (local.get $q) (i32.const 0)) (then (return (call $bad))))
        (local.set $p (i32.add (local.get $q) (i32.const 1)))
        (if (i32.lt_u (local.get $p) (local.get $end))
          (then (if (i32.eq (i32.load8_u (local.get $p)) (i32.const 44))
            (then (local.set $p (i32.add (local.get $p) (i32.const 1)))))))
        (br $pair)))

    (if (local.get $count)
      (then (call $emit (i32.const 144) (i32.const 2)))
      (else (call $emit (i32.const 152) (i32.const 2))))
    (drop (call $write_output (local.get $outStart) (i32.sub (global.get $out) (local.get $outStart))))
    (i32.const 0))
)

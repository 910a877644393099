# kernelhost subprocess driver for bash.
#
# Protocol (see docs/drivers.md): a request on fd 3 is one NUL-terminated record, a
# "0" or "1" (silent) followed by the code. Messages go to fd 4 as JSON lines;
# the host fills in parent_id, so nothing here needs JSON string escaping.
# User code writes straight to fd 1/2, which the host forwards.
#
# The code is sourced at top level (not in a function), so variables (declare
# included), functions, options and the cwd persist. SIGINT runs the trap,
# whose `return` leaves the sourced cell; between requests it does nothing.
# Limitation: an interrupt that lands inside a user-defined function returns
# from that function only, and the caller's remaining commands still run.

__kh_count=0
__kh_int=
trap '__kh_int=1; return 130 2>/dev/null' INT
printf '{"type":"kh_ready"}\n' >&4

while :; do
	__kh_rec=
	IFS= read -r -d '' __kh_rec <&3
	__kh_st=$?
	if ((__kh_st != 0)); then
		# >128: a signal (an interrupt between requests) cut the read short.
		if ((__kh_st > 128)); then __kh_int=; continue; fi
		exit 0 # fd 3 closed: the host is done with us
	fi
	__kh_silent=${__kh_rec:0:1}
	__kh_int=
	# busy and execute_input in one write: the host reads fd 1/2 between
	# reads of fd 4, so they must arrive together. bash line-buffers its
	# output, so they share one line, as a JSON array.
	if [[ $__kh_silent != 1 ]]; then
		((++__kh_count))
		printf '[{"type":"status","state":"busy"},{"type":"execute_input","execution_count":%d}]\n' "$__kh_count" >&4
	else
		printf '{"type":"status","state":"busy"}\n' >&4
	fi
	# The protocol fds are closed for the cell: children must not hold them.
	if [[ $__kh_silent != 1 ]]; then
		source /dev/fd/5 5<<<"${__kh_rec:1}" 3<&- 4>&-
		__kh_st=$?
	else
		# The engine's helpers (cwd, env set and reset) run in POSIX mode,
		# entered by an assignment: there `.` is found before any function
		# user code defined (`source() { :; }` cannot skip a reset), and the
		# backslash keeps aliases out. The user's own setting comes back.
		__kh_dpc=${POSIXLY_CORRECT+x}${POSIXLY_CORRECT-}
		POSIXLY_CORRECT=y
		\. /dev/fd/5 5<<<"${__kh_rec:1}" 3<&- 4>&-
		__kh_st=$?
		if [[ $__kh_dpc == x* ]]; then POSIXLY_CORRECT=${__kh_dpc:1}; else \unset -v POSIXLY_CORRECT; fi
	fi
	if [[ -n $__kh_int ]]; then
		__kh_int=
		printf '{"type":"error","ename":"KeyboardInterrupt","evalue":"interrupted","traceback":["KeyboardInterrupt: interrupted"]}\n' >&4
		printf '{"type":"execute_reply","status":"error","execution_count":%d,"ename":"KeyboardInterrupt","evalue":"interrupted","traceback":["KeyboardInterrupt: interrupted"]}\n' "$__kh_count" >&4
	elif ((__kh_st != 0)); then
		printf '{"type":"error","ename":"ExitCode","evalue":"exit status %d","traceback":["exit status %d"]}\n' "$__kh_st" "$__kh_st" >&4
		printf '{"type":"execute_reply","status":"error","execution_count":%d,"ename":"ExitCode","evalue":"exit status %d","traceback":["exit status %d"]}\n' "$__kh_count" "$__kh_st" "$__kh_st" >&4
	else
		printf '{"type":"execute_reply","status":"ok","execution_count":%d}\n' "$__kh_count" >&4
	fi
	printf '{"type":"status","state":"idle"}\n' >&4
done

#!/bin/sh
# start-sandbox.sh: start kernelhost in a sandbox image's start-up command
# (where there is no systemd) and return once it is healthy, leaving it
# running in the background.
#
#   KERNELHOST_CONFIG=/etc/kernelhost/kernelhost.toml deploy/start-sandbox.sh
#
# Environment (each optional):
#   KERNELHOST_BIN        the kernelhost executable   (default: kernelhost on PATH)
#   KERNELHOST_CONFIG     its config file             (default: /etc/kernelhost/kernelhost.toml)
#   KERNELHOST_HEALTH_URL its /health                 (default: http://127.0.0.1:49999/health;
#                         match the config's addr)
#   KERNELHOST_LOG        where its stderr goes       (default: /var/log/kernelhost.log)
#   KERNELHOST_PIDFILE    its pid is written there    (default: /run/kernelhost.pid)
#   KERNELHOST_START_TIMEOUT  seconds to wait for /health to answer 200 (default: 60)
# Any other KERNELHOST_* variable reaches kernelhost serve (and wins over the
# config file).
#
# Exit status 0 once /health answered 200; otherwise non-zero, with the last
# lines of the log on stderr, and the process stopped if it is still running.
set -eu

bin=${KERNELHOST_BIN:-kernelhost}
config=${KERNELHOST_CONFIG:-/etc/kernelhost/kernelhost.toml}
health=${KERNELHOST_HEALTH_URL:-http://127.0.0.1:49999/health}
log=${KERNELHOST_LOG:-/var/log/kernelhost.log}
pidfile=${KERNELHOST_PIDFILE:-/run/kernelhost.pid}
timeout=${KERNELHOST_START_TIMEOUT:-60}

fail() {
	echo "start-sandbox: $1" >&2
	if [ -s "$log" ]; then
		echo "start-sandbox: last lines of $log:" >&2
		tail -n 20 "$log" >&2
	fi
	exit 1
}

# One probe of /health: curl or wget, whichever the image has.
healthy() {
	if command -v curl >/dev/null 2>&1; then
		curl -fsS -o /dev/null --max-time 2 "$health" 2>/dev/null
	else
		wget -q -O /dev/null -T 2 "$health" 2>/dev/null
	fi
}

command -v curl >/dev/null 2>&1 || command -v wget >/dev/null 2>&1 ||
	{ echo "start-sandbox: need curl or wget to probe $health" >&2; exit 1; }
[ -r "$config" ] || { echo "start-sandbox: cannot read the config file $config" >&2; exit 1; }

# The config is passed by the variable, so that a KERNELHOST_* setting in the
# environment still wins over it as documented.
KERNELHOST_CONFIG=$config nohup "$bin" serve >"$log" 2>&1 </dev/null &
pid=$!
echo "$pid" >"$pidfile"

# /health answers 503 until the default contexts exist. The bound is wall
# time, probes included. (sleep 0.2: not POSIX, but GNU, busybox and BSD
# sleep all take fractions.)
deadline=$(($(date +%s) + timeout))
while ! healthy; do
	if ! kill -0 "$pid" 2>/dev/null; then
		status=0
		wait "$pid" || status=$?
		fail "kernelhost exited with status $status before it was healthy"
	fi
	if [ "$(date +%s)" -ge "$deadline" ]; then
		kill "$pid" 2>/dev/null || true
		fail "kernelhost not healthy at $health after ${timeout}s (stopped it)"
	fi
	sleep 0.2
done
echo "start-sandbox: kernelhost is healthy at $health (pid $pid, log $log)"

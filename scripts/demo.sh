#!/usr/bin/env bash
# Runs `loadgen all` against a fresh Tollgate service with the demo policies
# (tools/loadgen/configs/demo.yaml, memory store) on a free loopback port, then stops the
# service whatever happens. The report and plots stay in OUT_DIR.
#
# usage: scripts/demo.sh BIN_DIR OUT_DIR [loadgen flags...]
#
# BIN_DIR holds the built limiter and loadgen binaries (make build). Extra
# arguments go to `loadgen all` (e.g. --cycles 2 --rounds 3). Exit status:
# loadgen's, or 2 when the service cannot start.
set -euo pipefail

if [ $# -lt 2 ]; then
	echo "usage: scripts/demo.sh BIN_DIR OUT_DIR [loadgen flags...]" >&2
	exit 2
fi
bin=$1 out=$2
shift 2
for b in limiter loadgen; do
	if [ ! -x "$bin/$b" ]; then
		echo "demo.sh: $bin/$b is missing or not executable (run make build)" >&2
		exit 2
	fi
done
config="$(cd "$(dirname "$0")/.." && pwd)/tools/loadgen/configs/demo.yaml"
log=$(mktemp "${TMPDIR:-/tmp}/tollgate-demo.XXXXXX")
pid=

cleanup() {
	if [ -n "$pid" ]; then
		kill "$pid" 2>/dev/null || true
		wait "$pid" 2>/dev/null || true
	fi
	rm -f "$log"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# port_free PORT: nothing accepts connections on 127.0.0.1:PORT.
port_free() {
	! (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null
}

# A random free port below the usual ephemeral range; a service that exits
# at once (its port taken meanwhile) is started again on another, up to
# three times.
for attempt in 1 2 3; do
	port=
	for _ in $(seq 200); do
		p=$((20000 + RANDOM % 12000))
		if port_free "$p"; then
			port=$p
			break
		fi
	done
	if [ -z "$port" ]; then
		echo "demo.sh: no free loopback port found" >&2
		exit 2
	fi
	env -u LIMITER_CONFIG -u LIMITER_ADDR -u LIMITER_STORE -u LIMITER_GRPC_ADDR -u LIMITER_ENVOY_CONFIG \
		"$bin/limiter" --addr "127.0.0.1:$port" --store memory --config "$config" >"$log" 2>&1 &
	pid=$!
	sleep 0.3
	if kill -0 "$pid" 2>/dev/null; then
		break
	fi
	echo "demo.sh: the service exited at once (attempt $attempt of 3); its log:" >&2
	cat "$log" >&2
	wait "$pid" 2>/dev/null || true
	pid=
done
if [ -z "$pid" ]; then
	exit 2
fi

status=0
"$bin/loadgen" all --target "http://127.0.0.1:$port" --out "$out" --store-label memory \
	--limit 20 --window 2s --wait 30s "$@" || status=$?
if ! kill -0 "$pid" 2>/dev/null; then
	echo "demo.sh: the service died during the run; its log:" >&2
	cat "$log" >&2
	status=1
elif [ "$status" -ne 0 ]; then
	echo "demo.sh: loadgen exited with status $status; the service's log:" >&2
	cat "$log" >&2
fi
exit "$status"

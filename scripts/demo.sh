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
me=demo.sh
# shellcheck source=scripts/lib.sh
. "$(dirname "$0")/lib.sh"
need_bins "$bin" limiter loadgen
lib_init demo
config="$(cd "$(dirname "$0")/.." && pwd)/tools/loadgen/configs/demo.yaml"

start service healthz "${limiter_env[@]}" "$bin/limiter" --addr "127.0.0.1:{port}" --store memory --config "$config"

status=0
"$bin/loadgen" all --target "http://127.0.0.1:$port_service" --out "$out" --store-label memory \
	--limit 20 --window 2s "$@" || status=$?
if ! kill -0 "$pid_service" 2>/dev/null; then
	echo "demo.sh: the service died during the run; its log:" >&2
	print_logs
	status=1
elif [ "$status" -ne 0 ]; then
	echo "demo.sh: loadgen exited with status $status; the service's log:" >&2
	print_logs
fi
exit "$status"

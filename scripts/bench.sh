#!/usr/bin/env bash
# Benchmarks Tollgate: the library's Go benchmarks, then the HTTP comparison
# of the service on each store against a bare Gin handler (loadgen bench).
#
# usage: scripts/bench.sh BIN_DIR [loadgen bench flags...]
#
# BIN_DIR holds the built limiter and loadgen binaries (make build). The
# script prints the machine (cores, CPU, Go, load average), runs
# `go test -bench` on pkg/limiter and the service's HTTP handler
# (benchstat-friendly output; BENCHTIME, default 1s; BENCH_LIB=0 skips it),
# then starts on free loopback ports: the baseline (`loadgen baseline`), the
# service on the memory store, on SQLite (a temporary file), and on Redis (a
# private redis-server, when the binary is on PATH), each with the policies
# of tools/loadgen/configs/bench.yaml and the access log off (--log-level
# warn). It runs `loadgen bench` against all of them (extra arguments go to
# it, e.g. --rounds 5 --duration 10s --out FILE) and stops everything it
# started, whatever happens.
set -euo pipefail

if [ $# -lt 1 ]; then
	echo "usage: scripts/bench.sh BIN_DIR [loadgen bench flags...]" >&2
	exit 2
fi
bin=$1
shift
me=bench.sh
# shellcheck source=scripts/lib.sh
. "$(dirname "$0")/lib.sh"
need_bins "$bin" limiter loadgen
lib_init bench
root="$(cd "$(dirname "$0")/.." && pwd)"
config="$root/tools/loadgen/configs/bench.yaml"

echo "## Machine"
echo
echo "- cores: $(nproc)"
echo "- CPU: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ *//')"
echo "- Go: $(go version | cut -d' ' -f3-)"
echo "- load average at start: $(cut -d' ' -f1-3 /proc/loadavg)"
echo "- date: $(date -u +%Y-%m-%dT%H:%M:%SZ)"
echo

if [ "${BENCH_LIB:-1}" != 0 ]; then
	echo "## Library benchmarks"
	echo
	echo '```'
	(cd "$root/pkg/limiter" && go test -run '^$' -bench . -benchmem -benchtime="${BENCHTIME:-1s}" ./...)
	(cd "$root/services/limiter" && go test -run '^$' -bench . -benchmem -benchtime="${BENCHTIME:-1s}" ./internal/httpapi)
	echo '```'
	echo
fi

# service NAME STORE [limiter flags...]: the limiter on STORE.
service() {
	local name=$1 store=$2
	shift 2
	start "$name" healthz "${limiter_env[@]}" \
		"$bin/limiter" --addr "127.0.0.1:{port}" --config "$config" --store "$store" --log-level warn "$@"
}

start baseline healthz "$bin/loadgen" baseline --addr "127.0.0.1:{port}"
service memory memory
service sqlite sqlite --sqlite-path "$tmp/bench.db"
targets=(
	--target "baseline=http://127.0.0.1:$port_baseline@$pid_baseline"
	--target "memory=http://127.0.0.1:$port_memory@$pid_memory"
	--target "sqlite=http://127.0.0.1:$port_sqlite@$pid_sqlite"
)
if command -v redis-server >/dev/null; then
	start redisd listening redis-server --port "{port}" --bind 127.0.0.1 --save "" --appendonly no --dir "$tmp"
	service redis redis --redis-url "redis://127.0.0.1:$port_redisd/0"
	targets+=(--target "redis=http://127.0.0.1:$port_redis@$pid_redis+$pid_redisd")
else
	echo "bench.sh: redis-server is not on PATH: the redis store is not measured" >&2
fi

echo "## HTTP: POST /v1/check, the service on each store against a bare Gin handler"
echo
status=0
"$bin/loadgen" bench "${targets[@]}" --wait 30s "$@" || status=$?
for name in baseline memory sqlite redis; do
	pidvar="pid_$name"
	if [ -n "${!pidvar:-}" ] && ! kill -0 "${!pidvar}" 2>/dev/null; then
		echo "bench.sh: $name died during the run; its log:" >&2
		cat "$tmp/$name.log" >&2
		status=1
	fi
done
if [ "$status" -ne 0 ]; then
	print_logs
fi
echo "- load average at end: $(cut -d' ' -f1-3 /proc/loadavg)"
exit "$status"

#!/usr/bin/env bash
# Benchmarks Tollgate: the library's Go benchmarks, then the service on each
# store against a bare Gin handler over HTTP, with two load generators, and
# Tollgate's POST /json against envoyproxy/ratelimit's when it is given.
#
# usage: scripts/bench.sh BIN_DIR [loadgen bench flags...]
#
# BIN_DIR holds the built limiter and loadgen binaries (make build). The
# script prints the machine, runs `go test -bench` on pkg/limiter and the
# service's HTTP handler (benchstat-friendly; BENCHTIME, default 1s;
# BENCH_LIB=0 skips it), then starts on free loopback ports: the baseline
# (`loadgen baseline`, bare Gin), the same with the header fields the
# service sends (`loadgen baseline --fields`: what they cost alone), the
# service on the memory store, on
# SQLite (a temporary file) and on Redis (a private redis-server, when the
# binary is on PATH), each with tools/loadgen/configs/bench.yaml and the
# access log off, and runs `loadgen bench` (extra arguments go to every
# call) over BENCH_KEYS keys (default 100000):
#
#   1. vegeta, closed loop, POST /v1/check; then vegeta at a fixed
#      BENCH_RATE req/s (default 5000), p99 as a ratio of the baseline's;
#   2. wrk (one thread; the Debian package wrk, installed with apt-get when
#      missing; BENCH_WRK=0 skips this), closed loop, on POST /v1/check,
#      GET /ping (X-Client-Key) and POST /rate/check (X-User-Id);
#   3. with PEER_RATELIMIT_BIN set to an envoyproxy/ratelimit binary (built
#      from its source, `go build ./src/service_cmd`; nothing of it is in
#      this repository): wrk on POST /json, Tollgate on Redis against the
#      peer on the same redis-server, with the same Envoy-format config
#      (tools/loadgen/configs/envoy-bench); and `loadgen bench --generator
#      grpc`: Envoy's gRPC ShouldRateLimit, BENCH_CONNECTIONS callers over
#      BENCH_GRPC_CONNS (default 4) connections, on the peer, Tollgate on
#      the same Redis, and Tollgate on the memory store (the peer has none);
#   4. with PEER_GUBERNATOR_BIN set to a gubernator binary (built from its
#      source, `go build ./cmd/gubernator`; nothing of it is in this
#      repository): one gubernator node in memory (member-list discovery of
#      itself, its cache raised to twice BENCH_KEYS, its tracing off: by
#      default it traces every request to an OTLP collector on localhost),
#      and vegeta and wrk on Tollgate's memory store (POST /v1/check)
#      against the node's POST /v1/GetRateLimits (loadgen's gubernator
#      route: one request of the bench policy per call) over the same keys,
#      goal 3× the peer's rate.
#
# Each closed-loop table gives the median req/s over BENCH_ROUNDS rounds
# (default 3) of BENCH_DURATION (default 5s) with BENCH_CONNECTIONS
# (default 64) connections, the per-round ratio to the baseline, and the
# server's CPU per request (/proc/PID/stat), the backend's (redis-server)
# beside it, with the issue's goals. Everything started is stopped,
# whatever happens.
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

keys=${BENCH_KEYS:-100000}
common=(--keys "$keys" --rounds "${BENCH_ROUNDS:-3}" --duration "${BENCH_DURATION:-5s}"
	--connections "${BENCH_CONNECTIONS:-64}" --wait 30s)
# The Redis deadline: the service's default (50ms) is for production; here
# the load generator, the servers and redis-server share the machine's
# cores, a scheduling stall can pass 50ms, and five in a row open the
# circuit breaker, which would measure the stall, not the store.
redis_timeout=${BENCH_REDIS_TIMEOUT:-1s}
goals=(--goal memory=0.90/5us --goal sqlite=0.60/30us --goal redis=0.60/25us)

# ensure_wrk: wrk is on PATH, installed with apt-get (as root, or with
# sudo) when it is missing; false when it cannot be.
ensure_wrk() {
	command -v wrk >/dev/null && return 0
	local sudo=
	[ "$(id -u)" -eq 0 ] || sudo=sudo
	if command -v apt-get >/dev/null && { [ -z "$sudo" ] || command -v sudo >/dev/null; }; then
		echo "$me: installing wrk (apt-get install wrk)" >&2
		$sudo apt-get update -qq >&2 && $sudo apt-get install -y -qq wrk >/dev/null || true
	fi
	command -v wrk >/dev/null
}

# answers_200 PATH PORT: GET PATH on 127.0.0.1:PORT answers 200.
answers_200() {
	(
		exec 3<>"/dev/tcp/127.0.0.1/$2" || exit 1
		printf 'GET %s HTTP/1.0\r\nHost: 127.0.0.1:%s\r\n\r\n' "$1" "$2" >&3
		IFS= read -r -t 2 line <&3 || exit 1
		[[ $line == HTTP/1.?\ 200* ]]
	) 2>/dev/null
}

# peer_healthy PORT: envoyproxy/ratelimit's GET /healthcheck answers 200.
peer_healthy() { answers_200 /healthcheck "$1"; }

# guber_healthy PORT: gubernator's GET /v1/HealthCheck answers 200 (it
# does once the node has found itself in its member list).
guber_healthy() { answers_200 /v1/HealthCheck "$1"; }

echo "## Machine"
echo
echo "- cores: $(nproc)"
echo "- CPU: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ *//')"
echo "- Go: $(go version | cut -d' ' -f3-)"
echo "- load average at start: $(cut -d' ' -f1-3 /proc/loadavg)"
echo "- date: $(date -u +%Y-%m-%dT%H:%M:%SZ)"
echo "- keys: $keys; rounds: ${BENCH_ROUNDS:-3} × ${BENCH_DURATION:-5s}; connections: ${BENCH_CONNECTIONS:-64}"
echo

if [ "${BENCH_LIB:-1}" != 0 ]; then
	echo "## Library benchmarks"
	echo
	echo '```'
	(cd "$root/pkg/limiter" && go test -run '^$' -bench . -benchmem -benchtime="${BENCHTIME:-1s}" ./...)
	(cd "$root/services/limiter" && go test -run '^$' -bench . -benchmem -benchtime="${BENCHTIME:-1s}" ./internal/httpapi ./internal/envoy)
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
start fields healthz "$bin/loadgen" baseline --fields --addr "127.0.0.1:{port}"
service memory memory
service sqlite sqlite --sqlite-path "$tmp/bench.db"
targets=(
	--target "baseline=http://127.0.0.1:$port_baseline@$pid_baseline"
	--target "fields=http://127.0.0.1:$port_fields@$pid_fields"
	--target "memory=http://127.0.0.1:$port_memory@$pid_memory"
	--target "sqlite=http://127.0.0.1:$port_sqlite@$pid_sqlite"
)
json_targets=()
grpc_targets=()
if command -v redis-server >/dev/null; then
	start redisd listening redis-server --port "{port}" --bind 127.0.0.1 --save "" --appendonly no --dir "$tmp"
	service redis redis --redis-url "redis://127.0.0.1:$port_redisd/0" --redis-timeout "$redis_timeout"
	targets+=(--target "redis=http://127.0.0.1:$port_redis@$pid_redis+$pid_redisd")
	if [ -n "${PEER_RATELIMIT_BIN:-}" ]; then
		envoy_config="$root/tools/loadgen/configs/envoy-bench"
		mkdir -p "$tmp/runtime/ratelimit/config"
		cp "$envoy_config"/*.yaml "$tmp/runtime/ratelimit/config/"
		tollgate_grpc=$(free_port)
		tollmem_grpc=$(free_port)
		service tollgate redis --redis-url "redis://127.0.0.1:$port_redisd/0" --redis-timeout "$redis_timeout" --envoy-config "$envoy_config" \
			--grpc-addr "127.0.0.1:$tollgate_grpc"
		service tollmem memory --envoy-config "$envoy_config" --grpc-addr "127.0.0.1:$tollmem_grpc"
		grpc_port=$(free_port)
		debug_port=$(free_port)
		start peer peer_healthy env HOST=127.0.0.1 PORT="{port}" GRPC_HOST=127.0.0.1 GRPC_PORT="$grpc_port" \
			DEBUG_HOST=127.0.0.1 DEBUG_PORT="$debug_port" USE_STATSD=false LOG_LEVEL=warn \
			RUNTIME_ROOT="$tmp/runtime" RUNTIME_SUBDIRECTORY=ratelimit RUNTIME_WATCH_ROOT=false \
			REDIS_SOCKET_TYPE=tcp REDIS_URL="127.0.0.1:$port_redisd" "$PEER_RATELIMIT_BIN"
		json_targets=(
			--target "peer=http://127.0.0.1:$port_peer@$pid_peer+$pid_redisd"
			--target "tollgate=http://127.0.0.1:$port_tollgate@$pid_tollgate+$pid_redisd"
		)
		grpc_targets=(
			--target "peer=grpc://127.0.0.1:$grpc_port@$pid_peer+$pid_redisd"
			--target "tollgate=grpc://127.0.0.1:$tollgate_grpc@$pid_tollgate+$pid_redisd"
			--target "tollgate-memory=grpc://127.0.0.1:$tollmem_grpc@$pid_tollmem"
		)
	fi
else
	echo "$me: redis-server is not on PATH: the redis store is not measured" >&2
fi
if [ -z "${PEER_RATELIMIT_BIN:-}" ]; then
	echo "$me: PEER_RATELIMIT_BIN is not set: no comparison with envoyproxy/ratelimit" >&2
fi
guber_targets=()
if [ -n "${PEER_GUBERNATOR_BIN:-}" ]; then
	guber_grpc=$(free_port)
	guber_gossip=$(free_port)
	start guber guber_healthy env GUBER_HTTP_ADDRESS="127.0.0.1:{port}" GUBER_GRPC_ADDRESS="127.0.0.1:$guber_grpc" \
		GUBER_MEMBERLIST_ADDRESS="127.0.0.1:$guber_gossip" GUBER_MEMBERLIST_BIND_ADDRESS="127.0.0.1:$guber_gossip" \
		GUBER_MEMBERLIST_KNOWN_NODES="127.0.0.1:$guber_gossip" GUBER_CACHE_SIZE=$((2 * keys)) GUBER_LOG_LEVEL=warn \
		OTEL_TRACES_EXPORTER=none OTEL_TRACES_SAMPLER=always_off "$PEER_GUBERNATOR_BIN"
	guber_targets=(
		--target "gubernator=http://127.0.0.1:$port_guber@$pid_guber" --target-route gubernator=gubernator
		--target "memory=http://127.0.0.1:$port_memory@$pid_memory"
	)
else
	echo "$me: PEER_GUBERNATOR_BIN is not set: no comparison with gubernator" >&2
fi

status=0
# bench TITLE [loadgen bench flags...]: one `loadgen bench` under a heading.
bench() {
	echo "## $1"
	echo
	shift
	"$bin/loadgen" bench "${common[@]}" "$@" || status=1
}

bench "HTTP, vegeta: the service on each store against a bare Gin handler" \
	"${targets[@]}" --generator vegeta --route check --fixed-rate "${BENCH_RATE:-5000}" --p99-goal 1.5 "$@"
if [ ${#guber_targets[@]} -gt 0 ]; then
	bench "HTTP, vegeta: the memory store's POST /v1/check against gubernator's POST /v1/GetRateLimits" \
		"${guber_targets[@]}" --baseline gubernator --generator vegeta --route check --fixed-rate 0 --goal memory=3 "$@"
fi
if [ "${BENCH_WRK:-1}" = 0 ]; then
	echo "$me: BENCH_WRK=0: the wrk runs are skipped" >&2
elif ! ensure_wrk; then
	echo "$me: wrk is not on PATH and could not be installed: the wrk runs are skipped" >&2
else
	for route in check ping rate-check; do
		bench "HTTP, wrk: $route, the service on each store against a bare Gin handler" \
			"${targets[@]}" --generator wrk --route "$route" --fixed-rate 0 "${goals[@]}" "$@"
	done
	if [ ${#json_targets[@]} -gt 0 ]; then
		bench "HTTP, wrk: POST /json on Redis, Tollgate against envoyproxy/ratelimit" \
			"${json_targets[@]}" --baseline peer --generator wrk --route json --fixed-rate 0 --goal tollgate=2.5 "$@"
	fi
	if [ ${#guber_targets[@]} -gt 0 ]; then
		bench "HTTP, wrk: the memory store's POST /v1/check against gubernator's POST /v1/GetRateLimits" \
			"${guber_targets[@]}" --baseline gubernator --generator wrk --route check --fixed-rate 0 --goal memory=3 "$@"
	fi
fi
if [ ${#grpc_targets[@]} -gt 0 ]; then
	bench "gRPC ShouldRateLimit: Tollgate on Redis and on memory against envoyproxy/ratelimit on the same Redis" \
		"${grpc_targets[@]}" --baseline peer --generator grpc --route grpc --grpc-conns "${BENCH_GRPC_CONNS:-4}" \
		--fixed-rate 0 --goal tollgate=2 "$@"
fi
for name in baseline fields memory sqlite redisd redis tollgate tollmem peer guber; do
	pidvar="pid_$name"
	if [ -n "${!pidvar:-}" ] && ! kill -0 "${!pidvar}" 2>/dev/null; then
		echo "$me: $name died during the run; its log:" >&2
		cat "$tmp/$name.log" >&2
		status=1
	fi
done
if [ "$status" -ne 0 ]; then
	print_logs
fi
echo "- load average at end: $(cut -d' ' -f1-3 /proc/loadavg)"
exit "$status"

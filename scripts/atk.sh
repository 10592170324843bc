#!/usr/bin/env bash
# Runs the attack suite against two fresh Tollgate services and stops them.
#
# usage: scripts/atk.sh BIN_DIR [atk flags...]
#
# BIN_DIR holds the built limiter and atk binaries (make build). The script
# starts, on two free loopback ports and with temporary SQLite files:
#   - a service with a random LIMITER_ADMIN_KEY (the main target), and
#   - a service with LIMITER_ADMIN_KEY empty (the fail-closed target),
# waits until both answer GET /healthz, runs
#   atk --target http://127.0.0.1:P1 --closed-target http://127.0.0.1:P2
# (extra arguments are passed on to atk, e.g. --junit FILE), stops both
# services whatever happens, prints their logs when the suite fails, and
# exits with atk's status (2 when a service never becomes healthy).
set -euo pipefail

if [ $# -lt 1 ]; then
	echo "usage: scripts/atk.sh BIN_DIR [atk flags...]" >&2
	exit 2
fi
bin=$1
shift
for b in limiter atk; do
	if [ ! -x "$bin/$b" ]; then
		echo "atk.sh: $bin/$b is missing or not executable (run make build)" >&2
		exit 2
	fi
done

readonly health_timeout=${ATK_HEALTH_TIMEOUT:-30} # seconds
tmp=$(mktemp -d "${TMPDIR:-/tmp}/tollgate-atk.XXXXXX")
pids=()

cleanup() {
	local pid
	for pid in "${pids[@]}"; do kill "$pid" 2>/dev/null || true; done
	for pid in "${pids[@]}"; do wait "$pid" 2>/dev/null || true; done
	rm -rf "$tmp"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

print_logs() {
	local log
	for log in "$tmp"/*.log; do
		echo "---- $(basename "$log") ----" >&2
		cat "$log" >&2 || true
	done
}

# port_free PORT: nothing accepts connections on 127.0.0.1:PORT.
port_free() {
	! (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null
}

# free_port: a random loopback port on which nothing listens, taken below
# the kernel's ephemeral range so that outgoing connections do not grab it
# before the service binds it.
free_port() {
	local low=32768 p
	if [ -r /proc/sys/net/ipv4/ip_local_port_range ]; then
		read -r low _ </proc/sys/net/ipv4/ip_local_port_range
	fi
	[ "$low" -gt 11000 ] || low=61000
	for _ in $(seq 200); do
		p=$((10000 + RANDOM % (low - 10000)))
		if port_free "$p"; then
			echo "$p"
			return 0
		fi
	done
	echo "atk.sh: no free loopback port found" >&2
	return 1
}

# healthz PORT: GET /healthz answers 200.
healthz() {
	(
		exec 3<>"/dev/tcp/127.0.0.1/$1" || exit 1
		printf 'GET /healthz HTTP/1.0\r\nHost: 127.0.0.1:%s\r\n\r\n' "$1" >&3
		IFS= read -r -t 2 line <&3 || exit 1
		[[ $line == HTTP/1.?\ 200* ]]
	) 2>/dev/null
}

# start NAME ADMIN_KEY: starts a service on a free port and waits until
# GET /healthz answers 200; sets port_NAME. A service that exits at once
# (say, its port was taken meanwhile) is started again on another port, up
# to three times; then, or after health_timeout, the script fails with the
# service's log.
start() {
	local name=$1 attempt port pid deadline
	for attempt in 1 2 3; do
		port=$(free_port) || exit 2
		env -u LIMITER_CONFIG -u LIMITER_GRPC_ADDR -u LIMITER_ENVOY_CONFIG LIMITER_ADMIN_KEY="$2" \
			"$bin/limiter" --addr "127.0.0.1:$port" --store sqlite --sqlite-path "$tmp/$name.db" >"$tmp/$name.log" 2>&1 &
		pid=$!
		pids+=("$pid")
		deadline=$((SECONDS + health_timeout))
		until healthz "$port"; do
			if ! kill -0 "$pid" 2>/dev/null; then
				break
			fi
			if [ "$SECONDS" -ge "$deadline" ]; then
				echo "atk.sh: service $name (127.0.0.1:$port) not healthy after ${health_timeout}s; its log:" >&2
				cat "$tmp/$name.log" >&2
				exit 2
			fi
			sleep 0.1
		done
		if kill -0 "$pid" 2>/dev/null; then
			printf -v "port_$name" '%s' "$port"
			return 0
		fi
		echo "atk.sh: service $name (127.0.0.1:$port) exited before it was healthy (attempt $attempt of 3); its log:" >&2
		cat "$tmp/$name.log" >&2
	done
	exit 2
}

key="atk-$(od -An -N16 -tx1 /dev/urandom | tr -d ' \n')"
start a "$key"
start b ""

status=0
LIMITER_ADMIN_KEY="$key" "$bin/atk" --target "http://127.0.0.1:$port_a" --closed-target "http://127.0.0.1:$port_b" "$@" || status=$?
if [ "$status" -ne 0 ]; then
	echo "atk.sh: the suite exited with status $status; service logs follow" >&2
	print_logs
fi
exit "$status"

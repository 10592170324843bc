# Helpers shared by atk.sh, demo.sh and bench.sh; source it, do not run it.
#
# The sourcing script sets `me` (its name, for messages) and calls
# lib_init; it then has a temporary directory $tmp, and every process it
# starts with `start` is stopped, and $tmp removed, when it exits, whatever
# happens.

# lib_init TAG: makes $tmp and installs the cleanup.
lib_init() {
	tmp=$(mktemp -d "${TMPDIR:-/tmp}/tollgate-$1.XXXXXX")
	pids=()
	trap lib_cleanup EXIT
	trap 'exit 130' INT TERM
}

lib_cleanup() {
	local pid
	for pid in "${pids[@]}"; do kill "$pid" 2>/dev/null || true; done
	for pid in "${pids[@]}"; do wait "$pid" 2>/dev/null || true; done
	rm -rf "$tmp"
}

# need COMMAND PACKAGE: installs PACKAGE with apt-get when COMMAND is not on
# PATH (with sudo unless root). What counts is COMMAND afterwards: a package
# whose post-install step fails to start its own service (nginx and Caddy
# both want port 80) still installed the binary the tests run.
need() {
	command -v "$1" >/dev/null 2>&1 && return
	echo "== installing $2 ($1)"
	if [ "$(id -u)" -eq 0 ]; then SUDO=""; else SUDO="sudo"; fi
	$SUDO apt-get update -qq
	$SUDO apt-get install -y -qq "$2" >/dev/null || true
	command -v "$1" >/dev/null 2>&1 || { echo "need: $2 did not install $1" >&2; return 1; }
}

# need_bins DIR NAME...: each DIR/NAME is an executable, or exit 2.
need_bins() {
	local dir=$1 b
	shift
	for b in "$@"; do
		if [ ! -x "$dir/$b" ]; then
			echo "$me: $dir/$b is missing or not executable (run make build)" >&2
			exit 2
		fi
	done
}

# print_logs: every started process's output, to stderr.
print_logs() {
	local log
	for log in "$tmp"/*.log; do
		[ -e "$log" ] || continue
		echo "---- $(basename "$log") ----" >&2
		cat "$log" >&2 || true
	done
}

# listening PORT: something accepts connections on 127.0.0.1:PORT.
listening() {
	(exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null
}

# free_port: a random loopback port on which nothing listens, taken below
# the kernel's ephemeral range so that outgoing connections do not grab it
# before the server binds it.
free_port() {
	local low=32768 p
	if [ -r /proc/sys/net/ipv4/ip_local_port_range ]; then
		read -r low _ </proc/sys/net/ipv4/ip_local_port_range
	fi
	[ "$low" -gt 11000 ] || low=61000
	for _ in $(seq 200); do
		p=$((10000 + RANDOM % (low - 10000)))
		if ! listening "$p"; then
			echo "$p"
			return 0
		fi
	done
	echo "$me: no free loopback port found" >&2
	return 1
}

# healthz PORT: GET /healthz on 127.0.0.1:PORT answers 200.
healthz() {
	(
		exec 3<>"/dev/tcp/127.0.0.1/$1" || exit 1
		printf 'GET /healthz HTTP/1.0\r\nHost: 127.0.0.1:%s\r\n\r\n' "$1" >&3
		IFS= read -r -t 2 line <&3 || exit 1
		[[ $line == HTTP/1.?\ 200* ]]
	) 2>/dev/null
}

# start NAME READY COMMAND...: runs COMMAND, with every {port} replaced by a
# free loopback port and its output in $tmp/NAME.log, and waits until
# `READY PORT` succeeds (healthz for an HTTP server, listening for others),
# at most START_TIMEOUT seconds (default 30). Sets port_NAME and pid_NAME.
# A process that exits before it is ready (say, its port was taken
# meanwhile) is started again on another port, up to three times; then, or
# after the timeout, the script exits 2 with the process's log.
start() {
	local name=$1 ready=$2 attempt port pid arg deadline
	shift 2
	for attempt in 1 2 3; do
		port=$(free_port) || exit 2
		local cmd=()
		for arg in "$@"; do cmd+=("${arg//\{port\}/$port}"); done
		"${cmd[@]}" >"$tmp/$name.log" 2>&1 &
		pid=$!
		pids+=("$pid")
		deadline=$((SECONDS + ${START_TIMEOUT:-30}))
		until "$ready" "$port"; do
			if ! kill -0 "$pid" 2>/dev/null; then
				break
			fi
			if [ "$SECONDS" -ge "$deadline" ]; then
				echo "$me: $name (127.0.0.1:$port) not healthy after ${START_TIMEOUT:-30}s; its log:" >&2
				cat "$tmp/$name.log" >&2
				exit 2
			fi
			sleep 0.1
		done
		if kill -0 "$pid" 2>/dev/null; then
			printf -v "port_$name" '%s' "$port"
			printf -v "pid_$name" '%s' "$pid"
			return 0
		fi
		echo "$me: $name (127.0.0.1:$port) exited before it was healthy (attempt $attempt of 3); its log:" >&2
		cat "$tmp/$name.log" >&2
	done
	exit 2
}

# limiter_env: a command prefix that runs a service without the LIMITER_*
# variables that would change what the scripts ask of it. An array, not a
# function, so that the started process is the service itself and the
# cleanup's kill reaches it.
limiter_env=(env -u LIMITER_CONFIG -u LIMITER_ADDR -u LIMITER_STORE -u LIMITER_GRPC_ADDR -u LIMITER_ENVOY_CONFIG -u LIMITER_INTERNAL_ADDR -u LIMITER_IDENTITY_HEADERS)

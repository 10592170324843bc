#!/usr/bin/env bash
# Measures what asking Tollgate costs an nginx gateway: requests per second
# and p99 latency through nginx alone against nginx with Tollgate as
# forward-auth (deploy/gateways/nginx.conf, Tollgate on the memory store),
# in the same run, alternating, with wrk.
#
# usage: scripts/gateway-bench.sh BIN_DIR
#
# BIN_DIR holds the built limiter binary (make build). Both gateways are the
# shipped recipe on free loopback ports; "alone" is the same file without
# its auth_request line. The upstream is a second nginx answering 200 from
# memory. Every request is allowed (a fixed window of 2e9 per second, keyed by
# client), so each one costs Tollgate a full decision. ROUNDS (default 2)
# alternations of SECONDS (default 4) per side, after a 1 s warm-up each;
# CONNS (default 16) connections, one wrk thread. Needs nginx and wrk.
set -euo pipefail
me=gateway-bench
here=$(cd "$(dirname "$0")" && pwd)
. "$here/lib.sh"
[ $# -eq 1 ] || { echo "usage: $0 BIN_DIR" >&2; exit 2; }
bin=$(cd "$1" && pwd)
need_bins "$bin" limiter
for p in nginx wrk; do
	command -v "$p" >/dev/null || [ -x "/usr/sbin/$p" ] || { echo "$me: $p is not installed" >&2; exit 2; }
done
nginx=$(command -v nginx || echo /usr/sbin/nginx)
lib_init gwbench
rounds=${ROUNDS:-2} secs=${SECONDS_PER_SIDE:-4} conns=${CONNS:-16}

wait_port() { # PORT NAME
	local deadline=$((SECONDS + 30))
	until listening "$1"; do
		[ "$SECONDS" -lt "$deadline" ] || { echo "$me: $2 did not listen" >&2; print_logs; exit 2; }
		sleep 0.1
	done
}

up=$(free_port); tg=$(free_port); alone=$(free_port); with=$(free_port)
cat >"$tmp/upstream.conf" <<CONF
worker_processes 1;
events { worker_connections 1024; }
http { access_log off; server { listen 127.0.0.1:$up; location / { return 200 "ok\n"; } } }
CONF
cat >"$tmp/tollgate.yaml" <<CONF
policies:
  bench_gw: { algorithm: fixed_window, limit: 2000000000, window: 1s }
trusted_proxies: [127.0.0.1]
gateway:
  - match: { path_prefix: /api/ }
    policies: [bench_gw]
    key: client
CONF
render() { # PORT: the recipe on PORT, upstream and Tollgate replaced
	sed -e "s/127.0.0.1:8000/127.0.0.1:$1/" -e "s/127.0.0.1:9000/127.0.0.1:$up/" -e "s/127.0.0.1:8081/127.0.0.1:$tg/" "$here/../deploy/gateways/nginx.conf"
}
render "$with" >"$tmp/with.conf"
render "$alone" | grep -v 'auth_request /_tollgate;' >"$tmp/alone.conf"

"$bin/limiter" --store memory --addr "127.0.0.1:$tg" --config "$tmp/tollgate.yaml" >"$tmp/tollgate.log" 2>&1 &
pids+=($!)
for n in upstream with alone; do
	mkdir -p "$tmp/$n"
	"$nginx" -p "$tmp/$n/" -c "$tmp/$n.conf" -e stderr -g "daemon off; pid $tmp/$n.pid;" >"$tmp/$n.log" 2>&1 &
	pids+=($!)
done
wait_port "$tg" tollgate; wait_port "$up" upstream; wait_port "$with" with; wait_port "$alone" alone
code=$(curl -s -o /dev/null -w '%{http_code} %header{ratelimit-policy}' "http://127.0.0.1:$with/api/x" 2>/dev/null || true)
echo "# nginx $("$nginx" -v 2>&1 | sed 's/.*\///'), $(nproc) CPUs, load $(cut -d' ' -f1-3 /proc/loadavg); check through Tollgate: $code"

measure() { # NAME PORT: one wrk run; prints "req/s p99"
	wrk -t1 -c"$conns" -d1s "http://127.0.0.1:$2/api/x" >/dev/null
	wrk -t1 -c"$conns" -d"${secs}s" --latency "http://127.0.0.1:$2/api/x" |
		awk -v n="$1" '/Requests\/sec/ {rps=$2} $1=="99%" {p99=$2} END {printf "%s %s %s\n", n, rps, p99}'
}
for r in $(seq "$rounds"); do
	measure alone "$alone"
	measure tollgate "$with"
done | tee "$tmp/results" | sed 's/^/  /'
awk '
	function ms(v) { if (v ~ /us$/) return v/1000; if (v ~ /ms$/) return v+0; if (v ~ /s$/) return v*1000; return v }
	{ rps[$1] += $2; p99[$1] += ms($3); n[$1]++ }
	END {
		ra = rps["alone"]/n["alone"]; rt = rps["tollgate"]/n["tollgate"]
		pa = p99["alone"]/n["alone"]; pt = p99["tollgate"]/n["tollgate"]
		printf "nginx alone:          %8.0f req/s  p99 %6.2f ms\n", ra, pa
		printf "nginx + Tollgate:     %8.0f req/s  p99 %6.2f ms\n", rt, pt
		printf "ratio (with/alone):   %8.2f req/s  p99 x%.2f\n", rt/ra, pt/pa
	}' "$tmp/results"

#!/usr/bin/env bash
# Runs the attack suite against three fresh Tollgate services and stops them.
#
# usage: scripts/atk.sh BIN_DIR [atk flags...]
#
# BIN_DIR holds the built limiter and atk binaries (make build). The script
# starts, on free loopback ports and with temporary SQLite files:
#   - a service with a random LIMITER_ADMIN_KEY that trusts 127.0.0.2 as a
#     proxy (the main target; atk connects from 127.0.0.2 as that proxy),
#   - a service with LIMITER_ADMIN_KEY empty (the fail-closed target), and
#   - a strict service: identity headers believed from trusted proxies only
#     (only 192.0.2.1, TEST-NET-1, which never connects: a user key needs
#     some trusted proxy to start), decision APIs on an internal listener, 1,024 descriptors,
#     and the gateway rules of ATK-45..47 for /v1/forward-auth (the strict target),
# waits until they answer GET /healthz, runs
#   atk --target http://127.0.0.1:P1 --closed-target http://127.0.0.1:P2 \
#       --strict-target http://127.0.0.1:P3 --strict-internal-target http://127.0.0.1:P4 \
#       --trusted-proxy 127.0.0.2
# (extra arguments are passed on to atk, e.g. --junit FILE), stops the
# services whatever happens, prints their logs when the suite fails, and
# exits with atk's status (2 when a service never becomes healthy).
set -euo pipefail

if [ $# -lt 1 ]; then
	echo "usage: scripts/atk.sh BIN_DIR [atk flags...]" >&2
	exit 2
fi
bin=$1
shift
me=atk.sh
# shellcheck source=scripts/lib.sh
. "$(dirname "$0")/lib.sh"
need_bins "$bin" limiter atk
lib_init atk

# limiter NAME ADMIN_KEY [FLAGS...]: a service on SQLite with that admin key,
# started through the command in the array wrap (none by default).
wrap=()
limiter() {
	local name=$1 admin=$2
	shift 2
	start "$name" healthz "${limiter_env[@]}" LIMITER_ADMIN_KEY="$admin" "${wrap[@]}" \
		"$bin/limiter" --addr "127.0.0.1:{port}" --store sqlite --sqlite-path "$tmp/$name.db" "$@"
}

key="atk-$(od -An -N16 -tx1 /dev/urandom | tr -d ' \n')"
proxy=127.0.0.2
limiter a "$key" --trusted-proxies "$proxy"
limiter b ""
mkdir "$tmp/envoy"
echo "domain: atk" >"$tmp/envoy/atk.yaml"
internal=$(free_port) || exit 2
# The strict one runs on 1,024 descriptors, so that ATK-44's idle
# connections reach its connection bounds.
wrap=(sh -c 'ulimit -n 1024 && exec "$@"' sh)
# ATK-45..47's gateway rules (tools/atk/cases.go: gwPrefix, gwHost, ...).
cat >"$tmp/strict.yaml" <<'EOF'
policies:
  atk_gw: { algorithm: sliding_log, limit: 3, window: 1h }
gateway:
  - match: { path_prefix: /atk-gw/ }
    policies: [atk_gw]
    key: header:X-Atk-Gw
  - match: { host: atk.test, path_prefix: /atk-host/ }
    policies: [atk_gw]
    key: header:X-Atk-Gw
EOF
limiter c "$key" --identity-headers trusted-proxies --trusted-proxies 192.0.2.1 --internal-addr "127.0.0.1:$internal" --envoy-config "$tmp/envoy" \
	--config "$tmp/strict.yaml"

status=0
LIMITER_ADMIN_KEY="$key" "$bin/atk" --target "http://127.0.0.1:$port_a" --closed-target "http://127.0.0.1:$port_b" \
	--strict-target "http://127.0.0.1:$port_c" --strict-internal-target "http://127.0.0.1:$internal" --trusted-proxy "$proxy" "$@" || status=$?
if [ "$status" -ne 0 ]; then
	echo "atk.sh: the suite exited with status $status; service logs follow" >&2
	print_logs
fi
exit "$status"

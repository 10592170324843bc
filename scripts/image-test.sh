#!/usr/bin/env bash
# Builds Tollgate's image with podman and checks it as an operator runs it.
#
# usage: scripts/image-test.sh        (make image-test; .ci/run)
#
# Installs podman and runc with apt when they are absent, builds IMAGE
# (default tollgate:dev) with `make image`, prints its size, then runs it on
# a free loopback port (LIMITER_ADDR given with -e, host network) with a
# temporary folder mounted on /data and checks:
#   - the image's labels and its non-root user;
#   - GET /healthz answers 200;
#   - GET /ping answers 200 three times, then 429 with Retry-After;
#   - the process runs as UID 65532, not root;
#   - the SQLite file is written in the mounted /data, and after the
#     container is stopped (SIGTERM) and started again the counts are still
#     there: /status shows 4 attempts and /ping answers 429;
#   - Envoy Gateway's rate-limit Deployments and the Istio example run
#     with the image in the peer's place (peer_pods below).
# /ping's window is made long (a YAML file mounted on /etc/tollgate) so that
# no window starts while the container restarts, whatever the hour.
#
# podman runs with --runtime runc (crun refuses hybrid cgroups on some
# machines; PODMAN_FLAGS replaces it), and the container with --network host
# and explicit ulimits (PODMAN_RUN_FLAGS replaces those). The container and the folder are removed whatever happens.
# Exits 0 when every check passes, 1 on a failed check, 2 when the image
# cannot be built or started.
set -euo pipefail
cd "$(dirname "$0")/.."
me=image-test.sh
# shellcheck source=scripts/lib.sh
. scripts/lib.sh

need podman podman
need runc runc
need curl curl
image=${IMAGE:-tollgate:dev}
read -r -a podman_flags <<<"${PODMAN_FLAGS---runtime runc}"
read -r -a run_flags <<<"${PODMAN_RUN_FLAGS---network host --ulimit nofile=4096:4096 --ulimit nproc=4096:4096}"
# pm ARGS...: podman with podman_flags.
pm() { podman "${podman_flags[@]}" "$@"; }
uid=65532

make --no-print-directory image ENGINE=podman IMAGE="$image" || exit 2
size=$(pm image inspect --format '{{.Size}}' "$image")
echo "$me: image $image: $size bytes ($((size / 1024 / 1024)) MiB)"

lib_init image
container=tollgate-image-test-$$
trap 'pm rm -f -i "$container" >/dev/null 2>&1 || true; lib_cleanup' EXIT

failed=0
# check WHAT WANT GOT: one PASS or FAIL line.
check() {
	if [ "$2" = "$3" ]; then
		echo "PASS $1"
	else
		echo "FAIL $1: want $2, got $3"
		failed=1
	fi
}

check "label org.opencontainers.image.title" tollgate \
	"$(pm image inspect --format '{{index .Labels "org.opencontainers.image.title"}}' "$image")"
check "image user" "$uid:$uid" "$(pm image inspect --format '{{.Config.User}}' "$image")"

# A window of whole hours whose next start is more than ten minutes away
# (fixed_window cuts time in multiples of the window since the epoch).
now=$(date -u +%s)
for h in $(seq 24 -1 1); do
	window=$((h * 3600))
	[ $((window - now % window)) -gt 600 ] && break
done
mkdir "$tmp/data" "$tmp/etc"
printf 'policies:\n  ping: { window: %ss }\n' "$window" >"$tmp/etc/tollgate.yaml"
if [ "$(id -u)" -eq 0 ]; then
	chown "$uid:$uid" "$tmp/data"
else
	podman unshare chown "$uid:$uid" "$tmp/data"
fi

port=$(free_port) || exit 2
base="http://127.0.0.1:$port"
pm run -d --name "$container" "${run_flags[@]}" \
	-e LIMITER_ADDR="127.0.0.1:$port" -e LIMITER_CONFIG=/etc/tollgate/tollgate.yaml \
	-v "$tmp/etc:/etc/tollgate:ro" -v "$tmp/data:/data" "$image" >/dev/null || exit 2

# up: waits until /healthz answers on the container's port, at most 30 s.
up() {
	local deadline=$((SECONDS + 30))
	until healthz "$port"; do
		if [ "$SECONDS" -ge "$deadline" ] || [ "$(pm inspect --format '{{.State.Running}}' "$container")" != true ]; then
			echo "$me: the container does not answer on $base; its log:" >&2
			pm logs "$container" >&2 || true
			exit 2
		fi
		sleep 0.2
	done
}

# status URL [CURL ARGS...]: the answer's status code.
status() { curl -s -o /dev/null -w '%{http_code}' "${@:2}" "$base$1"; }

up
check "GET /healthz" 200 "$(status /healthz)"
for i in 1 2 3; do
	check "GET /ping #$i" 200 "$(status /ping -H 'X-Client-Key: image-test')"
done
headers=$(curl -s -D - -o /dev/null -H 'X-Client-Key: image-test' "$base/ping" | tr -d '\r')
check "GET /ping #4" 429 "$(awk 'NR == 1 {print $2}' <<<"$headers")"
retry=$(awk 'tolower($1) == "retry-after:" {print $2}' <<<"$headers")
check "Retry-After is a positive number of seconds" yes "$([[ $retry =~ ^[1-9][0-9]*$ ]] && echo yes || echo "no (${retry:-absent})")"

pid=$(pm inspect --format '{{.State.Pid}}' "$container")
check "process UIDs (real, effective, saved, fs) on the host" "$uid $uid $uid $uid" \
	"$(awk '$1 == "Uid:" {print $2, $3, $4, $5}' "/proc/$pid/status")"
check "process user and group in the container (the image's /etc/passwd)" "tollgate tollgate" \
	"$(pm top "$container" user group | awk 'NR == 2 {print $1, $2}')"
check "SQLite file in the mounted /data" yes "$([ -s "$tmp/data/limiter.db" ] && echo yes || echo no)"

pm stop -t 20 "$container" >/dev/null
check "exit status after SIGTERM" 0 "$(pm inspect --format '{{.State.ExitCode}}' "$container")"
pm start "$container" >/dev/null
up
count=$(curl -s "$base/status?key=image-test" | grep -o '"count":[0-9]*' || true)
check "count after the restart" '"count":4' "$count"
check "GET /ping after the restart" 429 "$(status /ping -H 'X-Client-Key: image-test')"

# hardening: the image as a careful operator runs it, and as an attacker
# reads it (issue 35's third pass):
#   - a read-only root filesystem, every capability dropped and
#     no-new-privileges: it serves and writes its SQLite file in /data, and
#     the process holds no capability;
#   - /data read-only: it exits with status 1 and one line naming the file,
#     no panic;
#   - run as root (--user 0): it says so in a WARN;
#   - no secret in the image: its files are exactly the binary (twice), the
#     CA certificates, passwd, group and /data; its variables and labels
#     name no key, secret, password or token, nor does any layer's command.
hardening() {
	local c=$container-hardened out code files
	pm stop -t 20 "$container" >/dev/null
	port=$(free_port) || exit 2
	base="http://127.0.0.1:$port"
	mkdir "$tmp/data2" "$tmp/rodata"
	chown "$uid:$uid" "$tmp/data2" 2>/dev/null || podman unshare chown "$uid:$uid" "$tmp/data2"
	pm run -d --name "$c" "${run_flags[@]}" --read-only --cap-drop=ALL --security-opt no-new-privileges \
		-e LIMITER_ADDR="127.0.0.1:$port" -v "$tmp/data2:/data" "$image" >/dev/null || exit 2
	container=$c up
	check "read-only root, no capability: GET /ping" 200 "$(status /ping -H 'X-Client-Key: hardened')"
	check "read-only root, no capability: SQLite file in /data" yes "$([ -s "$tmp/data2/limiter.db" ] && echo yes || echo no)"
	check "read-only root, no capability: effective capabilities" 0000000000000000 \
		"$(awk '$1 == "CapEff:" {print $2}' "/proc/$(pm inspect --format '{{.State.Pid}}' "$c")/status")"
	pm rm -f -t 20 "$c" >/dev/null

	out=$(pm run --rm --name "$c" "${run_flags[@]}" -e LIMITER_ADDR="127.0.0.1:$port" -v "$tmp/rodata:/data:ro" "$image" 2>&1) && code=0 || code=$?
	check "read-only /data: exit status" 1 "$code"
	check "read-only /data: one line naming the file, no panic" "1 yes no" \
		"$(wc -l <<<"$out" | tr -d ' ') $(grep -q '/data/limiter.db' <<<"$out" && echo yes || echo no) $(grep -qi 'panic\|goroutine' <<<"$out" && echo yes || echo no)"
	[ "$code" = 1 ] || echo "$me: read-only /data said: $out" >&2

	pm run -d --name "$c" "${run_flags[@]}" --user 0:0 -e LIMITER_ADDR="127.0.0.1:$port" -e LIMITER_STORE=memory "$image" >/dev/null || exit 2
	container=$c up
	check "run as root: a WARN says so" 1 "$(pm logs "$c" 2>&1 | grep -c 'running as root (UID 0)')"
	pm rm -f -t 20 "$c" >/dev/null

	files=$(pm export "$(pm create --name "$c" "$image")" | tar -t | grep -v '/$' | sort | tr '\n' ' ')
	pm rm -f "$c" >/dev/null
	check "the image's files" "bin/ratelimit etc/group etc/passwd etc/ssl/certs/ca-certificates.crt usr/local/bin/limiter " "$files"
	check "no secret in the variables, labels or layers" "" \
		"$({ pm image inspect --format '{{range .Config.Env}}{{.}} {{end}}{{range $k, $v := .Labels}}{{$k}}={{$v}} {{end}}' "$image"
			pm history --no-trunc --format '{{.CreatedBy}}' "$image"; } | grep -oiE '[A-Z_]*(KEY|SECRET|PASSWORD|TOKEN)[A-Z_]*=?' | sort -u | tr '\n' ' ')"
}
hardening

# ---- Envoy Gateway and Istio (issue #33): the image in envoyproxy/ratelimit's place ----
# peer_pods: Envoy Gateway's rendered rate-limit Deployments
# (deploy/envoygateway/testdata, from Envoy Gateway d32f282) and the Istio
# example's Deployment (deploy/kubernetes/istio) run with this image:
# /bin/ratelimit as the command, their env, each volume mounted with -v
# (/certs: TLS files made by the test; the rules ConfigMap laid out as the
# kubelet does, its ..data swapped while the container runs), their
# security context, host network on free ports, PODMAN_FLAGS and
# PODMAN_RUN_FLAGS as above. Each must become ready on its probes and
# answer ShouldRateLimit from its rules: pushed by an xDS server in the
# test, as Envoy Gateway's does, or read from the ConfigMap, before and
# after the swap. The tests are the deploy module's, with LIMITER_IMAGE
# naming the image.
peer_pods() {
	need redis-server redis-server
	echo "$me: Envoy Gateway's rate-limit Deployments and the Istio example with $image"
	if (cd deploy && LIMITER_IMAGE="$image" PODMAN_FLAGS="${podman_flags[*]}" PODMAN_RUN_FLAGS="${run_flags[*]}" \
		go test -count=1 -run '^(TestEnvoyGatewayDeployments|TestIstioExampleServesTheRules)$' -v ./envoygateway ./kubernetes/istio |
		grep -E '^[[:space:]]*--- |_test\.go:[0-9]+:|^(ok|FAIL)'); then
		echo "PASS Envoy Gateway's Deployments and the Istio example run with the image"
	else
		echo "FAIL Envoy Gateway's Deployments or the Istio example with the image"
		failed=1
	fi
}
peer_pods

if [ "$failed" -ne 0 ]; then
	echo "$me: FAIL; the container's log:" >&2
	pm logs "$container" >&2 || true
	exit 1
fi
echo "$me: ok"

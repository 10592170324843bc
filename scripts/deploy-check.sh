#!/usr/bin/env bash
# Checks the files under deploy/ that no Go test reads.
#
# usage: scripts/deploy-check.sh BIN_DIR        (make deploy-check; .ci/run)
#
#   - deploy/prometheus/alerts.yml: `promtool check rules`, then its unit
#     tests, `promtool test rules deploy/prometheus/alerts_test.yml`;
#     promtool is installed with apt (package prometheus) when absent.
#   - deploy/systemd/tollgate.service, when systemd-analyze is on PATH:
#     `systemd-analyze verify` on a copy whose ExecStart names BIN_DIR's
#     limiter (verify wants the binary to exist), failing on any warning
#     (verify itself exits 0 on an unknown directive); then
#     `systemd-analyze security --offline=yes` with the exposure it must
#     stay under (MAX_EXPOSURE, default 15, that is 1.5 on its 0-10 scale).
# (deploy/config/*.yaml are started by TestDeployConfigsStart, make test.)
set -euo pipefail
if [ $# -ne 1 ]; then
	echo "usage: scripts/deploy-check.sh BIN_DIR" >&2
	exit 2
fi
bin=$(cd "$1" && pwd)
cd "$(dirname "$0")/.."
me=deploy-check.sh
# shellcheck source=scripts/lib.sh
. scripts/lib.sh
need_bins "$bin" limiter
lib_init deploy

need promtool prometheus
echo "== promtool check rules"
promtool check rules deploy/prometheus/alerts.yml
echo "== promtool test rules"
promtool test rules deploy/prometheus/alerts_test.yml

if ! command -v systemd-analyze >/dev/null 2>&1; then
	echo "$me: systemd-analyze is not on PATH: the unit is not verified"
	exit 0
fi
unit=$tmp/tollgate.service
sed "s|/usr/local/bin/limiter|$bin/limiter|" deploy/systemd/tollgate.service >"$unit"
echo "== systemd-analyze verify"
if ! out=$(systemd-analyze verify "$unit" 2>&1) || [ -n "$out" ]; then
	echo "$me: systemd-analyze verify deploy/systemd/tollgate.service:" >&2
	echo "$out" >&2
	exit 1
fi
echo "== systemd-analyze security (exposure at most ${MAX_EXPOSURE:-15} tenths)"
systemd-analyze security --offline=yes --threshold="${MAX_EXPOSURE:-15}" "$unit" | tail -1
echo "$me: ok"

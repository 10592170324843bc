#!/usr/bin/env bash
# Builds Traefik from the Go module proxy, for the Traefik forward-auth
# recipe's test (TestGatewayRecipes): Traefik is not a Debian package.
#
# usage: scripts/traefik.sh [DEST]     (default DEST: /usr/local/bin/traefik; .ci/run)
#
# `go install traefik@version` is refused (Traefik's go.mod has replace
# directives), so the module is downloaded, copied out of the read-only
# module cache and built inside it. v3.6.0 is the newest release whose
# whole dependency graph the module proxy here serves (v3.7.x needs a
# nested module, dynamic/ext, that is not in its zip, and eight modules
# the proxy refuses). The build is kept in the Go build cache's folder, so
# a second run on the same machine only copies it.
set -euo pipefail
version=v3.6.0
dest=${1:-/usr/local/bin/traefik}
cache=$(go env GOCACHE)/tollgate-traefik-$version
if [ ! -x "$cache/traefik" ]; then
	echo "== building traefik $version from the Go module proxy (a few minutes, once)"
	dir=$(GOFLAGS=-mod=mod go mod download -json "github.com/traefik/traefik/v3@$version" | sed -n 's/^[[:space:]]*"Dir": "\(.*\)",$/\1/p')
	if [ -z "$dir" ]; then
		echo "traefik.sh: github.com/traefik/traefik/v3@$version did not download" >&2
		exit 1
	fi
	src=$(mktemp -d "${TMPDIR:-/tmp}/traefik-src.XXXXXX")
	trap 'chmod -R u+w "$src"; rm -rf "$src"' EXIT
	cp -r "$dir"/. "$src"
	chmod -R u+w "$src"
	mkdir -p "$cache"
	(cd "$src" && GOWORK=off CGO_ENABLED=0 go build -trimpath -o "$cache/traefik" ./cmd/traefik)
fi
install -D -m 0755 "$cache/traefik" "$dest"
"$dest" version | head -1

# Tollgate: run `make help` for the targets.

GO      ?= go
MODULES := pkg/limiter pkg/limiter/ginlimit services/limiter services/limiter/client tools/atk tools/loadgen tools/lab deploy
TOOLS   := tools/atk tools/loadgen
BIN     := $(CURDIR)/bin
# -timeout: a package's whole run on a busy 2-core machine (internal/httpapi took
# over 10 minutes, go test's default, at load 20) must not be cut short.
TESTFLAGS ?= -race -shuffle=on -count=1 -timeout=45m

.DEFAULT_GOAL := help

.PHONY: help
help: ## list the targets
	@awk 'BEGIN {FS = ":.*## "} /^[a-z-]+:.*## / {printf "  %-14s %s\n", $$1, $$2}' $(MAKEFILE_LIST)

.PHONY: build
build: ## build bin/limiter, bin/atk, bin/loadgen and bin/lab
	@mkdir -p $(BIN)
	cd services/limiter && $(GO) build -o $(BIN)/limiter .
	cd tools/atk && GOWORK=off $(GO) build -o $(BIN)/atk .
	cd tools/loadgen && GOWORK=off $(GO) build -o $(BIN)/loadgen .
	cd tools/lab && GOWORK=off $(GO) build -o $(BIN)/lab .

.PHONY: run
run: build ## serve on 127.0.0.1:8080 with the embedded SQLite store (./data/limiter.db)
	$(BIN)/limiter

.PHONY: test
test: build ## run every module's tests with the race detector; list every failing module at the end
	@failed=""; for m in $(MODULES); do \
		echo "== $$m"; \
		(cd $$m && LIMITER_BIN=$(BIN)/limiter $(GO) test $(TESTFLAGS) ./...) || failed="$$failed $$m"; \
	done; \
	if [ -n "$$failed" ]; then echo "FAIL: tests failed in:$$failed"; exit 1; fi; \
	echo "ok: every module passed"

.PHONY: check
check: lint ## the edit-test loop: lint, then make test without the race detector and without Redis Cluster/Sentinel set-ups
	LIMITER_TEST_NO_TOPOLOGIES=1 $(MAKE) --no-print-directory test TESTFLAGS='-shuffle=on -count=1 -timeout=45m'

.PHONY: saturation
saturation: build ## two instances starved of CPU on a healthy Redis must stay exact, no 5xx (about a minute, both CPUs)
	cd services/limiter && LIMITER_SATURATION=1 LIMITER_BIN=$(BIN)/limiter $(GO) test -count=1 -run '^TestSaturation$$' -v .

# staticcheck runs its full check set, the style checks (ST*) included,
# not only the default set: the tree passes every one of them (issue 27
# measured it), so none is excluded as noise. Exclude one here as ",-ST1xxx"
# with the reason beside it if it ever is.
STATICCHECK_CHECKS := all

.PHONY: lint
lint: ## gofmt, go vet and staticcheck (pinned in services/limiter/go.mod) on every module
	@out=$$(gofmt -l $(MODULES)); if [ -n "$$out" ]; then echo "gofmt needed:"; echo "$$out"; exit 1; fi
	@set -e; for m in $(MODULES); do (cd $$m && $(GO) vet ./...); done
	@set -e; for m in $(MODULES); do (cd $$m && $(GO) tool staticcheck -checks $(STATICCHECK_CHECKS) ./...); done
	@set -e; for m in $(TOOLS) tools/lab; do (cd $$m && GOWORK=off $(GO) vet ./...); done

.PHONY: manifests
manifests: ## re-render deploy/kubernetes/tollgate-*.yaml from the Helm chart and its examples (a test fails when they are stale)
	cd deploy && $(GO) test -count=1 -run '^TestRenderedManifests$$' ./helm -update

.PHONY: docs-tables
docs-tables: ## regenerate docs/envoy.md's table of envoyproxy/ratelimit's variables from the code (a test fails when it is stale)
	cd services/limiter && $(GO) test -count=1 -run '^TestEnvoyDocPeerTable$$' ./internal/config -update

.PHONY: atk
atk: build ## start three services on free ports (the main target with an admin key, one without, a strict one with an internal listener and gateway rules) and run the attack suite
	scripts/atk.sh $(BIN)

OUT ?= demo-out
.PHONY: demo
demo: build ## run loadgen's scenarios against a fresh demo service (memory store); report and plots in OUT
	scripts/demo.sh $(BIN) $(OUT)

.PHONY: lab
lab: build ## the algorithm lab: accuracy on the default traces, each store's cost; regenerates docs/lab (report, plots), or OUT=DIR
	$(BIN)/lab all --out $(if $(filter command line,$(origin OUT)),$(OUT),docs/lab)

FUZZTIME ?= 20s
.PHONY: fuzz
fuzz: ## run every fuzz target for FUZZTIME each (default 20s)
	@set -e; for m in $(MODULES); do \
		for pkg in $$(cd $$m && $(GO) list ./...); do \
			dir=$$(cd $$m && $(GO) list -f '{{.Dir}}' $$pkg); \
			for f in $$(grep -ho '^func Fuzz[A-Za-z0-9_]*' $$dir/*_test.go 2>/dev/null | sed 's/func //'); do \
				echo "== $$pkg $$f"; \
				(cd $$dir && $(GO) test -run='^$$' -fuzz="^$$f\$$" -fuzztime=$(FUZZTIME) .); \
			done; \
		done; \
	done

BENCHTIME ?= 1s
.PHONY: bench
bench: build ## Go benchmarks (the library, the service's HTTP and Envoy handlers), then every store against a bare Gin handler (vegeta and wrk, BENCH_KEYS=100000) and, with PEER_RATELIMIT_BIN / PEER_GUBERNATOR_BIN, envoyproxy/ratelimit / gubernator (docs/benchmarks.md)
	BENCHTIME=$(BENCHTIME) scripts/bench.sh $(BIN)

.PHONY: deploy-check
deploy-check: build ## promtool check and unit tests of deploy/prometheus/alerts.yml; systemd-analyze verify and security of the unit
	scripts/deploy-check.sh $(BIN)

# The image's build context: the static binary (CGO_ENABLED=0: the SQLite
# driver is pure Go), the build host's CA certificates and the passwd/group
# lines of the image's user, 65532:65532. No base image is pulled.
IMAGE   ?= tollgate:dev
ENGINE  ?= $(firstword $(shell command -v podman docker 2>/dev/null))
CTX     := $(BIN)/image
CA_CERTS ?= /etc/ssl/certs/ca-certificates.crt
.PHONY: image-context
image-context: ## stage the image's build context in bin/image (static binary, CA certificates, passwd)
	@test -r $(CA_CERTS) || { echo "image-context: $(CA_CERTS) is missing (install ca-certificates or set CA_CERTS)"; exit 1; }
	rm -rf $(CTX) && mkdir -p $(CTX)/data
	cd services/limiter && CGO_ENABLED=0 $(GO) build -trimpath -ldflags '-s -w' -o $(CTX)/limiter .
	cp $(CA_CERTS) $(CTX)/ca-certificates.crt
	printf 'root:x:0:0:root:/:/sbin/nologin\ntollgate:x:65532:65532:tollgate:/data:/sbin/nologin\n' >$(CTX)/passwd
	printf 'root:x:0:\ntollgate:x:65532:\n' >$(CTX)/group

.PHONY: image
image: image-context ## build the container image IMAGE (default tollgate:dev) with podman or docker (ENGINE), FROM scratch
	@test -n "$(ENGINE)" || { echo "image: neither podman nor docker is on PATH"; exit 1; }
	$(ENGINE) build -f Containerfile -t $(IMAGE) \
		--build-arg VERSION=$$(git describe --always --dirty 2>/dev/null || echo dev) \
		--build-arg REVISION=$$(git rev-parse HEAD 2>/dev/null || echo unknown) $(CTX)

.PHONY: image-test
image-test: ## build the image with podman (installed by apt when absent) and check it runs: health, /ping's limit, non-root, /data across a restart
	IMAGE=$(IMAGE) scripts/image-test.sh

.PHONY: clean
clean: ## remove built binaries
	rm -rf $(BIN)

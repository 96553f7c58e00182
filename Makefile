# repolock: `make help` lists the targets.
SHELL := /bin/bash
.DEFAULT_GOAL := help

GO        ?= go
BIN       := bin/repolock
PG_ENSURE := scripts/pg-ensure.sh
# Tests create and drop databases: they find their server through
# TEST_DATABASE_URL (or the local one pg-ensure finds or starts), never
# through DATABASE_URL, which names the server the service works on.
PG_TEST   := DATABASE_URL="$${TEST_DATABASE_URL:-}" scripts/pg-ensure.sh
FUZZTIME  ?= 60s
ORACLE_RANDOM ?= 5000
BENCHTIME ?= 1x
BENCH     ?= .
ISOLATION_DURATION ?= 10s
LISTEN_ADDR ?= 127.0.0.1:8080
# make install: the binary installs as $(BINDIR)/repolock (scripts/install.sh).
DESTDIR    ?=
PREFIX     ?= /usr/local
BINDIR     ?= $(PREFIX)/bin
DOCDIR     ?= $(PREFIX)/share/doc/repolock
SYSCONFDIR ?= /etc
UNITDIR    ?= /etc/systemd/system
# The version GET /version and `repolock version` report, stamped at link time (internal/version) by
# make build, scripts/image.sh and the Containerfile alike (the same values as the image labels).
VERSION  ?= $(shell git describe --tags --always --dirty 2>/dev/null || echo dev)
REVISION ?= $(shell git rev-parse HEAD 2>/dev/null || echo unknown)
VERSION_LDFLAGS = -X github.com/repolock/repolock/internal/version.version=$(VERSION) -X github.com/repolock/repolock/internal/version.revision=$(REVISION)
# Modules only tests may use: `make lint` fails when ./cmd/api links one (go version -m bin/repolock).
TEST_ONLY_MODULES := ^(github.com/getkin/kin-openapi|github.com/santhosh-tekuri/jsonschema|github.com/gorilla/mux|github.com/chromedp/|github.com/anishathalye/porcupine|go.yaml.in/yaml/v4)
# The generators and linters make test-openapi runs on api/openapi.yaml (scripts/test-openapi.sh), pinned.
OAPI_CODEGEN_VERSION       ?= v2.8.2
OGEN_VERSION               ?= v1.24.0
OPENAPI_TYPESCRIPT_VERSION ?= 7.13.0
TYPESCRIPT_VERSION         ?= 5.9.3
REDOCLY_VERSION            ?= 2.77.0
# staticcheck 2026.1 (v0.8.x) understands go1.26; run through 'go run' so CI installs nothing by hand.
STATICCHECK_VERSION ?= v0.8.2
# The build tags of the test suites outside make test (test-ha, test-patroni,
# test-chaos, bench-watch, bench-scale): make lint vets and checks them too,
# all at once (their shared harness is used only by some of them).
LINT_TAGS ?= ha,patroni,chaos,watchbench,scale

.PHONY: help
help: ## list the targets
	@awk 'BEGIN {FS = ":.*## "} /^[a-zA-Z_-]+:.*## / {printf "  \033[36m%-14s\033[0m %s\n", $$1, $$2}' $(MAKEFILE_LIST)

.PHONY: build
build: ## build bin/repolock, stamped with VERSION and REVISION (internal/version)
	$(GO) build -ldflags '$(VERSION_LDFLAGS)' -o $(BIN) ./cmd/api

.PHONY: run
run: build ## start Postgres if needed, migrate, serve the API on 127.0.0.1:8080 (LISTEN_ADDR= for another)
	@set -e; addr='$(LISTEN_ADDR)'; \
	if ! scripts/port-free.sh "$$addr"; then \
		port=$${addr##*:}; \
		echo "make run: $$addr is busy (port $$port is in use by another process)." >&2; \
		echo "Pick another port:  LISTEN_ADDR=127.0.0.1:PORT make run   (for example LISTEN_ADDR=127.0.0.1:8081 make run)" >&2; \
		exit 1; \
	fi; \
	url=$$($(PG_ENSURE) --database repolock); \
	mkdir -p .data; \
	if [ -z "$$ADMIN_TOKEN" ]; then \
		[ -s .data/admin-token ] || (umask 077; head -c 24 /dev/urandom | od -An -tx1 | tr -d ' \n' | sed 's/^/rla_/' > .data/admin-token); \
		ADMIN_TOKEN=$$(cat .data/admin-token); \
	fi; \
	base="http://$$addr"; case "$$addr" in :*|0.0.0.0:*) base="http://127.0.0.1:$${addr##*:}";; esac; \
	echo ""; \
	echo "Admin token (development; kept in .data/admin-token): $$ADMIN_TOKEN"; \
	echo ""; \
	echo "  Console      $$base/ui/   (sign in with the admin token)"; \
	echo "  API          $$base/v1/   (docs/api.md)"; \
	echo "  OpenAPI      $$base/openapi.yaml"; \
	echo "  Metrics      $$base/metrics"; \
	echo ""; \
	echo "Try:  curl -s -H 'Authorization: Bearer $$ADMIN_TOKEN' -H 'Content-Type: application/json' -d '{\"name\":\"alice\"}' $$base/v1/admin/users"; \
	echo "Logs follow; Ctrl-C stops the server."; \
	echo ""; \
	DATABASE_URL="$$url" ADMIN_TOKEN="$$ADMIN_TOKEN" LISTEN_ADDR="$(LISTEN_ADDR)" exec ./$(BIN) serve

.PHONY: test
test: ## start Postgres (and install git) if needed, go vet, go test -race on every package, then test-deploy
	@scripts/git-ensure.sh
	@set -e; url=$$($(PG_TEST)); \
	$(GO) vet ./...; \
	env -u DATABASE_URL TEST_DATABASE_URL="$$url" $(GO) test -race -count=1 -timeout 30m ./...
	@$(MAKE) --no-print-directory test-deploy

.PHONY: test-ui
test-ui: ## browser tests of the console (/ui/): installs Debian's chromium if it can, skips with a message if not
	@set -e; url=$$($(PG_ENSURE)); chromium=$$(scripts/ensure-chromium.sh); \
	if [ -z "$$chromium" ]; then echo "test-ui: SKIPPED: no Chromium available (see the message above)"; exit 0; fi; \
	mkdir -p $${ARTIFACTS:-.artifacts}/ui; \
	cd tests/ui && CHROMIUM="$$chromium" REPOLOCK_UI_TEST=1 TEST_DATABASE_URL="$$url" DATABASE_URL="$$url" \
		$(GO) test -race -count=1 -timeout 10m -v -run '^TestConsoleInBrowser(Disputes)?$$' ./...; \
	echo "test-ui: screenshots in $${ARTIFACTS:-.artifacts}/ui/"

# The screenshots docs/console.md shows, taken by the browser test from the
# running binary: they cannot go stale.
SCREENSHOTS := overview overview-390 ownership denials gc sync-host tenant-delete tenant-revoke

.PHONY: screenshots
screenshots: ## regenerate docs/console/*.png from the running binary (the test-ui harness; needs Chromium, like test-ui)
	@set -e; tmp=$$(mktemp -d); trap 'rm -rf "$$tmp"' EXIT; \
	ARTIFACTS="$$tmp" $(MAKE) --no-print-directory test-ui; \
	[ -s "$$tmp/ui/overview.png" ] || { echo "screenshots: the browser test took none (no Chromium?); docs/console/ unchanged" >&2; exit 1; }; \
	for n in $(SCREENSHOTS); do cp "$$tmp/ui/$$n.png" docs/console/$$n.png; done; \
	echo "screenshots: docs/console/{$$(echo $(SCREENSHOTS) | tr ' ' ,)}.png"

.PHONY: test-ha
test-ha: ## failover end-to-end test: primary + synchronous standby (initdb/pg_basebackup), crash and promote under load
	@set -e; url=$$($(PG_ENSURE)); \
	TEST_DATABASE_URL="$$url" $(GO) test -tags ha -race -count=1 -timeout 15m -run '^TestHA' -v ./tests/

.PHONY: test-patroni
test-patroni: ## automatic failover: Patroni + one-member etcd manage a primary and a synchronous standby; kill -9 the primary's postmaster under 3 replicas' claims, Patroni promotes (installs patroni, etcd-server; skips saying why if it can't)
	@if ! scripts/apt-install.sh postgresql patroni etcd-server; then \
		echo "test-patroni: SKIPPED: Debian's postgresql, patroni and etcd-server are needed and could not be installed (see the message above)"; exit 0; fi; \
	$(GO) test -tags patroni -race -count=1 -timeout 20m -run '^TestPatroni' -v ./tests/ 2>&1 | \
		grep -v '^=== \|"level":"' ; exit $${PIPESTATUS[0]}

.PHONY: test-chaos
test-chaos: ## chaos suite: own Postgres, 3 replicas, 64 clients, pg_terminate_backend / restart -m immediate / kill -9 replica / full stop; Porcupine-checked (~2 min; CHAOS_DURATION=30m CHAOS_STOP=12s for a long run)
	@set -e; url=$$($(PG_ENSURE)); \
	TEST_DATABASE_URL="$$url" CHAOS_ARTEFACTS="$${CHAOS_ARTEFACTS:-$(CURDIR)/.artifacts/chaos}" \
		$(GO) test -tags chaos -count=1 -timeout $${CHAOS_TIMEOUT:-30m} -run '^TestChaos$$' -v ./tests/ 2>&1 | \
		grep -v '^=== \|"level":"' ; exit $${PIPESTATUS[0]}

.PHONY: bench
bench: ## run the benchmarks against a real Postgres and print figures and ratios
	@set -e; url=$$($(PG_TEST)); \
	env -u DATABASE_URL TEST_DATABASE_URL="$$url" $(GO) test -run '^$$' -bench '$(BENCH)' -benchtime $(BENCHTIME) -timeout 60m ./...

.PHONY: bench-http
bench-http: build ## the binary at its defaults against its own database: pgbench + wrk, 32 connections, 15 s per phase (BENCH_DURATION=3s, BENCH_BASE_REF=<ref>)
	@scripts/bench-http.sh

.PHONY: bench-isolation
bench-isolation: ## the noisy neighbour through the binary: B's one-row reads while A floods 10,000-event sync batches, with the pool share and without (ISOLATION_DURATION=10s)
	@set -e; url=$$($(PG_TEST)); \
	env -u DATABASE_URL TEST_DATABASE_URL="$$url" REPOLOCK_ISOLATION_DURATION=$(ISOLATION_DURATION) \
		$(GO) test -run '^$$' -bench '^BenchmarkNoisyNeighbour$$' -benchtime 1x -timeout 10m ./tests/

.PHONY: bench-watch
bench-watch: ## the watch through the binary: 1,000 SSE watchers over 100 tenants while acquires run at 500/s (WATCH_DURATION=20s, WATCH_RATE, WATCH_WATCHERS, WATCH_TENANTS)
	@set -e; url=$$($(PG_TEST)); \
	env -u DATABASE_URL TEST_DATABASE_URL="$$url" $(GO) test -tags watchbench -run '^$$' -bench 'Watch' -benchtime 1x -timeout 20m ./tests/

.PHONY: bench-scale
bench-scale: ## capacity at 10M locks vs 100k (SCALE_LOCKS, SCALE_SMALL, SCALE_TENANTS, SCALE_EVENTS) and the cost of a synchronous standby; long, not in make test
	@set -e; url=$$($(PG_ENSURE)); \
	TEST_DATABASE_URL="$$url" $(GO) test -tags ha -run '^$$' -bench 'HASynchronousCommit' -benchtime 1x -timeout 30m ./tests/; \
	TEST_DATABASE_URL="$$url" $(GO) test -tags scale -run '^$$' -bench 'Scale' -benchtime 1x -timeout 180m ./tests/

.PHONY: fuzz
fuzz: ## fuzz the URL normalizer and the HTTP layer (each fuzzer FUZZTIME, default 60s) and ask git about ORACLE_RANDOM random spellings
	@scripts/git-ensure.sh
	@set -e; url=$$($(PG_TEST)); \
	env -u DATABASE_URL TEST_DATABASE_URL="$$url" $(GO) test -run '^$$' -fuzz '^FuzzHTTP$$' -fuzztime $(FUZZTIME) ./internal/httpapi
	$(GO) test -run '^$$' -fuzz '^FuzzRepoURL$$' -fuzztime $(FUZZTIME) ./internal/normalize
	$(GO) test -run '^$$' -fuzz '^FuzzEquivalentSpellings$$' -fuzztime $(FUZZTIME) ./internal/normalize
	$(GO) test -run '^$$' -fuzz '^FuzzNormalizerAliases$$' -fuzztime $(FUZZTIME) ./internal/normalize
	ORACLE_RANDOM=$(ORACLE_RANDOM) $(GO) test -count=1 -run '^TestGitOracleRandom$$' -timeout 60m ./internal/normalize

.PHONY: lint
lint: ## gofmt check, go vet, go mod tidy -diff, staticcheck (pinned, via go run), the OpenAPI document's rules, no test-only module in the binary
	@out=$$(gofmt -l $$(git ls-files '*.go')); if [ -n "$$out" ]; then echo "gofmt would change:"; echo "$$out"; exit 1; fi
	$(GO) vet ./...
	$(GO) vet -tags $(LINT_TAGS) ./...
	$(GO) mod tidy -diff
	$(GO) run honnef.co/go/tools/cmd/staticcheck@$(STATICCHECK_VERSION) ./...
	$(GO) run honnef.co/go/tools/cmd/staticcheck@$(STATICCHECK_VERSION) -tags $(LINT_TAGS) ./...
	$(GO) test -count=1 -run 'TestOpenAPILint|TestOpenAPIComponentsUsed|TestOpenAPIGeneratedNames|TestErrorCodes|TestJSONIsGenerated' ./api/  # OpenAPI 3.0 validation (kin-openapi), project rules, generator-safe names, openapi.json current
	@bad=$$($(GO) list -deps -f '{{with .Module}}{{.Path}}{{end}}' ./cmd/api | sort -u | grep -E '$(TEST_ONLY_MODULES)' || true); \
	if [ -n "$$bad" ]; then echo "lint: test-only modules linked into the binary (./cmd/api): $$bad"; exit 1; fi

.PHONY: install
install: build ## install $(BINDIR)/repolock, the systemd units and /etc/repolock/repolock.env (DESTDIR=, PREFIX=/usr/local)
	@BIN=$(BIN) DESTDIR="$(DESTDIR)" PREFIX="$(PREFIX)" BINDIR="$(BINDIR)" DOCDIR="$(DOCDIR)" \
		SYSCONFDIR="$(SYSCONFDIR)" UNITDIR="$(UNITDIR)" scripts/install.sh

.PHONY: test-deploy
test-deploy: ## offline checks of deploy/: render + strictly decode + rule-check the kustomizations, the alert rules (parse, unit tests) and dashboard, compose.yaml, make install + systemd-analyze verify; then test-openapi
	cd deploy/kubernetes/validate && $(GO) vet ./... && $(GO) test -count=1 ./...
	cd deploy/prometheus/validate && $(GO) vet ./... && $(GO) test -count=1 ./...
	@if command -v promtool >/dev/null; then \
		cd deploy/prometheus && promtool check rules repolock-rules.yml && promtool test rules repolock-rules.test.yml; \
	else echo "test-deploy: no promtool here: the rules' unit tests ran on the prometheus Go module only (Debian's prometheus package has promtool)"; fi
	@scripts/test-install.sh
	@$(MAKE) --no-print-directory test-openapi

.PHONY: test-openapi
test-openapi: ## api/openapi.yaml through oapi-codegen and ogen (Go clients that build; one calls the binary), openapi-typescript + tsc, Redocly lint; pinned, skips with the reason where the module proxy or npm is unreachable
	@set -e; url=$$($(PG_TEST)); \
	env -u DATABASE_URL TEST_DATABASE_URL="$$url" GO="$(GO)" OAPI_CODEGEN_VERSION=$(OAPI_CODEGEN_VERSION) OGEN_VERSION=$(OGEN_VERSION) \
		OPENAPI_TYPESCRIPT_VERSION=$(OPENAPI_TYPESCRIPT_VERSION) TYPESCRIPT_VERSION=$(TYPESCRIPT_VERSION) REDOCLY_VERSION=$(REDOCLY_VERSION) \
		scripts/test-openapi.sh

.PHONY: prometheus-rules
prometheus-rules: ## regenerate the PrometheusRule and deploy/prometheus/metrics.txt from deploy/prometheus/repolock-rules.yml and deploy/grafana/repolock.json
	cd deploy/prometheus/validate && $(GO) test -count=1 -run 'TestPrometheusRuleIsGenerated|TestMetricsList' ./... -update

.PHONY: image
image: ## build the container image localhost/repolock:VERSION with buildah, no base image pulled (scripts/image.sh)
	@scripts/image.sh

.PHONY: test-image
test-image: ## build the image, inspect it and, where podman can run it, start it against Postgres (scripts/test-image.sh)
	@set -e; url=$$($(PG_TEST)); TEST_DATABASE_URL="$$url" scripts/test-image.sh

.PHONY: pg
pg: ## make sure a Postgres is reachable and print its URL
	@$(PG_ENSURE)

.PHONY: clean-testdb
clean-testdb: ## drop databases left behind by interrupted test and bench-http runs
	@set -e; url=$$($(PG_ENSURE)); \
	for d in $$(psql "$$url" -Atqc "SELECT datname FROM pg_database WHERE datname LIKE 'repolock\_test\_%' OR datname LIKE 'repolock\_tmpl\_%' OR datname LIKE 'repolock\_bench\_%'"); do \
		echo "drop $$d"; psql "$$url" -qc "DROP DATABASE \"$$d\" WITH (FORCE)"; \
	done

.PHONY: clean
clean: ## remove build output
	rm -rf bin

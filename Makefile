# The README's commands. `make help` lists them.
PKGS    := github.com/usagebilling/billing/...
GO      ?= go
# The toolchain is pinned by the `toolchain` lines of go.work and every go.mod;
# auto lets the go command fetch and use it even where $GOROOT/go.env says
# GOTOOLCHAIN=local (as this machine's Go does). GOTOOLCHAIN=local make ... opts out.
export GOTOOLCHAIN ?= auto
SQLC    ?= $(shell command -v sqlc 2>/dev/null || echo $$($(GO) env GOPATH)/bin/sqlc)

.PHONY: help demo load up billingctl demo-library test check sqlc-check unit-test apache-test fuzz bench kafka-jars

help: ## list the targets
	@grep -E '^[a-z0-9-]+:.*## ' $(MAKEFILE_LIST) | awk -F':.*## ' '{printf "  make %-12s %s\n", $$1, $$2}'

demo: ## the whole system on this machine: a client bills usage over HTTP, every figure checked and reported
	$(GO) build -o bin/ ./e2e/cmd/demo && ./bin/demo

load: ## drive usage over HTTP, report accepted/s, end-to-end/s, lag, latencies and a plot (ARGS='-duration 20s -rate 500'; starts the stack itself unless given URLs)
	$(GO) build -o bin/ ./e2e/cmd/load && ./bin/load $(ARGS)

.PHONY: floor
floor: ## the floor of a fact: the design's database work per fact on a throwaway PostgreSQL (fsync on), CPU-ms per fact; writes bin/floor.json for make load (ARGS='-runs 3'; decision 0017)
	$(GO) build -o bin/ ./e2e/cmd/floor && ./bin/floor $(ARGS)

up: ## the whole system left running (services on 8081-8085) until Ctrl-C; the README has curl calls to try
	$(GO) build -o bin/ ./e2e/cmd/stack && exec ./bin/stack

billingctl: ## build the command line for tenants and operators into bin/ (README: The command line)
	$(GO) build -o bin/ ./cmd/billingctl

demo-library: ## the shared mechanisms alone: outbox -> Kafka -> inbox on a throwaway PostgreSQL and kfake
	$(GO) run ./testkit/cmd/outbox-demo

test: check lint sqlc-check unit-test apache-test race fuzz ## run every check and test (what CI runs)

check: ## gofmt, go vet, and the module files are tidy
	@unformatted=$$(gofmt -l $$(git ls-files '*.go')); \
	  if [ -n "$$unformatted" ]; then echo "gofmt needed:"; echo "$$unformatted"; exit 1; fi
	$(GO) vet $(PKGS)
	@for m in pkg testkit cmd services/* e2e deploy; do \
	  (cd $$m && GOWORK=off $(GO) mod tidy -diff >/dev/null) || { echo "go.mod of $$m is not tidy: run (cd $$m && GOWORK=off go mod tidy)"; exit 1; }; done

sqlc-check: ## regenerating each service's sqlc code changes nothing
	@for d in services/*/; do [ -f $$d/sqlc.yaml ] || continue; \
	  echo "sqlc diff $$d"; (cd $$d && $(SQLC) diff) || exit 1; done

.PHONY: generate
generate: openapi ## regenerate everything generated: each service's sqlc code (services/*/sqlc.yaml) and the OpenAPI types (make openapi); make test fails when either is stale
	@for d in services/*/; do [ -f $$d/sqlc.yaml ] || continue; \
	  echo "sqlc generate $$d"; (cd $$d && $(SQLC) generate) || exit 1; done

unit-test: ## all Go tests against a throwaway PostgreSQL, kfake and a real Apache Kafka
	$(GO) test -count=1 -timeout 30m $(PKGS)

apache-test: ## the outbox and inbox tests again, against a real Apache Kafka broker instead of kfake
	TEST_KAFKA=apache $(GO) test -count=1 -timeout 20m ./pkg/outbox/ ./pkg/inbox/

# Every request parser's fuzz target (package:target). Their seed corpora
# also run as plain tests in unit-test; `make fuzz` fuzzes each for FUZZTIME
# (CI: 10s each, through make test); FUZZTIME=5m for a longer hunt.
FUZZTIME ?= 10s
FUZZ_TARGETS := ./pkg/envelope/:FuzzDecode ./pkg/envelope/:FuzzCanonical ./pkg/envelope/:FuzzCanonicalInPlace ./pkg/events/:FuzzDecodeCanonical \
	./pkg/httpx/:FuzzDecodeJSON ./pkg/httpx/:FuzzTenantID ./pkg/httpx/:FuzzCheckRequestText \
	./pkg/money/:FuzzParse ./pkg/money/:FuzzCurrency ./pkg/page/:FuzzCursor ./pkg/auth/:FuzzVerify \
	./services/meter/internal/domain/:FuzzParseActivation ./services/usage/internal/domain/:FuzzParse \
	./services/billing/internal/domain/:FuzzParsePeriod ./services/billing/internal/domain/:FuzzParseDuration \
	./services/billing/internal/domain/:FuzzTimeZone
fuzz: ## fuzz every request parser (strict JSON, decimals, currencies, periods, cursors, tenant ids, durations, time zones, activations, usage, tokens, envelopes), FUZZTIME each (default 10s)
	@set -e; for t in $(FUZZ_TARGETS); do pkg=$${t%%:*}; fn=$${t##*:}; \
	  echo "fuzz $$fn ($$pkg) for $(FUZZTIME)"; \
	  $(GO) test -run '^$$' -fuzz "^$$fn\$$" -fuzztime $(FUZZTIME) $$pkg; done

STATICCHECK ?= $(shell command -v staticcheck 2>/dev/null || echo $$($(GO) env GOPATH)/bin/staticcheck)
.PHONY: lint
lint: ## staticcheck over every module with every build tag (staticcheck.conf says which checks and why); install: GOTOOLCHAIN=go1.27.3 go install honnef.co/go/tools/cmd/staticcheck@v0.8.2
	@for m in pkg testkit cmd services/* e2e deploy; do echo "staticcheck $$m"; \
	  (cd $$m && $(STATICCHECK) -tags chaos,containers,hostile,money,soak ./...) || exit 1; done

# The packages whose goroutines share state: the outbox relay and its shard
# leases, the inbox runner, the service run group, the rate limiter, the
# webhook worker, query's folder, billing's close scheduler, the load tool.
RACE_PKGS := ./pkg/outbox/ ./pkg/inbox/ ./pkg/service/ ./pkg/httpx/ \
	./services/invoice/internal/webhook/ ./services/query/internal/app/ \
	./services/billing/internal/app/ ./e2e/load/
.PHONY: race
race: ## the race detector over the packages that run goroutines against shared state, then a short load run with the load tool and all five services built with -race (a data race fails it)
	$(GO) test -race -count=1 -timeout 30m $(RACE_PKGS)
	@out=$$(mktemp -d) && $(GO) build -race -o $$out/ ./e2e/cmd/load && \
	  GOFLAGS=-race STACK_DIR=$$out/stack STACK_KEEP=1 STACK_DIRECT_DB=1 $$out/load -duration 10s -rate 200 -close -out $$out/report && \
	  if grep -l 'WARNING: DATA RACE' $$out/stack/*/logs/*; then echo "race: a service reported a data race (in the logs named above)"; exit 1; fi; \
	  rm -rf $$out

.PHONY: flakes
flakes: ## hunt flaky tests: every package's tests 5 times and each system suite 3 times while busy loops hold the cores; report of every failure (ARGS='-count 2 -suites unit,money')
	$(GO) build -o bin/ ./e2e/cmd/flakes && ./bin/flakes $(ARGS)

.PHONY: hostile
hostile: ## hostile-input suite: the five services, every route sent generated bad input and slow clients; never a 5xx, a hang or a write, every refusal problem+json (~3 min)
	$(GO) test -tags hostile -count=1 -timeout 20m -v -run '^TestHostileInput$$' ./e2e/hostile/

.PHONY: openapi
openapi: ## regenerate the Go types of the services' OpenAPI documents (pkg/api/<service>api/types.gen.go, oapi-codegen); a test in make test fails when they are stale
	$(GO) run ./testkit/cmd/openapi-gen

bench: ## relay throughput for 1, 10 and 1,000 keys
	$(GO) test -run '^$$' -bench RelayThroughput -benchtime 20000x -count 3 ./pkg/outbox/

kafka-jars: ## fetch the Apache Kafka jars from Maven Central into the user cache
	$(GO) run ./testkit/cmd/kafka-jars

.PHONY: vulncheck
vulncheck: ## govulncheck over every module, offline: Go vulnerability DB from the module proxy; fails on reached vulnerabilities (~1.5 min; the first run ~5-15 more: indexes the DB, builds govulncheck)
	./.ci/vulncheck

.PHONY: e2e
e2e: ## chaos suite: the whole system on a real Apache Kafka under load, faults injected, reconciled (~10 min)
	KAFKA=apache $(GO) test -tags chaos -count=1 -timeout 40m -v ./e2e/chaos/

# The soak: the chaos suite's stack and load for SOAK_DURATION at SOAK_RATE
# facts/s with a random fault a minute (docs/testing.md).
SOAK_DURATION ?= 1h
SOAK_RATE     ?= 1000
SOAK_SEED     ?=
SOAK_OUT      ?= $(CURDIR)/bin/soak
.PHONY: soak
soak: ## the whole system on a real Apache Kafka for SOAK_DURATION (1h) at SOAK_RATE (1000) facts/s over four tenants, a random fault every minute (SOAK_SEED replays), resources watched; fails on anything lost or doubled or a series that grew; report and plot in SOAK_OUT
	KAFKA=apache SOAK_DURATION=$(SOAK_DURATION) SOAK_RATE=$(SOAK_RATE) SOAK_SEED=$(SOAK_SEED) SOAK_OUT=$(SOAK_OUT) \
	  $(GO) test -tags soak -count=1 -timeout 0 -v -run '^TestSoak$$' ./e2e/soak/

# The model-based money test: random operations against the running services
# (stack launcher, embedded broker) and an independent model (docs/money.md).
MONEY_OPS  ?= 10000
MONEY_SEED ?=
.PHONY: money-test
money-test: ## random prices, plans, usage, credits, taxes, alerts, closes and corrections against the running services and an independent model; every invoice, note, summary and alert.triggered webhook to the minor unit (MONEY_OPS=10000; MONEY_SEED=<seed> replays a run)
	MONEY_OPS=$(MONEY_OPS) MONEY_SEED=$(MONEY_SEED) $(GO) test -tags money -count=1 -timeout 60m -v -run '^TestMoney$$' ./e2e/money/

# Containers for real: a Docker engine from Debian's docker.io and every image
# built locally with no registry (deploy/offline/, deploy/README.md).
.PHONY: compose-keys compose-images compose-demo e2e-containers compose-chaos docker-stop
compose-images: ## build every image of deploy/compose.yaml locally, no registry (starts a Docker engine if none answers)
	deploy/offline/engine.sh start
	deploy/offline/images.sh

compose-keys: ## the issuer's and query's Ed25519 keys and their JWKS in deploy/keys (once; compose mounts jwks.json in each service, query.pem in query only)
	@if [ -f deploy/keys/jwks.json ]; then echo "deploy/keys: keys present"; else \
	  mkdir -p deploy/keys && \
	  $(GO) run ./cmd/token keygen -kid issuer-1 -key deploy/keys/issuer.pem -jwks deploy/keys/jwks.json && \
	  $(GO) run ./cmd/token keygen -kid query/1 -key deploy/keys/query.pem -jwks deploy/keys/jwks.json && \
	  chmod 0644 deploy/keys/query.pem && echo "deploy/keys: issuer-1 and query/1 made (query.pem readable by the container's user)"; fi

# The clients of the container targets sign with the compose issuer's key
# (auth.SignerFromEnv): the services in containers verify tokens with
# deploy/keys/jwks.json as issuer usagebilling-compose (deploy/compose.yaml)
# and refuse the development key.
COMPOSE_SIGNER = AUTH_SIGNING_KEY=$(CURDIR)/deploy/keys/issuer.pem AUTH_SIGNING_KEY_ID=issuer-1 AUTH_ISSUER=usagebilling-compose

compose-demo: compose-keys compose-images ## deploy/compose.yaml for real on local images: the client flow of make demo, every figure checked; torn down after
	deploy/offline/engine.sh compose
	$(COMPOSE_SIGNER) deploy/offline/compose-demo.sh

e2e-containers: compose-keys compose-images ## TestBillingFlow against containers of the local images (E2E_TARGET=containers, testcontainers-go, reaper off)
	$(COMPOSE_SIGNER) E2E_TARGET=containers TESTCONTAINERS_RYUK_DISABLED=true $(GO) test -count=1 -timeout 20m -run '^TestBillingFlow$$' -v ./e2e/

compose-chaos: compose-keys compose-images ## docker kill billing, then Kafka, under load in compose; nothing lost, every period reconciled
	deploy/offline/engine.sh compose
	$(COMPOSE_SIGNER) deploy/offline/compose-chaos.sh

docker-stop: ## stop the dockerd that make compose-* started (an engine that was already running is left alone)
	deploy/offline/engine.sh stop

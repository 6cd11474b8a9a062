# sluice build, test and benchmark entry points. See README.md.

# A fresh machine may not have Go on PATH for non-login shells.
GO ?= $(shell command -v go 2>/dev/null || echo /usr/local/go/bin/go)
export PATH := $(dir $(GO)):$(PATH)

# CI runs with CI=true; there io_uring, mosquitto and HAProxy tests must
# run for real, so a skip becomes a failure.
ifeq ($(CI),true)
export SLUICE_REQUIRE_URING := 1
export SLUICE_REQUIRE_MOSQUITTO := 1
export SLUICE_REQUIRE_FIO := 1
export SLUICE_REQUIRE_HAPROXY := 1
endif

# Debian packages the tests and load scripts need; installed when missing:
# fio and jq for the load scripts, mosquitto for the MQTT tests, haproxy as
# the real proxy in front of the PROXY protocol tests, curl, nats-server and
# openssl for the node commands of README.md and docs/ (cmd/sluice's TestREADME).
DEB_PKGS ?= fio jq mosquitto haproxy curl nats-server openssl

# FUZZTIME is each fuzz target's budget: a count of executions rather than a
# duration, since Go 1.26's fuzz coordinator can report its own -fuzztime
# deadline as a failure (golang/go#75804, fixed in Go 1.27).
FUZZTIME ?= 20000x
TEST_TIMEOUT ?= 20m

.PHONY: all build deps test invariants vet lint fuzz bench microbench fio-check sluice-bench sluice soak sluice-soak perf-table clean

all: build

build:
	$(GO) build ./...

# deps installs what the tests need on a fresh machine: Go modules (the gnet
# reference sink's too, a module of its own in bench/gnetsink), and the
# Debian packages named in DEB_PKGS.
deps:
	$(GO) mod download
	cd bench/gnetsink && $(GO) mod download
	bash scripts/install-deps.sh $(DEB_PKGS)

vet:
	$(GO) vet ./...
	GOOS=darwin $(GO) vet ./...
	cd bench/gnetsink && $(GO) vet ./...

# lint runs the repository's lint rules, which are written as Go tests
# (lint_test.go), plus gofmt over every tracked Go file.
lint:
	@out=$$(gofmt -l $$(git ls-files '*.go' 2>/dev/null || find . -name '*.go')); \
	  if [ -n "$$out" ]; then echo "gofmt would change:"; echo "$$out"; exit 1; fi
	$(GO) test -count=1 -run '^TestLint' .

# test says what it does at each step. Building every test binary under
# the race detector takes minutes on a fresh build cache, and go test
# prints nothing for a package until it has run, so the binaries are built
# first (-run '^$$' runs no test), one line per package as each is ready.
test: deps vet lint
	@echo "== make test: building the test binaries with the race detector (minutes on a fresh cache)"
	$(GO) test -race -count=1 -run '^$$' ./...
	@echo "== make test: the suite under the race detector"
	bash scripts/heartbeat.sh $(GO) test -race -count=1 -timeout $(TEST_TIMEOUT) ./...
	@echo "== make test: the reference sinks' own module (bench/gnetsink)"
	cd bench/gnetsink && $(GO) test -race -count=1 ./...
	@echo "== make test: the runners in the lane driver's invariants build"
	$(MAKE) invariants
	@echo "== make test: every benchmark once"
	bash scripts/heartbeat.sh $(GO) test -count=1 -run '^$$' -bench . -benchtime=1x ./...
	@echo "== make test: fio against the sink"
	$(MAKE) fio-check

# invariants runs the lane driver's own checks (internal/runner/driver,
# built with -tags invariants: a buffer held by one lane only, Finish
# exactly once, no emit after it) under the runners' tests (the runner
# suite, runnertest, with its small pools and resets), the framed
# conformance suite, and the engine's end-to-end and reset conformance
# cases.
invariants:
	bash scripts/heartbeat.sh $(GO) test -tags invariants -count=1 ./internal/... ./ring/ ./fallback/
	bash scripts/heartbeat.sh $(GO) test -tags invariants -count=1 -run 'Framed' ./engine/
	bash scripts/heartbeat.sh $(GO) test -tags invariants -count=1 -run '^TestConformance$$/./^(ThousandSources|ResetInOrder)$$' ./engine/

# fio-check drives the sink with fio's net engine from 1,000 connections
# and requires the byte totals to reconcile exactly.
fio-check: sluice-bench
	bash scripts/fio-load.sh -B ./sluice-bench -n 1000 -s 1m

sluice-bench:
	$(GO) build -o sluice-bench ./cmd/sluice-bench

# sluice is the ingest node's command: ./sluice run -c examples/node.yaml
sluice:
	$(GO) build -o sluice ./cmd/sluice

# fuzz runs every fuzz target in the module briefly.
fuzz:
	@set -e; for pkg in $$($(GO) list ./...); do \
	  for f in $$($(GO) test -list '^Fuzz' $$pkg | grep '^Fuzz' || true); do \
	    echo "== $$pkg $$f"; \
	    $(GO) test -run '^$$' -fuzz "^$$f$$" -fuzztime $(FUZZTIME) $$pkg; \
	  done; \
	done

# bench is the main job: every runner available here, side by side with
# Go's own sink (a goroutine per connection) and, on Linux, a bare epoll
# loop, on the CLI's embedded default load (200 sources, 16 KiB messages,
# 5 s per row), printing the comparison table. As root it measures over a
# veth wire between two network namespaces, each side's receive work on
# its own CPU (run --wire auto); elsewhere over loopback, saying why.
comma := ,
BENCH_PEERS := $(if $(filter Linux,$(shell uname -s)),go$(comma)epoll,go)
bench:
	$(GO) run ./cmd/sluice-bench run --peers $(BENCH_PEERS)

# perf-table regenerates the performance tables of README.md and
# docs/benchmarking.md from the JSON reports each names
# (scripts/fio-targets.sh writes them); a test fails when a table differs
# from its reports.
perf-table:
	$(GO) run ./cmd/sluice-bench tables --files README.md,docs/benchmarking.md,docs/jetstream.md

# soak is the long form of the soak that `make test` runs for 60s under
# the race detector (TestSoak in internal/app/soak): every kind of source on
# one engine for SOAK (10m), then no mismatch and no leak; the report goes
# to bench/out/soak.json. SOAK_FLAGS adds flags, e.g.
# --runner epoll; SLUICE_SOAK=10m runs TestSoak that long instead.
SOAK ?= 10m
SOAK_FLAGS ?=
soak: deps sluice-soak
	mkdir -p bench/out
	./sluice-soak --duration $(SOAK) --json bench/out/soak.json $(SOAK_FLAGS)

sluice-soak:
	$(GO) build -o sluice-soak ./cmd/sluice-soak

# microbench runs the micro benchmarks that guard the hot paths.
microbench:
	$(GO) test -run '^$$' -bench . -benchmem -count=1 ./pool/ ./internal/runner/uring/ ./ring/ ./fallback/ ./srcs/ ./internal/runner/driver/ ./bench/load/

clean:
	$(GO) clean -testcache

# raftq build. Every tool a target needs is installed by the target itself
# into ./bin (Go tools, pinned) or via apt-get (protoc).
SHELL := /bin/bash
GO ?= go
BIN := $(CURDIR)/bin
export PATH := $(BIN):$(PATH)

PROTOC_GEN_GO_VERSION := v1.36.12
PROTOC_GEN_GO_GRPC_VERSION := v1.5.1
# staticcheck 2026.1; the module proxy serves it by its semver tag.
STATICCHECK_VERSION := v0.7.0

RAFTQ := $(BIN)/raftq

# The benchmark is a module of its own (test/bench/go.mod), so the broker's
# go.mod lists only what the broker uses; `go test ./...` at the root skips
# a nested module, so every target that covers the code runs it explicitly.
BENCH_MOD := test/bench

.PHONY: build run test test-short proto lint bench fuzz cluster clean image image-prereqs

# `raftq version` reports VERSION (git describe) and the commit; the go
# command stamps the commit too when it can (not in a git worktree, nor
# under GOFLAGS=-buildvcs=false), so it is passed explicitly as well.
VERSION ?= $(shell git describe --tags --always --dirty 2>/dev/null || echo dev)
COMMIT ?= $(shell git rev-parse HEAD 2>/dev/null)
LDFLAGS := -X main.version=$(VERSION) -X main.commit=$(COMMIT)
export RAFTQ_LDFLAGS := $(LDFLAGS)

build:
	$(GO) build -ldflags "$(LDFLAGS)" -o $(RAFTQ) ./cmd/raftq

# The container image: a static binary in a FROM scratch image (no registry
# pull), tagged $(IMAGE). deploy/compose.yaml runs three of them.
IMAGE ?= raftq:dev
image: image-prereqs
	deploy/build-image.sh $(IMAGE)

# The image carries the build machine's CA bundle.
image-prereqs:
	@test -s /etc/ssl/certs/ca-certificates.crt || (apt-get update && apt-get install -y ca-certificates)

# A working single-node broker with no flags (data in ./raftq-data).
run: build
	$(RAFTQ) serve

# A three-node cluster on loopback (ports 7400-7423), data in a temp dir.
# A node that dies is restarted after 5 s (raftq dev --restart-after).
cluster: build
	$(RAFTQ) dev --nodes 3

# Debian packages some tests drive: chromium (the dashboard's browser
# test), prometheus (promtool checks the alert rules) and curl (the JSON
# API's documented curl lines). Installed with
# apt-get when missing; where that cannot be done (not root, no network)
# the tests that need them skip and say why, so this never fails.
DEB_TEST_TOOLS := chromium:chromium prometheus:promtool curl:curl

.PHONY: test-tools
test-tools:
	@missing=""; for pt in $(DEB_TEST_TOOLS); do \
	  command -v $${pt#*:} >/dev/null || missing="$$missing $${pt%%:*}"; done; \
	if [ -n "$$missing" ]; then \
	  echo "installing$$missing (apt-get)"; \
	  (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends $$missing >/dev/null) \
	    || echo "could not install$$missing: the tests that need them will skip"; \
	fi

# Test artifacts (the dashboard's screenshots) are kept in test-artifacts/.
ARTIFACTS := $(CURDIR)/test-artifacts

# Tests build with the raftqfault tag: it adds the fault injection the
# self-healing tests use (fsm/fault.go); no binary is built with it.
TEST_TAGS := raftqfault

# gofmt lists every Go file of both modules.
test: test-tools
	$(GO) vet ./...
	$(GO) vet -tags $(TEST_TAGS) ./...
	cd $(BENCH_MOD) && $(GO) vet ./...
	@unformatted=$$(gofmt -l $$(git ls-files '*.go' 2>/dev/null || find . -name '*.go')); \
	  if [ -n "$$unformatted" ]; then echo "gofmt needed:"; echo "$$unformatted"; exit 1; fi
	mkdir -p $(ARTIFACTS)
	$(GO) test -race -count=1 -tags $(TEST_TAGS) -timeout 14m -artifacts -outputdir $(ARTIFACTS) ./...
	cd $(BENCH_MOD) && $(GO) test -race -count=1 -timeout 10m ./...

test-short:
	$(GO) test -race -count=1 -tags $(TEST_TAGS) -short ./...
	cd $(BENCH_MOD) && $(GO) test -race -count=1 -short ./...

$(BIN)/protoc-gen-go:
	GOBIN=$(BIN) $(GO) install google.golang.org/protobuf/cmd/protoc-gen-go@$(PROTOC_GEN_GO_VERSION)

$(BIN)/protoc-gen-go-grpc:
	GOBIN=$(BIN) $(GO) install google.golang.org/grpc/cmd/protoc-gen-go-grpc@$(PROTOC_GEN_GO_GRPC_VERSION)

.PHONY: protoc-installed
protoc-installed:
	@{ command -v protoc >/dev/null && test -s /usr/include/google/protobuf/any.proto; } || \
	  (apt-get update && apt-get install -y protobuf-compiler libprotobuf-dev)

proto: protoc-installed $(BIN)/protoc-gen-go $(BIN)/protoc-gen-go-grpc python-proto
	protoc -I proto -I /usr/include \
	  --go_out=proto --go_opt=paths=source_relative \
	  --go-grpc_out=proto --go-grpc_opt=paths=source_relative \
	  proto/raftq/v1/raftq.proto proto/raftq/fsm/v1/command.proto proto/raftq/meta/v1/meta.proto

$(BIN)/staticcheck:
	GOBIN=$(BIN) $(GO) install honnef.co/go/tools/cmd/staticcheck@$(STATICCHECK_VERSION)

lint: $(BIN)/staticcheck
	$(GO) vet ./...
	cd $(BENCH_MOD) && $(GO) vet ./...
	test -z "$$(gofmt -l $$(git ls-files '*.go'))"
	$(BIN)/staticcheck -tags $(TEST_TAGS) ./...
	cd $(BENCH_MOD) && $(BIN)/staticcheck ./...

# Benchmarks report figures; they never fail on speed (docs/benchmarks.md).
# `make bench` runs the workload against raftq with 1 and 3 nodes and with 3
# secured nodes (TLS, mTLS Raft, gossip key, token auth: the cost of security
# as a same-run ratio against raftq-3), then the memory/snapshot/restart
# figures of one node; BENCH_FLAGS adds flags
# (cd test/bench && go run . -h lists them). Full results go to bin/*.json.
NATS_SERVER_VERSION := v2.15.2
BENCH_FLAGS ?=
.PHONY: bench-peers bench-peer-tools bench-unary

bench: build
	cd $(BENCH_MOD) && $(GO) run . -raftq-bin $(RAFTQ) -mode all -systems raftq-1,raftq-3,raftq-3-secure \
	  -json $(BIN)/bench.json $(BENCH_FLAGS)
	@echo "== scheduler selection cost: plain FIFO vs DRR over 1, 100, 10,000 fairness keys =="
	$(GO) test -run '^$$' -bench BenchmarkSelect -benchtime 2s ./scheduler
	@echo "== concurrency caps at 10,000 keys x 100 messages, every key at its cap of 1: grant rate against the same workload uncapped, same run (ratio; target >= 0.8) =="
	$(GO) test -run '^$$' -bench BenchmarkConcurrencyCaps -benchtime 1000x ./scheduler
	@echo "== how late a timed pause ends: its until_ms to its key's first grant, 3 nodes (p50/p99/max ms) =="
	RAFTQ_TEST_NORACE=1 $(GO) test -run '^$$' -bench BenchmarkPauseLateness -benchtime 60x ./test
	@echo "== FSM apply cost and the 1,000,000-message snapshot (heap, lock hold, persist, restore) =="
	$(GO) test -run '^$$' -bench 'BenchmarkApplyEnqueue' -benchtime 2000x ./fsm
	$(GO) test -run '^$$' -bench 'BenchmarkMillionMessages' -benchtime 1x ./fsm
	@echo "== enqueue and ack latency while 1,000,000 delayed messages come due at once: log version 12 (one entry sweeps all) vs 13 (bounded sweep) =="
	$(GO) test -run '^$$' -bench 'BenchmarkDueSweep' -benchtime 1x ./fsm

# The same workload (unary, batch and SDK clients) against NATS JetStream (3
# nodes, R3 file streams, default sync and sync_interval: always) and
# RabbitMQ quorum queues (3 nodes), with raftq-3 and raftq-3-secure beside
# them, then the memory mode, and issue 15's target table (security off and
# on) from this one run. A peer that
# cannot be installed or started is reported as NOT RUN with the reason;
# raftq's figures are printed regardless.
bench-peers: build
	@$(MAKE) --no-print-directory bench-peer-tools || \
	  echo "bench-peers: WARNING: a peer could not be installed; it will be reported as not run"
	cd $(BENCH_MOD) && $(GO) run . -raftq-bin $(RAFTQ) -mode throughput,memory \
	  -systems raftq-3,raftq-3-secure,nats-sync,nats,rabbitmq -target-bases raftq-3,raftq-3-secure \
	  -nats-server $(BIN)/nats-server -json $(BIN)/bench-peers.json -targets-md $(BIN)/bench-peers-targets.md $(BENCH_FLAGS)

# The server's cost per call on the path most clients take: one message per
# unary Enqueue, one unary Ack per message (test/unary_bench_test.go: leader
# CPU, allocations and Raft entries per message; RAFTQ_BENCH_VARIANTS
# compares binaries or settings in alternating rounds of one run;
# `RAFTQ_BENCH_NODE_CPUS=1 taskset -c 0 make bench-unary` puts the nodes
# and the load generator on separate cores, so that the client's and the
# servers' CPU per message are each their own).
UNARY_BENCH ?= Unary
bench-unary:
	RAFTQ_TEST_NORACE=1 $(GO) test -run '^$$' -bench '$(UNARY_BENCH)' -benchtime 20000x -timeout 30m ./test

bench-peer-tools:
	@$(BIN)/nats-server --version 2>/dev/null | grep -q '$(NATS_SERVER_VERSION)' || \
	  GOBIN=$(BIN) $(GO) install github.com/nats-io/nats-server/v2@$(NATS_SERVER_VERSION)
	@test -x /usr/lib/rabbitmq/bin/rabbitmq-server || \
	  (apt-get update && DEBIAN_FRONTEND=noninteractive apt-get install -y rabbitmq-server)

fuzz:
	$(GO) test -run '^$$' -fuzz FuzzDecodeCommand -fuzztime 60s ./fsm
	$(GO) test -run '^$$' -fuzz FuzzRestore -fuzztime 60s ./fsm
	$(GO) test -run '^$$' -fuzz FuzzDecode -fuzztime 60s ./raftmux
	$(GO) test -run '^$$' -fuzz FuzzDecode -fuzztime 60s ./meta
	$(GO) test -run '^$$' -fuzz FuzzOperations -fuzztime 60s ./internal/btree

clean:
	rm -rf $(BIN) raftq-data

# Chaos tests (test/chaos) need root, ip and iptables: nodes run in network
# namespaces and faults are iptables rules inside them. As root, install
# what is missing; the tests skip with a message saying what is missing
# when they still cannot run. `make test` gets this prerequisite too, so CI
# (root, fresh machine) runs the short chaos run instead of skipping it.
.PHONY: chaos chaos-prereqs
chaos-prereqs:
	@if [ "$$(id -u)" = 0 ]; then \
	  command -v ip >/dev/null || (apt-get update && apt-get install -y iproute2) || echo "warning: could not install iproute2; chaos tests will skip"; \
	  command -v iptables >/dev/null || (apt-get update && apt-get install -y iptables) || echo "warning: could not install iptables; chaos tests will skip"; \
	else echo "note: not root; chaos tests will skip"; fi
test: chaos-prereqs

# A longer chaos campaign: every fault on 3 and 5 nodes. Knobs (env):
# RAFTQ_CHAOS_DURATION (fault phase per cluster size, default 3m),
# RAFTQ_CHAOS_SEED (replay), RAFTQ_CHAOS_NODES (e.g. 3,5),
# RAFTQ_CHAOS_FAULTS (e.g. pause,latency), RAFTQ_CHAOS_OUT (report dir).
chaos: chaos-prereqs
	RAFTQ_CHAOS=1 $(GO) test -race -count=1 -v -run 'TestChaosCampaign' -timeout 60m ./test/chaos

# The soak (not part of `make test`): the chaos workload and faults on 3
# nodes for RAFTQ_SOAK_DURATION (default 30m) after a warm-up that lasts
# until the backlog and RSS are steady (at most RAFTQ_SOAK_WARMUP, 8m),
# every node's RSS, goroutines, open files and log size sampled every 15 s;
# fails if anything is lost or a resource is not flat (test/chaos/soak.go,
# DESIGN.md). RAFTQ_CHAOS_SEED replays, RAFTQ_CHAOS_OUT keeps the
# report, RAFTQ_CHAOS_FAULTS picks the fault kinds (all by default). SOAK_TIMEOUT must cover warm-up + 1.5 x duration + 10m.
SOAK_TIMEOUT ?= 80m
.PHONY: soak
soak: chaos-prereqs
	RAFTQ_SOAK=1 $(GO) test -race -count=1 -v -run 'TestSoak' -timeout $(SOAK_TIMEOUT) ./test/chaos

# The Python client (clients/python, package raftq). Only Debian's Python
# packages are used (no package index): /usr/bin/python3 with
# python3-grpcio, python3-protobuf, python3-pytest and python3-venv, and
# protoc with grpc_python_plugin for the stubs, installed with apt-get when
# missing. In CI (CI set) a package that cannot be installed fails the
# suite; it never skips. The stubs (raftq/v1 and the google/rpc messages
# it uses, vendored under raftq._proto) are committed; python-proto
# regenerates them.
PY := /usr/bin/python3
PY_DIR := clients/python
PY_PROTO := $(PY_DIR)/src/raftq/_proto
PY_VENV := $(BIN)/pyvenv
# libprotobuf-dev holds the well-known .proto files (google/protobuf/any.proto
# ...) under /usr/include; protobuf-compiler only recommends it, and
# --no-install-recommends leaves it out.
PY_DEBS := python3-grpcio python3-protobuf python3-pytest python3-venv python3-setuptools python3-wheel protobuf-compiler protobuf-compiler-grpc libprotobuf-dev

.PHONY: python-tools python-proto python-venv python-test python-bench
python-tools:
	@if ! { test -x $(PY) && $(PY) -c 'import grpc, google.protobuf, pytest, venv, setuptools, wheel' 2>/dev/null && \
	    command -v protoc >/dev/null && command -v grpc_python_plugin >/dev/null && test -s /usr/include/google/protobuf/any.proto; }; then \
	  echo "installing $(PY_DEBS) (apt-get)"; \
	  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends $(PY_DEBS) >/dev/null; \
	fi
	@$(PY) -c 'import grpc, google.protobuf, pytest, venv, setuptools, wheel' && command -v grpc_python_plugin >/dev/null && \
	  test -s /usr/include/google/protobuf/any.proto

python-proto: python-tools
	rm -rf $(PY_PROTO)/raftq $(PY_PROTO)/google
	protoc -I proto -I /usr/include \
	  --python_out=$(PY_PROTO) --pyi_out=$(PY_PROTO) \
	  --grpc_python_out=$(PY_PROTO) --plugin=protoc-gen-grpc_python=$$(command -v grpc_python_plugin) \
	  proto/raftq/v1/raftq.proto proto/google/rpc/status.proto proto/google/rpc/error_details.proto
	rm -f $(PY_PROTO)/google/rpc/*_grpc.py
	$(PY) $(PY_DIR)/genfix.py $(PY_PROTO)

# A venv that sees Debian's grpcio and protobuf, with the client
# installed into it from the source tree (no index, no build isolation).
$(PY_VENV)/bin/python: | python-tools
	$(PY) -m venv --system-site-packages $(PY_VENV)

python-venv: python-tools $(PY_VENV)/bin/python
	$(PY_VENV)/bin/pip install -q --no-deps --no-build-isolation --no-index $(PY_DIR)

# The pytest suite starts its own nodes of $(RAFTQ).
python-test: build python-venv
	cd $(PY_DIR) && RAFTQ_BIN=$(RAFTQ) $(PY_VENV)/bin/python -m pytest -q tests
test: python-test

# Issue 25's figures (docs/benchmarks.md): a Python worker pool's drain of
# 1 KiB messages beside the Go SDK consumer's, and JSON-over-HTTP unary
# Enqueue calls/s beside gRPC's, from one run on one 3-node cluster
# (test/polyglot_bench_test.go). Figures only; nothing is asserted.
.PHONY: bench-polyglot
bench-polyglot: python-venv
	RAFTQ_TEST_NORACE=1 RAFTQ_BENCH_PYTHON=$(PY_VENV)/bin/python $(GO) test -run '^$$' -bench Polyglot -benchtime 1x -timeout 30m ./test

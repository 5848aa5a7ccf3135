# sluice: `make test` runs every test; `make bench` the benchmarks.
GO        ?= go
MODULE    := github.com/sluicehq/sluice
# Packages with concurrency run under the race detector.
RACE_PKGS := ./consumer/... ./sinks/... ./flows/... ./checkpoint/... ./cdc/... ./backfill/... ./metrics/...

.PHONY: all build test test-unit test-race test-integration bench fmt vet demo

all: build

build:
	CGO_ENABLED=0 $(GO) build -buildvcs=auto -trimpath -o bin/sluice ./cmd/sluice

# A throwaway ClickHouse server for the tests (scripts/clickhouse-test-server
# installs the package when it is missing and runs as root). With CI=true a
# server that does not start fails the run; elsewhere its tests skip.
CH_DIR ?= $(CURDIR)/.clickhouse-test
# Tests that need a cluster (sinks/clickhouse/chtest.SharedCluster) start one
# per test binary with scripts/clickhouse-test-cluster, under this folder, at
# their first use: about 3 s and 400 MB (docs/clickhouse.md#test-cluster).
# What a crashed or timed-out test binary left there is removed at the end.
CH_CLUSTER_ROOT ?= $(CH_DIR).clusters

# flows, the longest package, runs beside everything else: its cases on
# the test clusters mostly wait for ON CLUSTER statements. The others run
# two at a time (they too mostly wait for servers and brokers' sessions),
# then the race pass. Every pass runs, and the exit status is a failure
# when any failed.
test: vet
	@set -e; \
	export SLUICE_CLICKHOUSE_CLUSTER_ROOT=$(CH_CLUSTER_ROOT); \
	trap 'scripts/clickhouse-test-cluster stop-all $(CH_CLUSTER_ROOT)' EXIT; \
	if env=$$(scripts/clickhouse-test-server start $(CH_DIR)); then \
		eval "$$env"; trap 'scripts/clickhouse-test-server stop $(CH_DIR); scripts/clickhouse-test-cluster stop-all $(CH_CLUSTER_ROOT)' EXIT; \
	elif [ "$$CI" = true ]; then echo "make test: ClickHouse test server did not start" >&2; exit 1; \
	else echo "make test: no ClickHouse test server; its tests skip" >&2; fi; \
	rc=0; \
	$(GO) test -count=1 -timeout 20m ./flows/ & flows=$$!; \
	$(GO) test -count=1 -p 2 -timeout 20m $$($(GO) list ./... | grep -vx '$(MODULE)/flows') || rc=1; \
	$(GO) test -count=1 -race -timeout 20m $(RACE_PKGS) || rc=1; \
	wait $$flows || rc=1; \
	exit $$rc

vet:
	@test -z "$$(gofmt -l $$(git ls-files '*.go' 2>/dev/null || find . -name '*.go'))" || (gofmt -l . && echo "gofmt: files above need formatting" && exit 1)
	$(GO) vet ./...

bench:
	$(GO) test -run '^$$' -bench . -benchmem -benchtime 1x ./integration/ -timeout 90m
	$(GO) test -run '^$$' -bench . -benchmem ./flows/decode/ ./flows/wire/ ./sinks/local/ -timeout 30m

demo:
	$(GO) run ./cmd/sluice demo

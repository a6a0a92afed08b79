# Developer entry points. `make test` is the project's test command: it starts
# real servers (Redis, a Redis Cluster, Valkey or Redis, PostgreSQL, dynalite)
# on loopback ports, runs the Go tests against them with -race, and stops
# them again. scripts/servers.sh installs the servers; internal/testserver
# (Up and Down, run by its cmd/testservers) starts and stops them. See
# scripts/servers.sh for the RATELIMIT_* variables that point the tests at
# servers of your own instead.

# Extra arguments for go test, e.g. make test TESTARGS='-run TestRedis ./...'.
TESTARGS ?=
# Benchmarks to run with make bench (a -bench pattern).
BENCH ?= .
# Traces per store for make check-long (docs/checker.md).
CHECKS ?= 2000
# Where make servers-up keeps its state (and env file).
SERVERS_STATE ?= /tmp/ratelimit-servers-state

.PHONY: test test-short check-long bench servers-up servers-down fmt vet

## test: go test -race -count=1 ./... with all servers up
test:
	bash scripts/test.sh $(TESTARGS)

## test-short: the same with -short
test-short:
	bash scripts/test.sh -short $(or $(TESTARGS),./...)

## check-long: the model-based checker (docs/checker.md) with CHECKS traces per store
check-long:
	RATELIMIT_CHECKS=$(CHECKS) bash scripts/with-servers.sh go test -race -count=1 -timeout 60m -run 'TestChecker' . ./conformance/

## bench: benchmarks (no tests) with all servers up
bench:
	bash scripts/with-servers.sh go test -run '^$$' -bench '$(BENCH)' -benchmem ./...

## servers-up: start the servers and leave them running; source the env file it names
servers-up:
	bash scripts/servers.sh start $(SERVERS_STATE)
	@echo "run: source $(SERVERS_STATE)/env"

## servers-down: stop what servers-up started
servers-down:
	bash scripts/servers.sh stop $(SERVERS_STATE)

## fmt: list files gofmt would change (fails if any)
fmt:
	@out=$$(gofmt -l . | grep -v '/node_modules/' || true); \
	if [ -n "$$out" ]; then echo "gofmt would change:"; echo "$$out"; exit 1; fi

## vet: go vet ./...
vet:
	go vet ./...

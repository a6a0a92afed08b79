#!/usr/bin/env bash
# Regenerates the lease figures of docs/benchmarks.md: starts the servers
# (scripts/with-servers.sh leaves alone those RATELIMIT_* already name), prints the load, and runs
# TestLeaseReport. Usage: bash bench/lease/run.sh
set -euo pipefail
cd "$(dirname "$0")/../.."
cmd='uptime; cd bench && RATELIMIT_BENCH_REPORT=1 go test -count=1 -timeout 30m -run "^TestLeaseReport$" -v ./lease/; uptime'
bash scripts/with-servers.sh bash -c "$cmd"

#!/usr/bin/env bash
# The project's test command: run the Go tests against real servers.
#
#   scripts/test.sh                 go test -race -count=1 ./...
#   scripts/test.sh ARGS...         go test -race -count=1 ARGS...
#                                   (e.g. -run TestRedis ./store/redis/...)
#
# Servers come up through scripts/with-servers.sh and are stopped on exit;
# the exit status is go test's. CI (and every other variable) is passed
# through: with CI set, a test whose server is missing fails instead of
# skipping.
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
if [ $# -eq 0 ]; then set -- ./...; fi
exec bash "$ROOT/scripts/with-servers.sh" go test -race -count=1 "$@"

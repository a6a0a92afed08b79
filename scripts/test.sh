#!/usr/bin/env bash
# The project's test command: run the Go tests against real servers.
#
#   scripts/test.sh                 go test -race -count=1 ./... in the SDK's
#                                   module and in every other module of the
#                                   tree (otellimit/, ...) but bench/
#   scripts/test.sh ARGS...         go test -race -count=1 ARGS...
#                                   (e.g. -run TestRedis ./store/redis/...)
#
# Servers come up through scripts/with-servers.sh and are stopped on exit;
# the exit status is go test's. CI (and every other variable) is passed
# through: with CI set, a test whose server is missing fails instead of
# skipping.
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
if [ $# -gt 0 ]; then
  exec bash "$ROOT/scripts/with-servers.sh" go test -race -count=1 "$@"
fi

# Without arguments: the SDK's module, then every other module in the tree
# (each directory with a go.mod but the root, bench/ and node_modules), all
# with the same servers up; the status is the first failure's.
modules=$(cd "$ROOT" && find . -name go.mod -not -path ./go.mod -not -path './bench/*' \
  -not -path '*/node_modules/*' -exec dirname {} \; | sort)
# shellcheck disable=SC2016 # expanded by the inner shell
exec bash "$ROOT/scripts/with-servers.sh" bash -c '
  rc=0
  go test -race -count=1 ./... || rc=$?
  for m in "$@"; do
    echo "== go test in $m"
    (cd "$m" && go test -race -count=1 ./...) || { s=$?; [ "$rc" -ne 0 ] || rc=$s; }
  done
  exit "$rc"' test.sh $modules

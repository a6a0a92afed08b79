#!/usr/bin/env bash
# Reproduces the memory-store figures in docs/benchmarks.md. Run from the
# repository root or anywhere: bash bench/memory/run.sh [rounds] [outdir]
#
# The side-by-side benchmarks run in rounds (-count 1, repeated) rather than
# with one -count N: within a round each SDK sample runs right after the
# x/time/rate samples it is compared with, so every pair was measured
# seconds apart, and ratios prints medians and the median paired ratio.
set -euo pipefail
rounds=${1:-8}
out=${2:-$(mktemp -d)}
cd "$(dirname "${BASH_SOURCE[0]}")/.."
go version | tee "$out/machine.txt"
nproc | sed 's/^/cores: /' | tee -a "$out/machine.txt"
for i in $(seq "$rounds"); do
	echo "== round $i of $rounds" >&2
	go test -run '^$' -bench 'HotKey|ManyKeys' -benchmem -benchtime 300ms -cpu 1,2 -count 1 ./memory/
done > "$out/side-by-side.txt"
go run ./memory/ratios < "$out/side-by-side.txt" | tee "$out/ratios.md"
go test -run '^$' -bench Footprint -benchtime 1x ./memory/ | tee "$out/footprint-x-time-rate.txt"
(cd .. && go test -run '^$' -bench Footprint -benchtime 1x ./store/memory/) | tee "$out/footprint.txt"
echo "results in $out" >&2

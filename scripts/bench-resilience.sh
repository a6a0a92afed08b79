#!/usr/bin/env bash
# Regenerate the figures of docs/benchmarks.md's section "Failures, deny
# cache and observer": the benchmarks in guard_bench_test.go, which start
# private redis-servers of their own (redis-server on PATH; make test
# installs it).
#
#   scripts/bench-resilience.sh [ROUNDS]    ROUNDS of each interleaved
#                                           comparison (default 301 for the
#                                           outage, 9 for the deny cache)
#
# Prints the raw benchmark lines, then a markdown summary with the load.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
rounds=${1:-301}
attack_rounds=$(( rounds >= 301 ? 9 : (rounds < 3 ? 3 : rounds) ))
out=$(mktemp)
trap 'rm -f "$out"' EXIT

echo "load before: $(uptime)"
run() { go test -run '^$' "$@" . 2>&1 | grep -E '^Benchmark' | tee -a "$out"; }
run -bench 'BenchmarkObserver' -benchmem -count 5
run -bench 'BenchmarkOutage$' -benchmem -count 5
run -bench 'BenchmarkOutageRatio' -benchtime "${rounds}x" -cpu 1
run -bench 'BenchmarkDenyCacheHotKey' -benchtime "${attack_rounds}x"
echo "load after: $(uptime)"

# metric NAME UNIT: the values of UNIT on the lines of benchmark NAME.
metric() { awk -v name="$1" -v unit="$2" '$1 ~ "^"name"(-[0-9]+)?$" { for (i = 3; i < NF; i++) if ($(i+1) == unit) print $i }' "$out"; }
median() { sort -g | awk '{ v[NR] = $1 } END { if (NR) print v[int((NR+1)/2)] }'; }
# spread NAME PREFIX: "q1–q3; min–max" of a benchmark's reportSpread metrics.
spread() { echo "$(metric "$1" "$2-q1")–$(metric "$1" "$2-q3"); $(metric "$1" "$2-min")–$(metric "$1" "$2-max")"; }
range() { sort -g | awk 'NR == 1 { lo = $1 } { hi = $1 } END { if (NR) print lo "–" hi }'; }

echo
echo "| figure | median | range (quartiles; min–max) | bar |"
echo "|---|---|---|---|"
for side in unset set; do
  echo "| observer $side: ns/op (5 runs, GOMAXPROCS=$(nproc)) | $(metric "BenchmarkObserver/$side" ns/op | median) | $(metric "BenchmarkObserver/$side" ns/op | range) | |"
  echo "| observer $side: allocs/op | $(metric "BenchmarkObserver/$side" allocs/op | median) | $(metric "BenchmarkObserver/$side" allocs/op | range) | $([ "$side" = unset ] && echo '0 allocs') |"
done
for side in memory breaker-open; do
  echo "| $side decision: ns/op (5 runs) | $(metric "BenchmarkOutage/$side" ns/op | median) | $(metric "BenchmarkOutage/$side" ns/op | range) | |"
  echo "| $side decision: allocs/op | $(metric "BenchmarkOutage/$side" allocs/op | median) | $(metric "BenchmarkOutage/$side" allocs/op | range) | |"
done
echo "| breaker open ÷ memory, thread CPU time, interleaved ($rounds rounds of 10,000 calls) | $(metric BenchmarkOutageRatio cpu-ratio-median) | $(spread BenchmarkOutageRatio cpu-ratio) | ≤ 1.20 |"
echo "| breaker open ÷ memory, wall time, same rounds | $(metric BenchmarkOutageRatio ratio-median) | $(spread BenchmarkOutageRatio ratio) | ≤ 1.20 |"
echo "| hot key, store calls/s without the deny cache ($attack_rounds rounds) | $(metric BenchmarkDenyCacheHotKey calls/s-off-median) | $(spread BenchmarkDenyCacheHotKey calls/s-off) | |"
echo "| hot key, store calls/s with the deny cache | $(metric BenchmarkDenyCacheHotKey calls/s-on-median) | $(spread BenchmarkDenyCacheHotKey calls/s-on) | |"
echo "| hot key, % fewer store calls per round | $(metric BenchmarkDenyCacheHotKey %fewer-median) | $(spread BenchmarkDenyCacheHotKey %fewer) | ≥ 90 |"
echo "| hot key, admissions beyond the limit (all rounds) | $(metric BenchmarkDenyCacheHotKey extra-admissions) | | 0 |"

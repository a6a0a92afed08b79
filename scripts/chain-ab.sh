#!/usr/bin/env bash
# Holds a change to the limiter's decision path to "no option's path gets
# slower": builds the root package's test binary at BASE_COMMIT and at the
# working tree, runs each case of BenchmarkChain with the two builds
# alternately, ROUNDS times, and prints per case the median CPU time per
# decision of each build (cpu-ns/op, the benchmark thread's CPU time, which
# other work on the machine disturbs less than wall time) and the median,
# minimum and maximum of the per-round ratios base/head (above 1: head is
# faster; the bar is a median of at least 0.97).
#
#	bash scripts/chain-ab.sh BASE_COMMIT [ROUNDS] [CASES]
#
# CASES is a regular expression of BenchmarkChain's case names (default:
# every case). The breaker-open case needs a Redis it can stop
# (RATELIMIT_REDIS_ADDR, as make servers-up provides); without one it is
# skipped. The machine's load is printed before and after: quote figures
# taken with nothing else running.
set -euo pipefail
base=${1:?usage: chain-ab.sh BASE_COMMIT [ROUNDS] [CASES]}
rounds=${2:-15} cases=${3:-.}
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
tmp=$(mktemp -d "${TMPDIR:-/tmp}/ratelimit-chain-ab.XXXXXX")
trap 'rm -rf "$tmp"' EXIT
mkdir "$tmp/base"
git -C "$root" archive "$base" | tar -x -C "$tmp/base"
# The benchmark itself as in the working tree (a base from before it
# existed gets it too), with the observer adapter it uses where the base
# lacks one.
cp "$root/chain_bench_test.go" "$tmp/base/"
# A case of an option the base does not have (one line each) is left out.
for opt in $(grep -o 'ratelimit\.With[A-Za-z]*' "$root/chain_bench_test.go" | sort -u | cut -d. -f2); do
	if ! grep -q "^func $opt(" "$tmp/base/"*.go; then
		sed -i "/ratelimit\.$opt(/d" "$tmp/base/chain_bench_test.go"
	fi
done
if ! grep -q '^type observerFunc ' "$tmp/base/"*_test.go; then
	cat >"$tmp/base/observerfunc_test.go" <<'GO'
package ratelimit_test

import (
	"context"

	"github.com/ratelimitkit/ratelimit"
)

type observerFunc func(ctx context.Context, e ratelimit.Event)

func (f observerFunc) ObserveDecision(ctx context.Context, e ratelimit.Event) { f(ctx, e) }
GO
fi
(cd "$tmp/base" && go test -c -o "$tmp/base.test" .)
(cd "$root" && go test -c -o "$tmp/head.test" .)
names=$("$tmp/head.test" -test.run '^$' -test.bench "^BenchmarkChain/($cases)\$" -test.benchtime 1x -test.cpu 1 2>/dev/null |
	awk '/^BenchmarkChain\//{sub(/^BenchmarkChain\//, "", $1); print $1}')
echo "load before: $(cut -d' ' -f1-3 /proc/loadavg)"
for i in $(seq "$rounds"); do
	for c in $names; do
		for b in base head; do
			"$tmp/$b.test" -test.run '^$' -test.bench "^BenchmarkChain/$c\$" -test.benchtime 100000x -test.cpu 1 2>/dev/null |
				awk -v b="$b" -v c="$c" -v r="$i" '/cpu-ns\/op/{for (j = 1; j < NF; j++) if ($(j+1) == "cpu-ns/op") print r, c, b, $j}'
		done
	done
done >"$tmp/rows"
echo "load after: $(cut -d' ' -f1-3 /proc/loadavg)"
printf '%-14s %10s %10s %8s %8s %8s\n' case base-ns head-ns ratio min max
for c in $names; do
	awk -v c="$c" '$2 == c {v[$1, $3] = $4; r[$1] = 1}
		END {
			n = 0
			for (i in r) if ((i, "base") in v && (i, "head") in v) {
				n++; bs[n] = v[i, "base"]; hs[n] = v[i, "head"]; rs[n] = v[i, "base"] / v[i, "head"]
			}
			if (n == 0) exit
			printf "%-14s %10.1f %10.1f %8.3f %8.3f %8.3f\n", c, med(bs, n), med(hs, n), med(rs, n), lo(rs, n), hi(rs, n)
		}
		function sort(a, n,   i, j, t) { for (i = 2; i <= n; i++) for (j = i; j > 1 && a[j-1] > a[j]; j--) { t = a[j]; a[j] = a[j-1]; a[j-1] = t } }
		function med(a, n) { sort(a, n); return n % 2 ? a[(n+1)/2] : (a[n/2] + a[n/2+1]) / 2 }
		function lo(a, n) { sort(a, n); return a[1] }
		function hi(a, n) { sort(a, n); return a[n] }' "$tmp/rows"
done

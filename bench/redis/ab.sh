#!/usr/bin/env bash
# Compares two builds of the SDK on one Redis/Valkey workload (TestAB),
# alternately, under one set of servers:
#
#	bash bench/redis/ab.sh BASE_COMMIT [GROUP] [SHAPE] [PAIRS] [ROUNDS] [N]
#
# builds bench/redis's test binary at BASE_COMMIT (from a git archive in
# a temporary directory) and at the working tree, then runs TestAB with
# each in turn PAIRS times (defaults: valkey, 10000keys/c32, 3 pairs of 7
# rounds of 20,000 decisions), printing the machine's load before and
# after. Read the per-build lines side by side: throughput ratios swing
# with the load, the client's allocations and CPU per decision much less.
set -euo pipefail
base=${1:?usage: ab.sh BASE_COMMIT [GROUP] [SHAPE] [PAIRS] [ROUNDS] [N]}
group=${2:-valkey} shape=${3:-10000keys/c32} pairs=${4:-3} rounds=${5:-7} n=${6:-20000}
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
tmp=$(mktemp -d "${TMPDIR:-/tmp}/ratelimit-ab.XXXXXX")
trap 'rm -rf "$tmp"' EXIT
mkdir "$tmp/base"
git -C "$root" archive "$base" | tar -x -C "$tmp/base"
cp "$root/bench/redis/ab_test.go" "$tmp/base/bench/redis/" # the probe itself as in the working tree
(cd "$tmp/base/bench" && go test -c -o "$tmp/base.test" ./redis/)
(cd "$root/bench" && go test -c -o "$tmp/head.test" ./redis/)
cat >"$tmp/run.sh" <<RUN
set -euo pipefail
echo "load before: \$(uptime)"
for i in \$(seq $pairs); do
	for b in base head; do
		RATELIMIT_AB_GROUP=$group RATELIMIT_AB_SHAPE=$shape RATELIMIT_BENCH_ROUNDS=$rounds RATELIMIT_AB_N=$n \
			"$tmp/\$b.test" -test.run '^TestAB\$' -test.count=1 | grep '^AB' | sed "s/^AB/\$b/"
	done
done
echo "load after: \$(uptime)"
RUN
"$root/scripts/with-servers.sh" bash "$tmp/run.sh"

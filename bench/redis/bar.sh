#!/usr/bin/env bash
# Measures the Redis bars of issue #13 item 1 (store/redis against
# redis_rate and ulule/limiter; see TestBar) and prints the tables with the
# machine's load. One command, from anywhere in the repository:
#
#	bash bench/redis/bar.sh [rounds]
#
# It uses RATELIMIT_REDIS_ADDR when set (the shared servers' env file
# sets it) and otherwise starts the project's servers for the run with
# scripts/with-servers.sh.
set -euo pipefail
rounds=${1:-9}
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
measure() {
	echo "commit $(git -C "$root" rev-parse --short HEAD), $(go version | cut -d' ' -f3), $(nproc) cores"
	echo "load before: $(uptime)"
	(cd "$root/bench" && RATELIMIT_BENCH_BAR=1 RATELIMIT_BENCH_ROUNDS="$rounds" \
		go test -count=1 -run '^TestBar$' -v -timeout 60m ./redis/ | grep -v '^=== RUN\|^--- PASS\|^PASS\|^ok')
	echo "load after: $(uptime)"
}
if [ -z "${RATELIMIT_REDIS_ADDR:-}" ]; then
	exec "$root/scripts/with-servers.sh" bash "$root/bench/redis/bar.sh" "$rounds"
fi
measure

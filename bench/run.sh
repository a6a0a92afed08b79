#!/usr/bin/env bash
# Regenerates the tables of docs/benchmarks.md: the one way its figures are
# produced. Each section runs one store's side-by-side benchmarks (the SDK
# and its peers in one process, interleaved) and replaces the text between
# the section's markers in docs/benchmarks.md,
#
#   <!-- bench:NAME -->
#   ...generated...
#   <!-- /bench:NAME -->
#
# with the tables, the command, the machine and its load (uptime) before and
# after. Prose outside the markers is written by hand.
#
#   bash bench/run.sh [SECTION...]     # default: memory redis dynamo
#
# Sections:
#   memory   bench/memory: the memory store beside x/time/rate,
#            sethvargo/go-limiter and ulule/limiter, in ROUNDS rounds
#            (default 8; about 3 minutes a round), and the footprint per key
#   redis    bench/redis: store/redis beside redis_rate, throttled,
#            ulule/limiter and INCR+PEXPIRE; store/valkey beside INCR+PEXPIRE
#            through valkey-go; over-admission on a hot key. On servers of
#            its own (scripts/with-servers.sh), since the report resets the
#            server's command statistics.
#
#   dynamo   bench/dynamo: store/dynamo against a bare UpdateItem ADD on
#            dynalite, and over-admission; on a dynalite of its own.
#
# A new store's section is a function named section_NAME that prints its
# Markdown to stdout, plus the markers in docs/benchmarks.md.
#
# Environment: ROUNDS (memory rounds), RATELIMIT_BENCH_ROUNDS (redis
# rounds, default 15), FOOTPRINT (0 skips the memory footprint, which takes
# a few minutes), MEMORY_BENCH (the memory section's
# -bench pattern, for a quick look at a few rows), OUT (directory for raw
# output; a new temporary one by default), DOC (the page to update;
# docs/benchmarks.md).
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
ROUNDS=${ROUNDS:-8}
MEMORY_BENCH=${MEMORY_BENCH:-HotKey|ManyKeys}
OUT=${OUT:-$(mktemp -d "${TMPDIR:-/tmp}/ratelimit-bench.XXXXXX")}
DOC=${DOC:-$ROOT/docs/benchmarks.md}
mkdir -p "$OUT"

machine() {
	local cpu
	cpu=$(grep -m1 'model name' /proc/cpuinfo 2>/dev/null | cut -d: -f2- | sed 's/^ *//' || true)
	echo "Machine: ${cpu:-unknown CPU}, $(nproc) cores, $(uname -sm), $(go version | cut -d' ' -f3), commit \`$(git -C "$ROOT" rev-parse --short HEAD)\`$(git -C "$ROOT" diff --quiet HEAD -- . ':!docs' || echo ' with uncommitted changes')."
}

load() { uptime | sed 's/.*load average: */load average (1, 5, 15 min): /'; }

section_memory() {
	local raw=$OUT/memory.txt loads=$OUT/memory-loads.txt
	: >"$raw"
	: >"$loads"
	echo "Command: \`ROUNDS=$ROUNDS bash bench/run.sh memory\`$([ "$MEMORY_BENCH" = 'HotKey|ManyKeys' ] || echo " with MEMORY_BENCH='$MEMORY_BENCH'"); $(machine)"
	echo
	echo "Load before: $(load)."
	for i in $(seq "$ROUNDS"); do
		echo "== memory round $i of $ROUNDS, $(load)" >&2
		load >>"$loads"
		(cd "$ROOT/bench" && go test -run '^$' -bench "$MEMORY_BENCH" -benchmem -benchtime 300ms -cpu 1,2 -count 1 ./memory/) >>"$raw"
	done
	echo "Load at the start of each round: $(sed 's/load average (1, 5, 15 min): //; s/,.*//' "$loads" | paste -sd, | sed 's/,/, /g') (1-minute averages); after: $(load)."
	echo
	(cd "$ROOT/bench" && go run ./memory/ratios <"$raw")
	[ "${FOOTPRINT:-1}" != 0 ] || return 0
	echo "Footprint: heap held per key after a garbage collection (\`BenchmarkFootprint\` in \`store/memory\` and \`bench/memory\`, \`-benchtime 1x\`):"
	echo
	echo "| what | bytes/key |"
	echo "|---|---:|"
	{
		(cd "$ROOT" && go test -run '^$' -bench Footprint -benchtime 1x ./store/memory/)
		(cd "$ROOT/bench" && go test -run '^$' -bench Footprint -benchtime 1x ./memory/)
	} | awk '$1 ~ /^BenchmarkFootprint\// { n = $1; sub(/^BenchmarkFootprint\//, "", n); sub(/-[0-9]+$/, "", n); for (i = 2; i < NF; i++) if ($(i+1) == "bytes/key") printf "| %s | %.0f |\n", n, $i }'
	echo
}

section_redis() {
	local tables=$OUT/redis.md
	: >"$tables"
	echo "Command: \`bash bench/run.sh redis\`$([ -z "${RATELIMIT_BENCH_ROUNDS:-}" ] || echo " with RATELIMIT_BENCH_ROUNDS=$RATELIMIT_BENCH_ROUNDS"); $(machine)"
	echo
	echo "Load before: $(load)."
	# A Redis and a Valkey of its own (the variables that would name shared
	# ones unset); the servers this section does not use are marked as
	# given, so that with-servers.sh does not start them.
	(cd "$ROOT" && env -u RATELIMIT_REDIS_ADDR -u RATELIMIT_VALKEY_ADDR \
		RATELIMIT_REDIS_CLUSTER_ADDRS=unused RATELIMIT_POSTGRES_URL=unused RATELIMIT_DYNAMODB_ENDPOINT=unused \
		RATELIMIT_BENCH_REPORT=1 RATELIMIT_BENCH_OUT="$tables" CI=true \
		bash scripts/with-servers.sh bash -c 'cd bench && go test -count=1 -run "TestReport|TestOverAdmission" -timeout 60m ./redis/') >"$OUT/redis.txt" 2>&1 ||
		{ cat "$OUT/redis.txt" >&2; return 1; }
	echo "Load after: $(load)."
	cat "$tables"
}

# splice replaces the text between NAME's markers in $DOC with FILE.
splice() {
	local name=$1 file=$2
	grep -qx "<!-- bench:$name -->" "$DOC" || { echo "run.sh: no <!-- bench:$name --> marker in $DOC" >&2; return 1; }
	awk -v begin="<!-- bench:$name -->" -v end="<!-- /bench:$name -->" -v f="$file" '
		$0 == begin { print; while ((getline l < f) > 0) print l; skip = 1; next }
		$0 == end { skip = 0 }
		!skip { print }' "$DOC" >"$DOC.tmp"
	mv "$DOC.tmp" "$DOC"
}

section_dynamo() {
	echo "Command: \`bash bench/run.sh dynamo\`; $(machine)"
	echo
	echo "Load before: $(load)."
	(cd "$ROOT" && env -u RATELIMIT_DYNAMODB_ENDPOINT \
		RATELIMIT_REDIS_ADDR=unused RATELIMIT_REDIS_CLUSTER_ADDRS=unused RATELIMIT_VALKEY_ADDR=unused RATELIMIT_POSTGRES_URL=unused \
		CI=true bash scripts/with-servers.sh bash -c 'cd bench && go test -run "^$" -bench . -benchmem -timeout 60m ./dynamo/') >"$OUT/dynamo.txt" 2>&1 ||
		{ cat "$OUT/dynamo.txt" >&2; return 1; }
	echo "Load after: $(load)."
	echo
	echo "| benchmark | decisions/s | baseline ADDs/s | ratio | requests/decision | errors | over-admitted |"
	echo "|---|---:|---:|---:|---:|---:|---:|"
	awk '/^Benchmark/ {
		delete v; for (i = 3; i < NF; i += 2) v[$(i+1)] = $i
		n = $1; sub(/^Benchmark/, "", n); sub(/-[0-9]+$/, "", n)
		printf "| %s | %s | %s | %s | %s | %s | %s |\n", n, v["decisions/s"], v["adds/s"], v["ratio"], v["requests/decision"], v["errors"], v["over-admitted"]
	}' "$OUT/dynamo.txt"
	echo
	echo '```'
	grep '^Benchmark' "$OUT/dynamo.txt"
	echo '```'
}

sections=("$@")
[ ${#sections[@]} -gt 0 ] || sections=(memory redis dynamo)
for s in "${sections[@]}"; do
	declare -F "section_$s" >/dev/null || { echo "run.sh: unknown section $s" >&2; exit 2; }
done
for s in "${sections[@]}"; do
	echo "== section $s (raw output in $OUT)" >&2
	"section_$s" >"$OUT/$s.section.md"
	splice "$s" "$OUT/$s.section.md"
done
echo "updated $DOC; raw output in $OUT" >&2

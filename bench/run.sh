#!/usr/bin/env bash
# Regenerates the tables of docs/benchmarks.md and docs/scaling.md: the one
# way their figures are produced. Each section runs one store's benchmarks
# (the SDK and its peers or baselines in one process, interleaved) and
# replaces the text between the section's markers,
#
#   <!-- bench:NAME -->
#   ...generated...
#   <!-- /bench:NAME -->
#
# in docs/benchmarks.md (what the section prints) and in docs/scaling.md
# (what it writes to $OUT/NAME.scaling.md, when it does), with the tables,
# the command, the machine and its load (uptime) before and after. Prose
# outside the markers is written by hand.
#
#   bash bench/run.sh [SECTION...]     # default: every section, in this order
#
# Sections (each starts the servers it needs with scripts/with-servers.sh,
# on ports of its own, and stops them; none uses the shared test servers):
#   memory      bench/memory: the memory store beside x/time/rate,
#               sethvargo/go-limiter and ulule/limiter, in ROUNDS rounds
#               (default 8; about 3 minutes a round), and the footprint per key
#   redis       bench/redis: store/redis beside redis_rate, throttled,
#               ulule/limiter and INCR+PEXPIRE; store/valkey beside INCR+PEXPIRE
#               through valkey-go; over-admission on a hot key (the report
#               resets the server's command statistics).
#   slidinglog  bench/redis TestSlidingLogReport: SlidingLog(1000, ...) on a
#               hot key beside redis_rate's GCRA, 32 callers (about a minute).
#   postgres    bench/postgres: GCRA and the token bucket against a bare
#               upsert, 16 callers, hot key and 10,000 keys, both
#               synchronous_commit settings, on a PostgreSQL of its own with
#               fsync turned on; throughput and database CPU per decision;
#               over-admission. Also docs/scaling.md's PostgreSQL figures.
#               About 3 minutes.
#   dynamo      bench/dynamo: store/dynamo against a bare UpdateItem ADD on
#               dynalite in 9 interleaved rounds, requests and capacity units
#               per decision, the cold cache, over-admission. Also
#               docs/scaling.md's DynamoDB figures. About 2 minutes.
#   rediscost   bench/redis BenchmarkServerCost: the server's CPU per decision
#               on Redis and Valkey, and BenchmarkClusterMigration: a hot key
#               whose hash slot moves between masters, on a Redis Cluster of
#               its own; for docs/scaling.md only. About 3 minutes.
#
#   cluster     bench/redis BenchmarkCluster: store/redis beside redis_rate and
#               INCR+PEXPIRE through one go-redis cluster client, and
#               store/valkey beside INCR+PEXPIRE through valkey-go, on a
#               3-master Redis Cluster of its own, 10,000 keys and a hot key
#               at 32 callers; and BenchmarkClusterMigrationKeys: 64 keys
#               whose slots move between masters under load. Also
#               docs/scaling.md's cluster figures. About 3 minutes.
#
#   composite   bench/redis TestCompositeReport: a composite of two limits
#               (algorithms.All, one round trip) against the same limits as
#               two limiters called one after the other, in
#               RATELIMIT_BENCH_ROUNDS rounds (default 9), on a Redis of its
#               own. About 2 minutes.
#
#   lease       bench/lease TestLeaseReport: lease TryAcquire + Release beside
#               bsm/redislock on one Redis, at one goroutine and at 16, where
#               a cycle's time goes, 32 goroutines contending for one key on
#               every store, and takeover after a holder stops (about a
#               minute; bench/lease/run.sh prints the same on the shared
#               test servers).
#
#   localquota  bench/redis TestLocalQuotaReport: one hot key at 32 callers,
#               the SDK with WithLocalQuota beside the SDK without it and
#               redis_rate, in RATELIMIT_BENCH_ROUNDS rounds (default 9),
#               with store calls per decision; and the root package's
#               TestLocalQuotaFourProcesses and TestLocalQuotaWindows: four
#               OS processes on one key held to each algorithm's stated
#               bound, and the under-admission measured. About a minute.
#
# A new section is a function named section_NAME that prints its Markdown
# for docs/benchmarks.md to stdout (nothing, if it has no table there) and
# may write $OUT/NAME.scaling.md, plus the markers in the page(s).
#
# Environment: ROUNDS (memory rounds), RATELIMIT_BENCH_ROUNDS (redis
# rounds, default 15), FOOTPRINT (0 skips the memory footprint, which takes
# a few minutes), MEMORY_BENCH (the memory section's
# -bench pattern, for a quick look at a few rows), OUT (directory for raw
# output; a new temporary one by default), DOC (docs/benchmarks.md),
# SCALING_DOC (docs/scaling.md).
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
ROUNDS=${ROUNDS:-8}
MEMORY_BENCH=${MEMORY_BENCH:-HotKey|ManyKeys}
OUT=${OUT:-$(mktemp -d "${TMPDIR:-/tmp}/ratelimit-bench.XXXXXX")}
DOC=${DOC:-$ROOT/docs/benchmarks.md}
SCALING_DOC=${SCALING_DOC:-$ROOT/docs/scaling.md}
mkdir -p "$OUT"

machine() {
	local cpu
	cpu=$(grep -m1 'model name' /proc/cpuinfo 2>/dev/null | cut -d: -f2- | sed 's/^ *//' || true)
	echo "Machine: ${cpu:-unknown CPU}, $(nproc) cores, $(uname -sm), $(go version | cut -d' ' -f3), commit \`$(git -C "$ROOT" rev-parse --short HEAD)\`$(git -C "$ROOT" diff --quiet HEAD -- . ':!docs' || echo ' with uncommitted changes')."
}

load() { uptime | sed 's/.*load average: */load average (1, 5, 15 min): /'; }

# PARSE is an awk function shared by the sections' awk programs: on a
# benchmark's result line, parse("BenchmarkX/") sets n to the benchmark's
# name without that prefix and the -GOMAXPROCS suffix, and v[UNIT] to each
# reported value.
PARSE='function parse(prefix,   i) { delete v; for (i = 3; i < NF; i += 2) v[$(i+1)] = $i; n = $1; sub("^" prefix, "", n); sub(/-[0-9]+$/, "", n) }'

# A note printed under every section's load lines.
loadnote() {
	echo
	echo "The machine has $(nproc) cores shared with other work; figures taken at a load average near or above that must be regenerated on a quiet machine (the same command) before they are relied on. Ratios come from both sides measured in one process, interleaved, and hold up under load better than absolute rates."
}

# with_own SERVERS COMMAND...: run COMMAND (from the repository root, under
# CI=true) with servers of its own started by scripts/with-servers.sh and
# stopped after it. SERVERS lists the RATELIMIT_* variables to start
# (REDIS_ADDR, VALKEY_ADDR, POSTGRES_URL, DYNAMODB_ENDPOINT, without the
# prefix); the others are marked as given so that no server is started for
# them, whatever the caller's environment holds.
with_own() {
	local want=" $1 " v
	shift
	local unset=() given=()
	for v in REDIS_ADDR REDIS_CLUSTER_ADDRS VALKEY_ADDR POSTGRES_URL DYNAMODB_ENDPOINT; do
		case $want in
			*" $v "*) unset+=(-u "RATELIMIT_$v") ;;
			*) given+=("RATELIMIT_$v=unused") ;;
		esac
	done
	(cd "$ROOT" && env "${unset[@]}" "${given[@]}" RATELIMIT_CHROMIUM=unused CI=true bash scripts/with-servers.sh "$@")
}

# measure NAME NOTE SERVERS SCRIPT is a report section's common part: it
# prints the command (bash bench/run.sh NAME, then NOTE), the machine and
# the load, runs SCRIPT (bash -c, from the repository root) with servers
# of its own (with_own SERVERS) into $OUT/NAME.txt, whose output it shows
# when it fails, and prints the load after and loadnote. The section then
# prints its tables from $OUT/NAME.txt.
measure() {
	local name=$1 note=$2 servers=$3 script=$4 raw=$OUT/$1.txt
	echo "Command: \`bash bench/run.sh $name\`$note; $(machine)"
	echo
	echo "Load before: $(load)."
	with_own "$servers" bash -c "$script" >"$raw" 2>&1 || { cat "$raw" >&2; return 1; }
	echo "Load after: $(load)."
	loadnote
}

# rounds_note is measure's NOTE for a section that takes
# RATELIMIT_BENCH_ROUNDS.
rounds_note() { [ -z "${RATELIMIT_BENCH_ROUNDS:-}" ] || echo " with RATELIMIT_BENCH_ROUNDS=$RATELIMIT_BENCH_ROUNDS"; }

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

section_composite() {
	measure composite "$(rounds_note)" "REDIS_ADDR" 'cd bench && RATELIMIT_BENCH_COMPOSITE=1 go test -count=1 -run "^TestCompositeReport$" -v -timeout 30m ./redis/' || return 1
	echo
	sed -n '/^ *composite_test.go:[0-9]*: *$/,/^--- /p' "$OUT/composite.txt" | sed '1d;$d; s/^        //'
}

section_lease() {
	measure lease ' (`TestLeaseReport` in `bench/lease`)' "REDIS_ADDR VALKEY_ADDR POSTGRES_URL DYNAMODB_ENDPOINT" 'cd bench && RATELIMIT_BENCH_REPORT=1 go test -count=1 -run "^TestLeaseReport$" -v -timeout 30m ./lease/' || return 1
	# The report: what the test prints after its last subtest starts.
	awk '/^=== RUN/ { buf = ""; next } /^--- (PASS|FAIL): TestLeaseReport / { printf "%s", buf; exit } { buf = buf $0 "\n" }' "$OUT/lease.txt"
}

section_localquota() {
	local raw=$OUT/localquota.txt
	measure localquota "$(rounds_note)" "REDIS_ADDR" '(cd bench && RATELIMIT_BENCH_LOCALQUOTA=1 go test -count=1 -run "^TestLocalQuotaReport$" -v -timeout 30m ./redis/) &&
		go test -count=1 -run "^TestLocalQuota(FourProcesses|Windows)$" -v -timeout 10m .' || return 1
	echo
	sed -n '/^ *localquota_test.go:[0-9]*: *$/,/^--- /p' "$raw" | sed '1d;$d; s/^        //'
	echo
	echo "Four processes (\`TestLocalQuotaFourProcesses\`: 1,000 per 500ms, burst 1,000, shares of at most 16 living 50ms, each process asking far more than the limit for 1.5s) and three quiet holders (\`TestLocalQuotaWindows\`), as the tests log them:"
	echo
	awk '/^=== RUN +TestLocalQuota(FourProcesses|Windows)\// { sub(/^=== RUN +/, ""); name = $0; next }
		name != "" && /^ +localquota_test.go:[0-9]+: ./ { sub(/^ +localquota_test.go:[0-9]+: /, ""); print "- " name ": " $0 }' "$raw"
}

# splice replaces the text between NAME's markers in the page DOC with FILE.
splice() {
	local name=$1 file=$2 doc=$3
	grep -qx "<!-- bench:$name -->" "$doc" || { echo "run.sh: no <!-- bench:$name --> marker in $doc" >&2; return 1; }
	awk -v begin="<!-- bench:$name -->" -v end="<!-- /bench:$name -->" -v f="$file" '
		$0 == begin { print; while ((getline l < f) > 0) print l; skip = 1; next }
		$0 == end { skip = 0 }
		!skip { print }' "$doc" >"$doc.tmp"
	mv "$doc.tmp" "$doc"
}

section_dynamo() {
	local raw=$OUT/dynamo.txt
	echo "Command: \`bash bench/run.sh dynamo\`; $(machine)"
	echo
	echo "Load before: $(load)."
	with_own DYNAMODB_ENDPOINT bash -c 'cd bench &&
		go test -run "^$" -bench StoreVsAdd -benchtime 1x -benchmem -timeout 30m ./dynamo/ &&
		go test -run "^$" -bench "ColdCache|OverAdmission" -benchmem -timeout 30m ./dynamo/' >"$raw" 2>&1 ||
		{ cat "$raw" >&2; return 1; }
	echo "Load after: $(load)."
	loadnote
	echo
	echo "16 callers, 9 interleaved rounds of 1,024 calls per side. Ratio: the median over the rounds of the store's decisions/s ÷ the bare ADD's in the same round (smallest–largest); rates are medians over the rounds; capacity units are what the endpoint reports consumed (\`ReturnConsumedCapacity\` TOTAL), summed over every request the store sent, per decision."
	echo
	echo "| workload | decisions/s | bare ADDs/s | ratio (range), bar ≥ 0.5 | requests/decision, bar ≤ 2.0 hot key, ≤ 1.2 10,000 keys | write units/decision | read units/decision | errors | bars (issue 4) |"
	echo "|---|---:|---:|---:|---:|---:|---:|---:|---|"
	awk "$PARSE"'/^BenchmarkStoreVsAdd\// {
		parse("BenchmarkStoreVsAdd/")
		bar = (n == "hot-key" ? 2.0 : 1.2)
		met = (v["ratio-median"] >= 0.5 && v["requests/decision"] <= bar && v["errors"] == 0) ? "met" : "**not met**"
		printf "| %s | %.0f | %.0f | %.2f (%.2f–%.2f) | %.3f | %.3f | %.3f | %d | %s |\n", n, v["decisions/s"], v["adds/s"], v["ratio-median"], v["ratio-min"], v["ratio-max"], v["requests/decision"], v["WCU/decision"], v["RCU/decision"], v["errors"], met
	}' "$raw"
	echo
	echo "| benchmark | decisions/s | requests/decision | write units/decision | read units/decision | errors | over-admitted |"
	echo "|---|---:|---:|---:|---:|---:|---:|"
	awk "$PARSE"'/^Benchmark(ColdCache|OverAdmission)/ {
		parse("Benchmark")
		printf "| %s | %s | %s | %s | %s | %s | %s |\n", n, v["decisions/s"], v["requests/decision"], v["WCU/decision"], v["RCU/decision"], v["errors"], v["over-admitted"]
	}' "$raw"
	echo
	echo '```'
	grep '^Benchmark' "$raw"
	echo '```'
	# docs/scaling.md: write units per decision, scaled.
	{
		echo "From \`bash bench/run.sh dynamo\` (the DynamoDB section of [benchmarks.md](benchmarks.md#dynamodb)); $(machine) Load after the run: $(load)."
		echo
		echo "| workload | write units/decision (measured) | write units/s for 1,000,000 decisions/s | partitions at 1,000 write units/s each | one key's ceiling: 1,000 ÷ write units/decision |"
		echo "|---|---:|---:|---:|---:|"
		awk "$PARSE"'/^BenchmarkStoreVsAdd\// {
			parse("BenchmarkStoreVsAdd/")
			w = v["WCU/decision"]
			if (n == "hot-key") # one key cannot reach a million a second
				printf "| %s | %.3f | n/a (one key) | n/a (one key) | 1,000 ÷ %.3f = %.0f decisions/s |\n", n, w, w, 1000 / w
			else
				printf "| %s | %.3f | 1,000,000 × %.3f = %.0f | %.0f ÷ 1,000 = %.0f | 1,000 ÷ %.3f = %.0f decisions/s |\n", n, w, w, 1e6 * w, 1e6 * w, 1e6 * w / 1000, w, 1000 / w
		}' "$raw"
	} >"$OUT/dynamo.scaling.md"
}

section_postgres() {
	local raw=$OUT/postgres.txt
	echo "Command: \`bash bench/run.sh postgres\`; $(machine)"
	echo
	echo "Load before: $(load)."
	# A PostgreSQL of its own, with fsync turned back on (scripts/servers.sh
	# starts it with fsync off), so that synchronous_commit = on waits for
	# the WAL to reach the disk.
	with_own POSTGRES_URL bash -c 'psql -X -q "$RATELIMIT_POSTGRES_URL" -c "ALTER SYSTEM SET fsync = on" -c "SELECT pg_reload_conf()" >/dev/null &&
		sleep 1 && echo "server: $(psql -X -At "$RATELIMIT_POSTGRES_URL" -c "SELECT version()" | cut -d, -f1), fsync=$(psql -X -At "$RATELIMIT_POSTGRES_URL" -c "SHOW fsync"), full_page_writes=$(psql -X -At "$RATELIMIT_POSTGRES_URL" -c "SHOW full_page_writes")" &&
		cd bench &&
		go test -run "^$" -bench PostgresRounds -benchtime 1x -benchmem -timeout 30m ./postgres/ &&
		go test -run "^$" -bench PostgresOverAdmission -benchtime 5x -benchmem -timeout 30m ./postgres/' >"$raw" 2>&1 ||
		{ cat "$raw" >&2; return 1; }
	echo "Load after: $(load)."
	loadnote
	echo
	echo "A private cluster ($(sed -n 's/^server: //p' "$raw"); the rest as \`scripts/servers.sh\` sets it), \`synchronous_commit\` set on the pool's 16 connections. 5 rounds of 3,000 calls per side, alternating which side goes first. Ratios: the median over the rounds of the store's figure ÷ the upsert's in the same round (smallest–largest); rates and CPU times are medians over the rounds. Database CPU: the time the pool's 16 backends spent on a CPU (\`/proc/<pid>/schedstat\`), per call."
	echo
	echo "| \`synchronous_commit\` | workload | algorithm | decisions/s | upserts/s | × upsert (range), bar ≥ 0.9 | DB CPU µs/decision | µs/upsert | CPU × upsert (range), bar ≤ 1.3 | bars |"
	echo "|---|---|---|---:|---:|---:|---:|---:|---:|---|"
	awk "$PARSE"'/^BenchmarkPostgresRounds\// {
		parse("BenchmarkPostgresRounds/")
		split(n, p, "/"); sc = p[1]; sub(/^sync-/, "", sc)
		met = (v["x-upsert-median"] >= 0.9 && v["cpu-x-upsert-median"] <= 1.3) ? "met" : "**not met**"
		printf "| %s | %s | %s | %.0f | %.0f | %.2f (%.2f–%.2f) | %.1f | %.1f | %.2f (%.2f–%.2f) | %s |\n", sc, p[2], p[3], v["decisions/s"], v["upserts/s"], v["x-upsert-median"], v["x-upsert-min"], v["x-upsert-max"], v["db-cpu-us/decision"], v["db-cpu-us/upsert"], v["cpu-x-upsert-median"], v["cpu-x-upsert-min"], v["cpu-x-upsert-max"], met
	}' "$raw"
	echo
	echo "Over-admission: 16 callers × 13 requests on a new key per iteration, limit 100, the limiter's clock frozen (\`BenchmarkPostgresOverAdmission\`, 5 iterations):"
	echo
	echo "| algorithm | admitted per key | over-admitted per key |"
	echo "|---|---:|---:|"
	awk "$PARSE"'/^BenchmarkPostgresOverAdmission\// {
		parse("BenchmarkPostgresOverAdmission/")
		printf "| %s | %s | %s |\n", n, v["admitted/key"], v["over-admitted/key"]
	}' "$raw"
	echo
	echo '```'
	grep '^Benchmark' "$raw"
	echo '```'
	{
		echo "From \`bash bench/run.sh postgres\` (the PostgreSQL section of [benchmarks.md](benchmarks.md#postgresql)); $(machine) Load after the run: $(load)."
		echo
		echo "| \`synchronous_commit\` | workload | algorithm | DB CPU µs/decision (measured) | decisions/s per core: 1,000,000 ÷ µs | cores for 1,000,000 decisions/s: 1,000,000 × µs ÷ 1,000,000 | measured decisions/s at 16 callers |"
		echo "|---|---|---|---:|---:|---:|---:|"
		awk "$PARSE"'/^BenchmarkPostgresRounds\// {
			parse("BenchmarkPostgresRounds/")
			split(n, p, "/"); sc = p[1]; sub(/^sync-/, "", sc)
			u = v["db-cpu-us/decision"]
			printf "| %s | %s | %s | %.1f | %.0f | %.0f | %.0f |\n", sc, p[2], p[3], u, 1e6 / u, u, v["decisions/s"]
		}' "$raw"
	} >"$OUT/postgres.scaling.md"
}

section_slidinglog() {
	local raw=$OUT/slidinglog.txt
	measure slidinglog "" "REDIS_ADDR VALKEY_ADDR" 'cd bench && RATELIMIT_BENCH_REPORT=1 go test -count=1 -run "^TestSlidingLogReport$" -v -timeout 30m ./redis/' || return 1
	# The report is the test's log: its lines are indented by eight spaces.
	sed -n 's/^        //p' "$raw" | grep -v '^$' | sed 's/^\(Redis, one hot key.*\)$/\n\1\n/; s/^failures: \(.*\)$/\nFailed calls: \1./'
	echo
	echo "Bar (issue 13): at least 0.5 × redis_rate's GCRA, hot key, limit 1,000:"
	echo
	sed -n 's/^        //p' "$raw" | awk -F'|' '$2 ~ /SlidingLog/ {
		split($3, r, " "); m = r[1] + 0
		printf "- %s: %.2f, %s\n", $2, m, (m >= 0.5 ? "met" : "**not met**")
	}' | sed 's/-  */- /; s/ :/:/'
}

section_rediscost() {
	local raw=$OUT/rediscost.txt
	# A Redis, a Valkey and a Redis Cluster of its own: the migration
	# benchmark moves hash slots, which it must never do to a shared cluster.
	with_own "REDIS_ADDR VALKEY_ADDR REDIS_CLUSTER_ADDRS" bash -c 'cd bench &&
		go test -run "^$" -bench ServerCost -benchtime 1x -benchmem -timeout 30m ./redis/ &&
		RATELIMIT_BENCH_MIGRATE=1 go test -run "^$" -bench ClusterMigration -benchtime 1x -benchmem -timeout 30m ./redis/' >"$raw" 2>&1 ||
		{ cat "$raw" >&2; return 1; }
	{
		echo "Command: \`bash bench/run.sh rediscost\` (\`BenchmarkServerCost\` in \`bench/redis\`); $(machine)"
		echo
		echo "Load after the run: $(load). $(if command -v valkey-server >/dev/null; then echo "Valkey: $(valkey-server --version | cut -d' ' -f1-3)."; else echo 'No valkey-server on this machine: the Valkey rows ran store/valkey and valkey-go against the same redis-server.'; fi) Server: $(redis-server --version | cut -d' ' -f1-3)."
		loadnote
		echo
		echo "7 interleaved rounds per workload (5,000 calls at 32 callers, 1,000 at 1). Server CPU: the server process's user + system time per decision (INFO cpu), connection handling included; in scripts: the part spent running the scripts, the commands they run included (INFO commandstats, EVAL and EVALSHA); × baseline: the median over the rounds of the contender's server CPU ÷ the baseline's (redis_rate on Redis, the one-line INCR+PEXPIRE script on Valkey) in the same round (smallest–largest); client allocations per decision count every goroutine of the client process."
		echo
		echo "| server | workload | contender | decisions/s | server CPU µs/decision | in scripts µs | script runs/decision | server CPU × baseline (range) | client allocs/decision |"
		echo "|---|---|---|---:|---:|---:|---:|---:|---:|"
		awk '/^BenchmarkServerCost\// {
			n = $1; sub(/^BenchmarkServerCost\//, "", n); sub(/-[0-9]+$/, "", n)
			g = n; sub(/\/.*/, "", g); w = n; sub(/^[^\/]*\//, "", w)
			delete v; delete order; k = 0
			for (i = 3; i < NF; i += 2) {
				u = $(i+1); if (index(u, ":") == 0) continue
				c = substr(u, 1, index(u, ":") - 1); m = substr(u, index(u, ":") + 1)
				if (!((c, "seen") in v)) { v[c, "seen"] = 1; order[++k] = c }
				v[c, m] = $i
			}
			for (j = 1; j <= k; j++) { c = order[j]
				printf "| %s | %s | %s | %.0f | %.1f | %.1f | %.2f | %.2f (%.2f–%.2f) | %.1f |\n", g, w, c, v[c, "dec/s"], v[c, "server-us/dec"], v[c, "cmd-us/dec"], v[c, "cmds/dec"], v[c, "x-base"], v[c, "x-base-min"], v[c, "x-base-max"], v[c, "allocs/dec"]
			}
		}' "$raw"
		echo
		echo "Capacity from these figures, 32 callers (a busy shard's steady state), the SDK's GCRA. A shard is one server process, whose commands run on one thread: its ceiling is 1,000,000 µs of CPU a second ÷ its server CPU per decision, and one key, which lives on one shard, cannot go past it."
		echo
		echo "| server | workload | server CPU µs/decision, P | one shard's ceiling: 1,000,000 ÷ P | shards for 1,000,000 decisions/s: 1,000,000 × P ÷ 1,000,000 | the same with each shard at most half busy: 2 × P, rounded up |"
		echo "|---|---|---:|---:|---:|---:|"
		awk 'function ceil(x) { return x == int(x) ? x : int(x) + 1 }
		/^BenchmarkServerCost\/.*\/c32-/ {
			n = $1; sub(/^BenchmarkServerCost\//, "", n); sub(/-[0-9]+$/, "", n)
			g = n; sub(/\/.*/, "", g); w = n; sub(/^[^\/]*\//, "", w)
			for (i = 3; i < NF; i += 2) if ($(i+1) == "sdk-gcra:server-us/dec") p = $i
			p = sprintf("%.1f", p) + 0 # round up the figure as shown
			printf "| %s | %s | %.1f | %.0f decisions/s | %.1f, so %d | %d |\n", g, w, p, 1e6 / p, p, ceil(p), ceil(2 * p)
		}' "$raw"
		echo
		echo "Coalescing, measured: the decisions of a batch that use one algorithm run as one script (the algorithm's coalesced form, algorithms/lua/many) when their keys may share a run (any keys on these standalone servers, any keys of one master on a cluster: bash bench/run.sh cluster), each still getting its own exact decision, each key's in arrival order. On the hot key at 32 callers they all share one key, so the script reads and writes it once per batch; on 10,000 keys each key is read and written once per decision, but the script's dispatch and TIME are still paid once per batch. Decisions per script run: 1 ÷ the script runs per decision above. One hot key's ceiling: 1,000,000 ÷ the hot key's server CPU per decision, beside 1,000,000 ÷ the 10,000-key row's (the ceiling when every decision reads and writes its own key)."
		echo
		echo "| server | contender | decisions per script run, hot key | the same, 10,000 keys | server CPU µs/decision, hot key | the same, 10,000 keys | in scripts µs/decision, hot key | the same, 10,000 keys | one hot key's ceiling, decisions/s | at the 10,000-key cost |"
		echo "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|"
		awk '/^BenchmarkServerCost\/[a-z]*\/(hot|10000keys)\/c32-/ {
			g = $1; sub(/^BenchmarkServerCost\//, "", g); w = g; sub(/\/.*/, "", g); sub(/^[^\/]*\//, "", w); sub(/\/.*/, "", w)
			for (i = 3; i < NF; i += 2) { u = $(i+1)
				if (u ~ /^sdk-/) { c = u; sub(/:.*/, "", c); m = u; sub(/^[^:]*:/, "", m); v[g, w, c, m] = $i; if (!((g, c) in seen)) { seen[g, c] = 1; order[++k] = g SUBSEP c } }
			}
		}
		END {
			for (j = 1; j <= k; j++) { split(order[j], a, SUBSEP); g = a[1]; c = a[2]
				ph = v[g, "hot", c, "server-us/dec"]; pk = v[g, "10000keys", c, "server-us/dec"]
				printf "| %s | %s | %.1f | %.1f | %.1f | %.1f | %.1f | %.1f | %.0f | %.0f |\n", g, c, 1 / v[g, "hot", c, "cmds/dec"], 1 / v[g, "10000keys", c, "cmds/dec"], ph, pk, v[g, "hot", c, "cmd-us/dec"], v[g, "10000keys", c, "cmd-us/dec"], 1e6 / ph, 1e6 / pk
			}
		}' "$raw"
		echo
		echo "Resharding under load (\`BenchmarkClusterMigration\`, the 3-master cluster of \`scripts/servers.sh\`): 32 callers send 40,000 requests at one hot key (GCRA, limit 20,000 per hour, the limiter's frozen clock: exactly 20,000 must be admitted), in 5 rounds during which the key's slot is moved to the next master every 100 ms (IMPORTING, MIGRATING, MIGRATE, SETSLOT NODE, as a resharding does) and 5 interleaved rounds with no move. Medians over the rounds; MOVED, ASK and NOSCRIPT are the replies the cluster client's node connections received (go-redis follows the first two, the store answers the third by sending the script's source)."
		echo
		echo "| rounds | decisions/s | p99 | failed calls | over-admitted | under-admitted | slot moves | MOVED | ASK | NOSCRIPT |"
		echo "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|"
		awk "$PARSE"'/^BenchmarkClusterMigration/ {
			parse("BenchmarkClusterMigration")
			split("still moving", ks, " ")
			for (j = 1; j <= 2; j++) { k = ks[j]
				printf "| %s | %.0f | %.0f µs | %d | %d | %d | %d | %d | %d | %d |\n", (k == "still" ? "slot still" : "slot moving"), v[k ":dec/s"], v[k ":p99-us"], v[k ":failures"], v[k ":over-admitted"], v[k ":under-admitted"], v[k ":slot-moves"], v[k ":MOVED"], v[k ":ASK"], v[k ":NOSCRIPT"]
			}
			printf "\nThroughput while moving ÷ still, median of the paired rounds: %.2f (%.2f–%.2f). Over all 10 rounds: %d failed calls, at most %d over-admitted in a round.\n", v["moving:x-still"], v["moving:x-still-min"], v["moving:x-still-max"], v["failures-total"], v["max-over-admitted"]
		}' "$raw"
		echo
		echo '```'
		grep '^Benchmark' "$raw"
		echo '```'
	} >"$OUT/rediscost.scaling.md"
}

section_cluster() {
	local raw=$OUT/cluster.txt
	echo "Command: \`bash bench/run.sh cluster\` (\`BenchmarkCluster\`, \`BenchmarkClusterMigrationKeys\` in \`bench/redis\`); $(machine)"
	echo
	echo "Load before: $(load)."
	# A Redis Cluster of its own: the migration benchmark moves hash slots,
	# which it must never do to a shared cluster.
	with_own "REDIS_CLUSTER_ADDRS" bash -c 'cd bench &&
		go test -run "^$" -bench "^BenchmarkCluster$" -benchtime 1x -timeout 30m ./redis/ &&
		RATELIMIT_BENCH_MIGRATE=1 go test -run "^$" -bench "^BenchmarkClusterMigrationKeys$" -benchtime 1x -timeout 30m ./redis/' >"$raw" 2>&1 ||
		{ cat "$raw" >&2; return 1; }
	echo "Load after: $(load). Server: $(redis-server --version | cut -d' ' -f1-3), 3 masters, no replicas, on this machine's loopback."
	loadnote
	echo
	echo "7 interleaved rounds per workload, 5,000 calls a round at 32 callers, each contender with a cluster client of its own (go-redis: pool of 64 connections per master; valkey-go: its defaults). × redis_rate, × one-line script: the median over the rounds of the SDK's decisions/s ÷ the baseline's in the same round (smallest–largest); the one-line script is \`INCR\` + \`PEXPIRE\` in one \`EVALSHA\`, through the same client as the SDK's row. Server CPU: the three masters' user + system time together, per decision (\`INFO cpu\`); in scripts: the part of it spent running scripts, the commands they run included (\`INFO commandstats\`, \`EVAL\` and \`EVALSHA\`, after \`CONFIG RESETSTAT\`), the rest being the connections' reading, parsing and answering; script runs per decision from the same statistics."
	echo
	echo "| workload | contender | decisions/s | server CPU µs/decision, all masters | in scripts µs | script runs/decision | × redis_rate (range) | × one-line script (range) |"
	echo "|---|---|---:|---:|---:|---:|---:|---:|"
	awk "$PARSE"'/^BenchmarkCluster\/[^ ]*c32-/ {
		parse("BenchmarkCluster/")
		split("redis-sdk-gcra redis_rate redis-incr-pexpire valkey-sdk-gcra valkey-incr-pexpire", cs, " ")
		for (j = 1; j <= 5; j++) { c = cs[j]
			xr = "–"; xi = "–"
			if ((c ":x-redis_rate") in v) xr = sprintf("%.2f (%.2f–%.2f)", v[c ":x-redis_rate"], v[c ":x-redis_rate-min"], v[c ":x-redis_rate-max"])
			if ((c ":x-incr") in v) xi = sprintf("%.2f (%.2f–%.2f)", v[c ":x-incr"], v[c ":x-incr-min"], v[c ":x-incr-max"])
			printf "| %s | %s | %.0f | %.1f | %.1f | %.2f | %s | %s |\n", n, c, v[c ":dec/s"], v[c ":server-us/dec"], v[c ":cmd-us/dec"], v[c ":cmds/dec"], xr, xi
		}
	}' "$raw"
	echo
	echo "Bars (issue 23), 10,000 keys at 32 callers, medians of the rounds' ratios:"
	echo
	awk "$PARSE"'/^BenchmarkCluster\/10000keys\/c32-/ {
		parse("BenchmarkCluster/")
		r = v["redis-sdk-gcra:x-redis_rate"]; i = v["redis-sdk-gcra:x-incr"]; k = v["valkey-sdk-gcra:x-incr"]
		printf "- store/redis ≥ 2 × redis_rate: %.2f, %s\n", r, (r >= 2 ? "met" : "**not met**")
		printf "- store/redis ≥ 1.0 × the one-line script (go-redis): %.2f, %s\n", i, (i >= 1 ? "met" : "**not met**")
		printf "- store/valkey ≥ 1.0 × the one-line script (valkey-go): %.2f, %s\n", k, (k >= 1 ? "met" : "**not met**")
	}' "$raw"
	echo
	echo "Resharding under load on many keys (\`BenchmarkClusterMigrationKeys\`): 32 callers send 1,000 requests to each of 64 keys (GCRA, limit 500 per hour per key, the limiter's frozen clock: exactly 32,000 must be admitted), in 3 rounds, while every 50 ms the slot of one of 8 of the keys, in turn, moves to the next master (IMPORTING, MIGRATING, MIGRATE, SETSLOT NODE). The decisions of one master go as one script run per batch; a key that master no longer serves is sent again through the cluster client, which follows MOVED and ASK."
	echo
	echo "| rounds | failed calls (most in a round) | over-admitted (most) | under-admitted (most) | slot moves a round (median) | MOVED | ASK |"
	echo "|---|---:|---:|---:|---:|---:|---:|"
	awk "$PARSE"'/^BenchmarkClusterMigrationKeys/ {
		parse("BenchmarkClusterMigrationKeys")
		printf "| 3 | %d | %d | %d | %d | %d | %d |\n", v["max-failures"], v["max-over-admitted"], v["max-under-admitted"], v["slot-moves"], v["MOVED"], v["ASK"]
	}' "$raw"
	echo
	echo '```'
	grep '^Benchmark' "$raw"
	echo '```'
	{
		echo "Command: \`bash bench/run.sh cluster\`; $(machine) Load after the run: $(load)."
		loadnote
		echo
		echo "A cluster's masters share the decisions by slot, so with keys spread over the slots each master makes about a third of them; the capacity model counts the CPU of all the masters together per decision, P_all, from \`BenchmarkCluster\` (10,000 keys, 32 callers): masters needed for R decisions/s ≈ R × P_all ÷ 1,000,000, each fully busy, twice that at most half busy; the 3 masters together top out near 3,000,000 ÷ P_all. A hot key lives on one master: its ceiling is that master's, 1,000,000 ÷ P_hot (the hot-key row, where one master does all the work)."
		echo
		echo "| workload | contender | server CPU µs/decision, all masters, P | masters for 1,000,000 decisions/s (P, rounded up) | the same, each at most half busy (2 × P, rounded up) | ceiling of the 3 masters, decisions/s (hot key: its one master's) |"
		echo "|---|---|---:|---:|---:|---:|"
		awk "$PARSE"'function ceil(x) { return x == int(x) ? x : int(x) + 1 }
		/^BenchmarkCluster\/[^ ]*c32-/ {
			parse("BenchmarkCluster/")
			split("redis-sdk-gcra redis_rate redis-incr-pexpire valkey-sdk-gcra valkey-incr-pexpire", cs, " ")
			for (j = 1; j <= 5; j++) { c = cs[j]; p = sprintf("%.1f", v[c ":server-us/dec"]) + 0
				printf "| %s | %s | %.1f | %d | %d | %.0f |\n", n, c, p, ceil(p), ceil(2 * p), (n ~ /^hot/ ? 1e6 / p : 3e6 / p)
			}
		}' "$raw"
	} >"$OUT/cluster.scaling.md"
}

sections=("$@")
[ ${#sections[@]} -gt 0 ] || sections=(memory redis slidinglog postgres dynamo rediscost cluster composite lease localquota)
for s in "${sections[@]}"; do
	declare -F "section_$s" >/dev/null || { echo "run.sh: unknown section $s" >&2; exit 2; }
done
for s in "${sections[@]}"; do
	echo "== section $s (raw output in $OUT)" >&2
	rm -f "$OUT/$s.scaling.md"
	"section_$s" >"$OUT/$s.section.md"
	if [ -s "$OUT/$s.section.md" ]; then splice "$s" "$OUT/$s.section.md" "$DOC"; fi
	if [ -f "$OUT/$s.scaling.md" ]; then splice "$s" "$OUT/$s.scaling.md" "$SCALING_DOC"; fi
done
echo "updated $DOC and $SCALING_DOC; raw output in $OUT" >&2

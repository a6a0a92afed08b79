#!/usr/bin/env bash
# Counts the instructions a PostgreSQL backend executes per statement, for
# the store's decision on a key that has a row and its baselines: a count
# that does not depend on the machine's load, unlike the CPU times of
# TestServerCost and BenchmarkPostgresRounds (use it to compare forms, and
# those to measure).
#
#   bash bench/postgres/instructions.sh [N]    # N executions (default 220)
#
# TestInstructionsSetup writes the schema and the statements; a throwaway
# cluster (initdb) gets the schema, then each statement is prepared and
# executed 20 and N times by a single-user backend (postgres --single)
# under valgrind's callgrind, synchronous_commit off; the difference over
# N - 20 is the instructions per execution (start-up and the first
# executions, which plan the statement, cancel out). Every statement is
# prepared with the same nine parameters (see TestInstructionsSetup), so
# that what EXECUTE does with them is the same for all; it is more than a
# client's Bind costs, which makes every figure larger by about the same
# amount: compare differences, not ratios. Needs valgrind and PostgreSQL's
# binaries; run as root, it runs PostgreSQL as the postgres user.
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
N=${1:-220}
command -v valgrind >/dev/null || { echo "instructions.sh: valgrind is not installed" >&2; exit 1; }
bin=""
for d in $(printf '%s\n' /usr/lib/postgresql/*/bin | sort -V -r); do
	[ -x "$d/initdb" ] && { bin=$d; break; }
done
[ -n "$bin" ] || bin=$(dirname "$(command -v initdb)")
dir=$(mktemp -d "${TMPDIR:-/tmp}/ratelimit-instr.XXXXXX")
chmod 755 "$dir"
trap 'rm -rf "$dir"' EXIT
as_pg() {
	if [ "$(id -u)" -eq 0 ]; then
		su postgres -s /bin/bash -c "$(printf '%q ' "$@")"
	else
		"$@"
	fi
}
[ "$(id -u)" -ne 0 ] || chown postgres: "$dir"

(cd "$ROOT/bench" && RATELIMIT_BENCH_PG_INSTR_DIR=$dir go test -count=1 -run TestInstructionsSetup ./postgres/ >/dev/null)
as_pg "$bin/initdb" -D "$dir/data" -U ratelimit --auth=trust -E UTF8 --locale=C --no-sync >"$dir/initdb.log" 2>&1
as_pg "$bin/pg_ctl" -D "$dir/data" -o "-c listen_addresses= -k $dir -p 5432" -l "$dir/server.log" -w start >/dev/null
as_pg "$bin/createdb" -h "$dir" -p 5432 -U ratelimit ratelimit
as_pg psql -X -q -v ON_ERROR_STOP=1 -h "$dir" -p 5432 -U ratelimit ratelimit -f "$dir/schema.sql" >/dev/null
as_pg "$bin/pg_ctl" -D "$dir/data" -w stop >/dev/null

# count FILE KEY TIMES: the backend's instructions for TIMES executions.
count() {
	local in=$dir/in.$RANDOM out
	{
		echo "SET synchronous_commit = off"
		echo "PREPARE p(bytea, bigint, bigint, bigint[], bigint, bigint, bigint, bigint, bigint) AS $(cat "$1")"
		for _ in $(seq "$3"); do
			echo "EXECUTE p('$2', NULL, 1, '{1,1000,1000000,1000,1000000}', 1, 1000, 1000000, 1000, 1000000)"
		done
	} >"$in"
	out=$dir/cg.$RANDOM
	chmod 644 "$in"
	as_pg valgrind --tool=callgrind --callgrind-out-file="$out" "$bin/postgres" --single -D "$dir/data" ratelimit <"$in" >"$dir/single.log" 2>&1
	if grep -q ERROR "$dir/single.log"; then
		grep -m1 ERROR "$dir/single.log" >&2
		exit 1
	fi
	sed -n 's/^summary: //p' "$out"
}

echo "| statement | instructions per execution |"
echo "|---|---:|"
for f in "$dir"/upsert.stmt "$dir"/*.constant_step.stmt "$dir"/*.lateral_form.stmt "$dir"/*.row_form.stmt; do
	name=$(basename "$f" .stmt)
	key=cost:${name%%.*}
	[ "$name" != upsert ] || key=cost:gcra
	a=$(count "$f" "$key" 20)
	b=$(count "$f" "$key" "$N")
	echo "| $name | $(((b - a) / (N - 20))) |"
done

package postgres_test

import (
	"context"
	"fmt"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/ratelimitkit/ratelimit/algorithms"
	"github.com/ratelimitkit/ratelimit/algorithms/forms"
	"github.com/ratelimitkit/ratelimit/store/postgres"
)

// TestServerCost breaks a decision's server CPU down, one connection, one
// key, synchronous_commit off (no caller waits for another, so the CPU
// time is the statement's own): the server's CPU time per statement
// (/proc/<pid>/schedstat of the connection's backend) for
//
//   - a bare SELECT (the floor: a round trip and an executor run),
//   - the bare upsert of BenchmarkPostgresRounds,
//   - the store's decide function for GCRA and the token bucket (every
//     call admits and writes): the path of a key's first request,
//   - the store's statement for a key that has a row (one UPDATE whose SET
//     list runs the algorithm's row form), the statement it used before
//     (the form in a LATERAL, the clock read in a subquery), the latter
//     with a form that computes nothing, and with no form at all (a
//     constant step): the statement's own cost,
//   - the same decide function with a form that computes nothing (a
//     PL/pgSQL function returning a constant step): the decide function's
//     own cost,
//   - each algorithm's SQL form alone, called in a statement of its own on
//     a live state,
//   - and, when RATELIMIT_BENCH_PG_FORM_BASE names an earlier gcra.sql
//     (`git show <commit>:algorithms/sql/gcra.sql`), that form alone and
//     behind the decide function, installed beside the current one (the
//     forms' function names carry their version).
//
// 11 rounds of 2,000 statements each, the variants interleaved; it prints
// the median µs per statement and the range. It runs only with
// RATELIMIT_BENCH_PG_COST=1, against a server on this machine:
//
//	RATELIMIT_BENCH_PG_COST=1 go test -run TestServerCost -v ./postgres/
func TestServerCost(t *testing.T) {
	if os.Getenv("RATELIMIT_BENCH_PG_COST") == "" {
		t.Skip("set RATELIMIT_BENCH_PG_COST=1 to measure a decision's server CPU, part by part")
	}
	url := os.Getenv("RATELIMIT_POSTGRES_URL")
	if url == "" {
		t.Fatal("RATELIMIT_POSTGRES_URL is not set: run under scripts/with-servers.sh")
	}
	ctx := context.Background()
	cfg, err := pgx.ParseConfig(url)
	if err != nil {
		t.Fatal(err)
	}
	cfg.RuntimeParams["synchronous_commit"] = "off"
	conn, err := pgx.ConnectConfig(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	var pid uint32
	if err := conn.QueryRow(ctx, "SELECT pg_backend_pid()").Scan(&pid); err != nil {
		t.Fatal(err)
	}
	if _, ok := backendCPU(pid); !ok {
		t.Fatal("the server's CPU time cannot be read: run the server on this machine")
	}

	name := fmt.Sprintf("rl_cost_%d", os.Getpid())
	up := pgx.Identifier{name + "_up"}.Sanitize()
	s, err := postgres.New(conn, postgres.WithTable(name))
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Migrate(ctx); err != nil {
		t.Fatal(err)
	}
	var cleanup []string
	t.Cleanup(func() {
		for _, q := range append(cleanup, "DROP TABLE IF EXISTS "+s.Table(), "DROP TABLE IF EXISTS "+up) {
			_, _ = conn.Exec(context.Background(), q)
		}
	})
	setup := []string{
		"CREATE TABLE " + up + " (k bytea PRIMARY KEY, n bigint NOT NULL) WITH (fillfactor = 70)",
		// A form that computes nothing: the step of an admitted request.
		`CREATE OR REPLACE FUNCTION pg_temp.rl_cost_nothing(state bigint[], now_us bigint, cost bigint, peek boolean, args bigint[])
RETURNS ratelimit_step LANGUAGE plpgsql IMMUTABLE AS $$
BEGIN
    RETURN ROW(ARRAY[now_us, 0, 1], 1000000, true, 1, 1, 0, 0, 0)::ratelimit_step;
END $$`,
	}
	for _, q := range setup {
		if _, err := conn.Exec(ctx, q); err != nil {
			t.Fatal(err)
		}
	}
	// decideWith creates a copy of the table's decide function for alg
	// that calls form instead, and returns its name.
	decideWith := func(alg, form, suffix string) string {
		var src string
		fn := name + "_decide_" + alg
		if err := conn.QueryRow(ctx, "SELECT prosrc FROM pg_proc WHERE proname = $1", fn).Scan(&src); err != nil {
			t.Fatal(err)
		}
		copyName := pgx.Identifier{fn + suffix}.Sanitize()
		src = strings.ReplaceAll(src, forms.SQLFunction(alg)+"(", form+"(")
		q := "CREATE FUNCTION " + copyName + "(p_key bytea, p_now bigint, p_cost bigint, p_peek boolean, p_args bigint[], p_wait_ms bigint) RETURNS bigint[] LANGUAGE plpgsql VOLATILE AS $rlcost$" + src + "$rlcost$"
		if _, err := conn.Exec(ctx, q); err != nil {
			t.Fatal(err)
		}
		cleanup = append(cleanup, "DROP FUNCTION IF EXISTS "+copyName)
		return copyName
	}

	type variant struct {
		name, sql string
		args      []any
	}
	key := []byte("cost:hot")
	vs := []variant{
		{"bare SELECT", "SELECT $1::bytea", []any{key}},
		{"bare upsert", "INSERT INTO " + up + " AS c (k, n) VALUES ($1, 1) ON CONFLICT (k) DO UPDATE SET n = c.n + 1 RETURNING n", []any{key}},
	}
	gcra := algorithms.GCRA(1_000_000_000, time.Second, 1_000_000)
	tb := algorithms.TokenBucket(1_000_000_000, time.Second, 1_000_000)
	now := time.Now().UnixMicro()
	for _, alg := range []algorithms.Algorithm{gcra, tb} {
		n, args := alg.Name(), alg.(forms.ServerForm).ServerArgs()
		decide := pgx.Identifier{name + "_decide_" + n}.Sanitize()
		// A live state: the one the first admitted request leaves.
		var state []int64
		if err := conn.QueryRow(ctx, "SELECT next_state FROM "+forms.SQLFunction(n)+"(NULL, $1, 1, false, $2)", now, args).Scan(&state); err != nil {
			t.Fatal(err)
		}
		vs = append(vs,
			variant{n + ": decide", "SELECT " + decide + "($1, NULL, 1, false, $2, NULL)", []any{key, args}},
			variant{n + ": decide, a form that computes nothing", "SELECT " + decideWith(n, "pg_temp.rl_cost_nothing", "_nothing") + "($1, NULL, 1, false, $2, NULL)", []any{key, args}},
			variant{n + ": row UPDATE (the store's: the row form)", rowFormUpdate(s.Table(), forms.SQLRowFunction(n), len(args)), append([]any{key, nil, int64(1)}, boxed(args)...)},
			variant{n + ": row UPDATE, the form in LATERAL (before the row forms)", rowUpdate(s.Table(), forms.SQLFunction(n), false), []any{key, nil, int64(1), args}},
			variant{n + ": row UPDATE, a form that computes nothing", rowUpdate(s.Table(), "pg_temp.rl_cost_nothing", false), []any{key, nil, int64(1), args}},
			variant{n + ": row UPDATE, no form (a constant step)", rowUpdate(s.Table(), "", true), []any{key, nil, int64(1), args}},
			variant{n + ": the form alone", "SELECT allowed FROM " + forms.SQLFunction(n) + "($1, $2, 1, false, $3)", []any{state, now, args}},
		)
		if base := os.Getenv("RATELIMIT_BENCH_PG_FORM_BASE"); base != "" && n == "gcra" {
			text, err := os.ReadFile(base)
			if err != nil {
				t.Fatal(err)
			}
			m := formName(n).FindStringSubmatch(string(text))
			if m == nil {
				t.Fatalf("%s defines no function ratelimit_%s", base, n)
			}
			if _, err := conn.Exec(ctx, string(text)); err != nil {
				t.Fatal(err)
			}
			vs = append(vs,
				variant{n + ": decide, the earlier form", "SELECT " + decideWith(n, m[1], "_base") + "($1, NULL, 1, false, $2, NULL)", []any{key, args}},
				variant{n + ": the earlier form alone", "SELECT allowed FROM " + m[1] + "($1, $2, 1, false, $3)", []any{state, now, args}},
			)
		}
	}

	const rounds, calls = 11, 2000
	cpu := make([][]float64, len(vs))
	for r := 0; r < rounds; r++ {
		for j := range vs {
			i := (j + r) % len(vs) // who goes first rotates
			v := vs[i]
			before, _ := backendCPU(pid)
			for range calls {
				var out any
				if err := conn.QueryRow(ctx, v.sql, v.args...).Scan(&out); err != nil {
					t.Fatalf("%s: %v", v.name, err)
				}
			}
			after, _ := backendCPU(pid)
			cpu[i] = append(cpu[i], (after-before)/calls)
		}
	}
	var out strings.Builder
	fmt.Fprintf(&out, "\nServer CPU per statement, one connection, one key, synchronous_commit off, %d rounds of %d statements per variant\n\n", rounds, calls)
	fmt.Fprintf(&out, "| statement | µs, median | range |\n|---|---:|---:|\n")
	for i, v := range vs {
		c := slices.Clone(cpu[i])
		slices.Sort(c)
		fmt.Fprintf(&out, "| %s | %.1f | %.1f–%.1f |\n", v.name, median(c), c[0], c[len(c)-1])
	}
	t.Log(out.String())
}

// rowFormUpdate is the store's statement for a decision on a key that has
// a row (store/postgres rowDecideSQL, server clock, no deadline), on table
// with the SQL row form row, which takes nargs arguments.
func rowFormUpdate(table, row string, nargs int) string {
	q := "UPDATE " + table + " r SET (vals, state, expires_at, dec) = (SELECT coalesce(d.next_state, r.vals), " +
		"CASE WHEN d.next_state IS NULL THEN r.state END, coalesce(d.expires_at, r.expires_at), d.decision " +
		"FROM " + row + "(r.vals, r.expires_at, $2, $3"
	for i := range nargs {
		q += fmt.Sprintf(", $%d", i+4)
	}
	return q + ") d) WHERE r.key = $1 AND r.vals IS NOT NULL RETURNING r.dec"
}

// boxed returns args as QueryRow's arguments, one each.
func boxed(args []int64) []any {
	out := make([]any, len(args))
	for i, a := range args {
		out[i] = a
	}
	return out
}

// rowUpdate is the statement the store used for a decision on a key that
// has a row before the row forms (server clock, no deadline), on table
// with the SQL form form, and still uses for a form without a row form;
// constant makes it write a constant step without calling any form: the
// statement's own cost.
func rowUpdate(table, form string, constant bool) string {
	const now = "(extract(epoch FROM clock_timestamp()) * 1000000)::bigint"
	if constant {
		return "UPDATE " + table + " r SET (vals, state, expires_at, dec) = (SELECT ARRAY[n.now, 0, 1], NULL::bytea, n.now + 1000000, ARRAY[1, 1, 1, 0, 0, 0]::bigint[] " +
			"FROM (SELECT coalesce($2::bigint, " + now + ") AS now OFFSET 0) n) WHERE r.key = $1 AND $3::bigint IS NOT NULL AND $4::bigint[] IS NOT NULL RETURNING r.dec"
	}
	return "UPDATE " + table + " r SET (vals, state, expires_at, dec) = (SELECT coalesce(d.next_state, r.vals), " +
		"CASE WHEN d.next_state IS NULL THEN r.state END, " +
		"CASE WHEN d.next_state IS NULL THEN r.expires_at ELSE n.now + d.ttl END, " +
		"ARRAY[d.allowed::int::bigint, d.lim, d.remaining, d.retry_after, d.reset_after, d.delay] " +
		"FROM (SELECT coalesce($2::bigint, " + now + ") AS now OFFSET 0) n, " +
		"LATERAL " + form + "(CASE WHEN r.expires_at > n.now THEN coalesce(r.vals, ratelimit_int8s(r.state)) END, n.now, $3, false, $4) d) " +
		"WHERE r.key = $1 RETURNING r.dec"
}

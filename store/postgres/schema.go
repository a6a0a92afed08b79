package postgres

import (
	"context"
	"fmt"
	"strings"

	"github.com/ratelimitkit/ratelimit/algorithms"
)

// builtins are the built-in algorithms with a SQL form, in the order
// SchemaSQL installs them.
var builtins = func() []*algorithms.Builtin {
	var out []*algorithms.Builtin
	for _, b := range algorithms.Builtins() {
		if _, ok := b.SQL(); ok {
			out = append(out, b)
		}
	}
	return out
}()

// migrateLock is the key of the transaction-level advisory lock Migrate
// holds, so that concurrent migrations (several application instances
// starting at once) run one after the other instead of failing with
// "tuple concurrently updated".
const migrateLock = 0x726c6d6967726174 // "rlmigrat"

// Migrate creates the store's table and functions, or brings the functions
// up to date, in one transaction. It is idempotent: run it at every start
// or once from a deployment step. It executes SchemaSQL.
func (s *Store) Migrate(ctx context.Context) error {
	tx, err := s.db.Begin(ctx)
	if err != nil {
		return s.fail(ctx, "migrate", zeroKey, err)
	}
	defer func() { _ = tx.Rollback(ctx) }()
	if _, err := tx.Exec(ctx, "SELECT pg_advisory_xact_lock($1)", int64(migrateLock)); err != nil {
		return s.fail(ctx, "migrate", zeroKey, err)
	}
	if _, err := tx.Exec(ctx, s.SchemaSQL()); err != nil {
		return s.fail(ctx, "migrate", zeroKey, err)
	}
	if err := tx.Commit(ctx); err != nil {
		return s.fail(ctx, "migrate", zeroKey, err)
	}
	return nil
}

// SchemaSQL returns the SQL that Migrate executes, for teams that apply
// migrations with their own tools: the table, two small helper functions
// (ratelimit_now, the server's clock in microseconds, and ratelimit_int8s,
// which reads state written by Update), every built-in algorithm's SQL form,
// and the table's decide function. Run it in one transaction. Every
// statement creates only what is missing or replaces a function, so it can
// run again after an upgrade. Objects are created in the first schema of
// the search_path.
func (s *Store) SchemaSQL() string {
	var b strings.Builder
	t := s.ident(s.table)
	unlogged := ""
	if s.unlogged {
		unlogged = "UNLOGGED "
	}
	fmt.Fprintf(&b, `-- Rate-limit state: one row per key. key is the limiter's namespace, ':'
-- and the caller's key, as bytes. The built-in algorithms keep their state
-- in vals; Update (users' own algorithms) keeps it in state. expires_at is
-- in microseconds since the Unix epoch, on the clock the store decides by:
-- a row whose expires_at is not after now is treated as absent. dec is the
-- decision of the request that wrote the row, which the decide function
-- returns from its upsert (RETURNING sees only the new row).
-- fillfactor leaves room on each page so that decisions update rows in
-- place (HOT updates, no index churn).
CREATE %[1]sTABLE IF NOT EXISTS %[2]s (
    key        bytea    PRIMARY KEY,
    vals       bigint[],
    state      bytea,
    expires_at bigint   NOT NULL,
    dec        bigint[]
) WITH (fillfactor = 70);

-- The server's clock in microseconds since the Unix epoch.
CREATE OR REPLACE FUNCTION ratelimit_now() RETURNS bigint
LANGUAGE sql VOLATILE PARALLEL SAFE AS $$
    SELECT (extract(epoch FROM clock_timestamp()) * 1000000)::bigint
$$;

-- State written by Update (little-endian int64 fields) as a bigint[].
CREATE OR REPLACE FUNCTION ratelimit_int8s(b bytea) RETURNS bigint[]
LANGUAGE plpgsql IMMUTABLE STRICT PARALLEL SAFE AS $$
DECLARE
    res bigint[] := '{}';
    v   bigint;
BEGIN
    IF length(b) %% 8 <> 0 THEN
        RAISE EXCEPTION USING ERRCODE = '%[3]s',
            MESSAGE = format('ratelimit: corrupt state: %%s bytes, not a multiple of 8', length(b));
    END IF;
    FOR i IN 0 .. length(b) / 8 - 1 LOOP
        v := 0;
        FOR j IN REVERSE 7 .. 0 LOOP
            v := (v << 8) | get_byte(b, 8*i + j);
        END LOOP;
        res := res || v;
    END LOOP;
    RETURN res;
END
$$;

`, unlogged, t, algorithms.SQLErrCorrupt)
	for _, alg := range builtins {
		form, _ := alg.SQL()
		b.WriteString(form)
		b.WriteString("\n")
	}
	b.WriteString(s.decideFunctionSQL())
	return b.String()
}

// decideFunctionSQL returns the table's decide functions, one per
// algorithm: the one statement of a decision calls one of them.
//
// A request that may consume (not a peek) runs as one upsert: INSERT of the
// state a fresh key would get, ON CONFLICT DO UPDATE with the algorithm
// applied to the existing row, under the row lock the upsert takes itself,
// and only WHERE the algorithm admits the request. Concurrent first
// requests for a key cannot both insert: the loser's insert turns into the
// update of the winner's row, decided on its state. The admitted request's
// decision comes back through the row's dec column (RETURNING sees only the
// new row). When the upsert writes nothing (the request is denied), or for
// a peek, the function decides on the latest committed state without a
// lock and writes nothing; should that state admit the request after all
// (it changed in between: a Reset, an expiry), it goes round again.
func (s *Store) decideFunctionSQL() string {
	var b strings.Builder
	for _, alg := range builtins {
		b.WriteString(s.decideFunctionSQLFor(alg))
	}
	return b.String()
}

func (s *Store) decideFunctionSQLFor(b *algorithms.Builtin) string {
	name := b.Name
	t := s.ident(s.table)
	fn := s.decideFunction(name)
	alg := b.SQLFunction()
	live := "CASE WHEN r.expires_at > v_now THEN coalesce(r.vals, ratelimit_int8s(r.state)) END"
	body := fmt.Sprintf(`
DECLARE
    v_now  bigint := coalesce(p_now, ratelimit_now());
    v_dec  bigint[];
    v_lock text;
    d      ratelimit_step;
BEGIN
    IF p_wait_ms IS NOT NULL THEN
        -- Wait for the row lock no longer than the caller's context allows,
        -- so that a decision the caller gave up on is not applied later.
        v_lock := current_setting('lock_timeout');
        PERFORM set_config('lock_timeout', greatest(p_wait_ms, 1) || 'ms', true);
    END IF;
    LOOP
        IF NOT p_peek THEN
            INSERT INTO %[1]s AS r (key, vals, expires_at, dec)
            SELECT p_key, g.next_state, v_now + g.ttl,
                ARRAY[1, g.lim, g.remaining, g.retry_after, g.reset_after, g.delay]
            FROM %[2]s(NULL, v_now, p_cost, false, p_args) g
            WHERE g.next_state IS NOT NULL
            ON CONFLICT (key) DO UPDATE SET (vals, state, expires_at, dec) = (
                SELECT g.next_state, NULL::bytea, v_now + g.ttl,
                    ARRAY[1, g.lim, g.remaining, g.retry_after, g.reset_after, g.delay]
                FROM %[2]s(%[3]s, v_now, p_cost, false, p_args) g)
            WHERE (%[2]s(%[3]s, v_now, p_cost, false, p_args)).next_state IS NOT NULL
            RETURNING r.dec INTO v_dec;
            IF FOUND THEN
                EXIT; -- admitted and written
            END IF;
        END IF;
        -- A peek, or a request the upsert did not admit: decide on the
        -- latest committed state, writing nothing.
        SELECT g.* INTO d
        FROM (SELECT) one LEFT JOIN %[1]s r ON r.key = p_key,
            LATERAL %[2]s(%[3]s, v_now, p_cost, p_peek, p_args) g;
        IF p_peek OR d.next_state IS NULL THEN
            v_dec := ARRAY[d.allowed::int::bigint, d.lim, d.remaining, d.retry_after, d.reset_after, d.delay];
            EXIT;
        END IF;
        -- The state changed since the upsert (a Reset, an expiry) and now
        -- admits the request: go round again to write it.
    END LOOP;
    IF p_wait_ms IS NOT NULL THEN
        PERFORM set_config('lock_timeout', v_lock, true);
    END IF;
    RETURN v_dec;
END
`, t, alg, live)
	tag := dollarTag(body)
	return fmt.Sprintf(`
-- Decides one request of %[1]s for a key of the table and returns the
-- decision as [allowed (1 or 0), limit, remaining, retry_after, reset_after,
-- delay]. An admitted request writes the next state with its expiry in one
-- upsert, under the row lock the upsert takes; a peek or a denied request
-- writes nothing. p_now NULL reads the server's clock; p_wait_ms bounds the
-- wait for the row lock (NULL: lock_timeout as configured).
CREATE OR REPLACE FUNCTION %[2]s(
    p_key bytea, p_now bigint, p_cost bigint, p_peek boolean, p_args bigint[], p_wait_ms bigint)
RETURNS bigint[] LANGUAGE plpgsql VOLATILE AS %[3]s%[4]s%[3]s;
`, name, fn, tag, body)
}

// decideFunction is the quoted name of the table's decide function for the
// algorithm with the given name.
func (s *Store) decideFunction(alg string) string {
	return s.ident(s.table + "_decide_" + alg)
}

// dollarTag returns a dollar-quoting tag that does not occur in body, which
// holds quoted identifiers made from the user's table name.
func dollarTag(body string) string {
	for i := 0; ; i++ {
		tag := fmt.Sprintf("$rl%d$", i)
		if !strings.Contains(body, tag) {
			return tag
		}
	}
}

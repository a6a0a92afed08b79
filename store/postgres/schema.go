package postgres

import (
	"context"
	"fmt"
	"strings"

	"github.com/ratelimitkit/ratelimit/algorithms"
)

// builtins are the algorithms with a SQL form, in the order SchemaSQL
// installs them.
var builtins = []string{"fixed_window", "sliding_log", "sliding_window", "token_bucket", "leaky_bucket", "gcra"}

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
-- a row whose expires_at is not after now is treated as absent.
-- fillfactor leaves room on each page so that decisions update rows in
-- place (HOT updates, no index churn).
CREATE %sTABLE IF NOT EXISTS %s (
    key        bytea    PRIMARY KEY,
    vals       bigint[],
    state      bytea,
    expires_at bigint   NOT NULL
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
        RAISE EXCEPTION USING ERRCODE = '%s',
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
	for _, name := range builtins {
		form, _ := algorithms.SQL(name)
		b.WriteString(form)
		b.WriteString("\n")
	}
	b.WriteString(s.decideFunctionSQL())
	return b.String()
}

// decideFunctionSQL is the table's decide function: the one statement of a
// decision calls it.
func (s *Store) decideFunctionSQL() string {
	t := s.ident(s.table)
	fn := s.ident(s.table + "_decide")
	var calls strings.Builder
	for i, name := range builtins {
		kw := "ELSIF"
		if i == 0 {
			kw = "IF"
		}
		fmt.Fprintf(&calls, `
        %s p_alg = '%s' THEN
            SELECT * INTO v_next, v_ttl, allowed, lim, remaining, retry_after, reset_after, delay
            FROM %s(v_vals, v_now, p_cost, p_peek, p_args);`, kw, name, algorithms.SQLFunction(name))
	}
	body := fmt.Sprintf(`
DECLARE
    v_vals  bigint[];
    v_state bytea;
    v_exp   bigint;
    v_found boolean;
    v_now   bigint;
    v_next  bigint[];
    v_ttl   bigint;
    v_lock_timeout text;
BEGIN
    LOOP
        -- Lock the key's row for the rest of this statement's transaction; a
        -- peek writes nothing and takes no lock.
        IF p_wait_ms IS NOT NULL THEN
            -- Wait for the row lock no longer than the caller's context
            -- allows, so that a decision the caller gave up on is not
            -- applied later; restore the setting once the lock is held.
            v_lock_timeout := current_setting('lock_timeout');
            PERFORM set_config('lock_timeout', greatest(p_wait_ms, 1) || 'ms', true);
        END IF;
        IF p_peek THEN
            SELECT r.vals, r.state, r.expires_at INTO v_vals, v_state, v_exp
            FROM %[1]s r WHERE r.key = p_key;
        ELSE
            SELECT r.vals, r.state, r.expires_at INTO v_vals, v_state, v_exp
            FROM %[1]s r WHERE r.key = p_key FOR NO KEY UPDATE;
        END IF;
        v_found := FOUND;
        IF p_wait_ms IS NOT NULL THEN
            PERFORM set_config('lock_timeout', v_lock_timeout, true);
        END IF;
        -- The clock is read once the lock is held, so that time never runs
        -- backwards for a key.
        v_now := coalesce(p_now, ratelimit_now());
        IF NOT v_found OR v_exp <= v_now THEN
            v_vals := NULL; -- no state, or expired state: absent
        ELSIF v_vals IS NULL THEN
            v_vals := ratelimit_int8s(v_state); -- written by Update
        END IF;
        %[2]s
        ELSE
            RAISE EXCEPTION USING ERRCODE = '22023',
                MESSAGE = format('ratelimit: algorithm %%s has no SQL form', p_alg);
        END IF;
        IF v_next IS NULL THEN
            RETURN; -- a peek or a denial: nothing to write
        END IF;
        IF v_found THEN
            UPDATE %[1]s SET vals = v_next, state = NULL, expires_at = v_now + v_ttl WHERE key = p_key;
            RETURN;
        END IF;
        INSERT INTO %[1]s (key, vals, expires_at) VALUES (p_key, v_next, v_now + v_ttl)
        ON CONFLICT (key) DO NOTHING;
        IF FOUND THEN
            RETURN;
        END IF;
        -- A concurrent request created the row first (the insert waited for
        -- it to commit): decide again on its state.
    END LOOP;
END
`, t, strings.TrimSpace(calls.String()))
	tag := dollarTag(body)
	return fmt.Sprintf(`-- Decides one request for a key of the table: locks the row, runs the
-- algorithm's SQL form on its live state and writes the next state with its
-- expiry. p_now NULL reads the server's clock; p_wait_ms bounds the wait for
-- the row lock (NULL: lock_timeout as configured).
CREATE OR REPLACE FUNCTION %s(
    p_key bytea, p_alg text, p_now bigint, p_cost bigint, p_peek boolean, p_args bigint[], p_wait_ms bigint,
    OUT allowed boolean, OUT lim bigint, OUT remaining bigint,
    OUT retry_after bigint, OUT reset_after bigint, OUT delay bigint)
LANGUAGE plpgsql VOLATILE AS %s%s%s;
`, fn, tag, body, tag)
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

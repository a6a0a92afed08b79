-- The decide function of one table and one built-in algorithm, here
-- {{.Name}}. Store.Decide calls it, in a statement of its own, for a peek,
-- for a key that has no row (its one-statement UPDATE, row.sql, found
-- none) and for a decision with a deadline in a caller's
-- transaction; every other decision is that UPDATE. The composite's ("all": algorithms.All) takes the parts' names too,
-- calls ratelimit_all_<version> and returns every part's decision, six elements each. This file is a text/template that schema.go fills in with the
-- function's quoted name (the table's name with "_decide_" and the
-- algorithm's appended), the table's quoted name, the algorithm's SQL form
-- (see algorithms/sql.go), the server's clock in microseconds as an
-- expression (as in ratelimit_now) and a dollar-quote tag that occurs nowhere else
-- in the function.
--
-- It returns the decision as [allowed (1 or 0), limit, remaining,
-- retry_after, reset_after, delay]. p_max_delay, p_refund and p_act are the
-- request's reservation and refund fields (algorithms.Request). p_now NULL
-- reads the server's clock;
-- p_wait_ms bounds the wait for the row lock (NULL: lock_timeout as
-- configured).
--
-- It decides with one evaluation of the algorithm. A request that may
-- consume (not a peek) first locks the key's row, if there is one (SELECT
-- ... FOR NO KEY UPDATE, waiting for a concurrent decision on the key to
-- commit and then reading its state), then reads the clock, and runs the
-- algorithm's SQL form once on the row's live state: an expired row counts
-- as no state (the CASE on expires_at), and state written by Update is read
-- through ratelimit_int8s.
-- An admitted request's next state is written into the locked row (found
-- again by its ctid, without a second index lookup), or inserted when the
-- key has no row. A denied request and a peek (which takes no lock) write
-- nothing. The row lock is released when the statement's transaction ends.
--
-- Concurrent first requests for a key cannot both insert: the INSERT ... ON
-- CONFLICT DO NOTHING of the loser waits for the winner's transaction and
-- then inserts nothing, and the loser goes round again, now locking the
-- winner's row and deciding on its state.
CREATE OR REPLACE FUNCTION {{.Func}}(
    p_key bytea, p_now bigint, p_cost bigint, p_peek boolean, p_args bigint[], p_wait_ms bigint{{if .Composite}}, p_parts text[]{{end}},
    p_max_delay bigint, p_refund boolean, p_act bigint)
RETURNS bigint[] LANGUAGE plpgsql VOLATILE AS {{.Tag}}
{{- if .Row}}
-- The table's one-statement decision (row.sql) calls
-- {{.Row}}, the form's row form; naming it here marks it as in use (see
-- docs/stores/postgres.md on dropping unused versions).
{{- end}}
DECLARE
    v_now  bigint;
    v_lock text;
    v_row  tid;
    v_vals bigint[];
    v_st   bytea;
    v_exp  bigint;
    d      {{if .Composite}}ratelimit_all_step{{else}}ratelimit_step{{end}};
BEGIN
    IF p_wait_ms IS NOT NULL THEN
        -- Wait for the row lock no longer than the caller's context allows,
        -- so that a decision the caller gave up on is not applied later.
        v_lock := current_setting('lock_timeout');
        PERFORM set_config('lock_timeout', greatest(p_wait_ms, 1) || 'ms', true);
    END IF;
    LOOP
        IF p_peek AND NOT p_refund THEN
            SELECT r.vals, r.state, r.expires_at INTO v_vals, v_st, v_exp
            FROM {{.Table}} r WHERE r.key = p_key;
        ELSE
            SELECT r.ctid, r.vals, r.state, r.expires_at INTO v_row, v_vals, v_st, v_exp
            FROM {{.Table}} r WHERE r.key = p_key FOR NO KEY UPDATE;
        END IF;
        -- The time of the decision: read once the row is locked, so that a
        -- decision that waited for the lock is not made at a time before
        -- the state it reads.
        v_now := coalesce(p_now, {{.Now}});
        d := {{.Form}}(CASE WHEN v_exp > v_now THEN coalesce(v_vals, ratelimit_int8s(v_st)) END,
            v_now, p_cost, p_peek, p_args{{if .Composite}}, p_parts{{end}}, p_max_delay, p_refund, p_act);
        EXIT WHEN d.next_state IS NULL; -- a peek, a denial, an empty refund: nothing to write
        IF v_row IS NOT NULL THEN
            UPDATE {{.Table}} SET vals = d.next_state, state = NULL, expires_at = v_now + d.ttl
            WHERE ctid = v_row;
            EXIT;
        END IF;
        INSERT INTO {{.Table}} (key, vals, expires_at) VALUES (p_key, d.next_state, v_now + d.ttl)
        ON CONFLICT (key) DO NOTHING;
        EXIT WHEN FOUND;
        -- A concurrent first request created the row: go round again to
        -- lock it and decide on its state.
    END LOOP;
    IF p_wait_ms IS NOT NULL THEN
        PERFORM set_config('lock_timeout', v_lock, true);
    END IF;
    RETURN {{if .Composite}}d.decisions{{else}}ARRAY[d.allowed::int::bigint, d.lim, d.remaining, d.retry_after, d.reset_after, d.delay]{{end}};
END
{{.Tag}};

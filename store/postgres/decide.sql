-- The decide function of one table and one built-in algorithm, here
-- {{.Name}}: the one statement of a decision (Store.Decide) is a call to
-- it. This file is a text/template that schema.go fills in with the
-- function's quoted name (the table's name with "_decide_" and the
-- algorithm's appended), the table's quoted name, the algorithm's SQL form
-- (see algorithms/sql.go) and a dollar-quote tag that occurs nowhere else
-- in the function.
--
-- It returns the decision as [allowed (1 or 0), limit, remaining,
-- retry_after, reset_after, delay]. p_now NULL reads the server's clock;
-- p_wait_ms bounds the wait for the row lock (NULL: lock_timeout as
-- configured).
--
-- A request that may consume (not a peek) runs as one upsert: the INSERT of
-- the state a fresh key would get, ON CONFLICT DO UPDATE with the algorithm
-- applied to the existing row, under the row lock the upsert takes itself,
-- and only WHERE the algorithm admits the request. Concurrent first
-- requests for a key cannot both insert: the loser's insert turns into the
-- update of the winner's row, decided on its state. An expired row counts
-- as no state (the CASE on expires_at), and state written by Update is read
-- through ratelimit_int8s. The admitted request's decision comes back
-- through the row's dec column, since RETURNING sees only the new row.
--
-- When the upsert writes nothing (the request is denied), or for a peek,
-- the function decides on the latest committed state without a lock and
-- writes nothing; should that state admit the request after all (it
-- changed in between: a Reset, an expiry), it goes round again.
CREATE OR REPLACE FUNCTION {{.Func}}(
    p_key bytea, p_now bigint, p_cost bigint, p_peek boolean, p_args bigint[], p_wait_ms bigint)
RETURNS bigint[] LANGUAGE plpgsql VOLATILE AS {{.Tag}}
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
            INSERT INTO {{.Table}} AS r (key, vals, expires_at, dec)
            SELECT p_key, g.next_state, v_now + g.ttl,
                ARRAY[1, g.lim, g.remaining, g.retry_after, g.reset_after, g.delay]
            FROM {{.Form}}(NULL, v_now, p_cost, false, p_args) g
            WHERE g.next_state IS NOT NULL
            ON CONFLICT (key) DO UPDATE SET (vals, state, expires_at, dec) = (
                SELECT g.next_state, NULL::bytea, v_now + g.ttl,
                    ARRAY[1, g.lim, g.remaining, g.retry_after, g.reset_after, g.delay]
                FROM {{.Form}}({{template "live"}}, v_now, p_cost, false, p_args) g)
            WHERE ({{.Form}}({{template "live"}}, v_now, p_cost, false, p_args)).next_state IS NOT NULL
            RETURNING r.dec INTO v_dec;
            IF FOUND THEN
                EXIT; -- admitted and written
            END IF;
        END IF;
        -- A peek, or a request the upsert did not admit: decide on the
        -- latest committed state, writing nothing.
        SELECT g.* INTO d
        FROM (SELECT) one LEFT JOIN {{.Table}} r ON r.key = p_key,
            LATERAL {{.Form}}({{template "live"}}, v_now, p_cost, p_peek, p_args) g;
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
{{.Tag}};
{{define "live"}}CASE WHEN r.expires_at > v_now THEN coalesce(r.vals, ratelimit_int8s(r.state)) END{{end}}

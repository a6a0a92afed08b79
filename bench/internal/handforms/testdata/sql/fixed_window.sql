-- Fixed window: the SQL form of algorithms.FixedWindow (fixedwindow.go).
--
-- args: [limit, period µs]. state: [window start µs, count], or NULL for a
-- key with no live state. Every value is a bigint below 2^53, computed with
-- the Go form's integer operations in the Go form's order.
--
-- Written for speed as PL/pgSQL: few statements, each a single expression,
-- since a PL/pgSQL expression costs most the first time it runs in a
-- transaction, and every decision is a transaction of its own.

-- The result type shared by every SQL form, and the error raised for state a
-- form cannot read. Each form's file creates them if missing, so that any
-- file runs on its own.
DO $$ BEGIN
    CREATE TYPE ratelimit_step AS (
        next_state bigint[], ttl bigint, allowed boolean, lim bigint,
        remaining bigint, retry_after bigint, reset_after bigint, delay bigint);
EXCEPTION WHEN duplicate_object THEN NULL;
END $$;

CREATE OR REPLACE FUNCTION ratelimit_corrupt(msg text) RETURNS bigint
LANGUAGE plpgsql VOLATILE AS $$
BEGIN
    RAISE EXCEPTION USING ERRCODE = 'RL001', MESSAGE = 'ratelimit: corrupt state: ' || msg;
END
$$;

CREATE OR REPLACE FUNCTION ratelimit_fixed_window(
    state bigint[], now_us bigint, cost bigint, peek boolean, args bigint[])
RETURNS ratelimit_step LANGUAGE plpgsql IMMUTABLE PARALLEL SAFE AS $$
DECLARE
    -- The stored window is current while now < start + period; otherwise a
    -- new window aligned to period starts with a count of zero.
    ws bigint := CASE
        WHEN state IS NULL THEN now_us - now_us % args[2]
        WHEN cardinality(state) <> 2 THEN
            ratelimit_corrupt(format('fixed window of %s fields, want 2', cardinality(state)))
        WHEN now_us >= state[1] + args[2] THEN now_us - now_us % args[2]
        ELSE state[1] END;
    cnt bigint := CASE WHEN state IS NULL OR now_us >= state[1] + args[2] THEN 0 ELSE state[2] END;
    ok boolean := cnt + cost <= args[1];
BEGIN
    IF ok AND NOT peek THEN
        cnt := cnt + cost;
        RETURN ROW(ARRAY[ws, cnt], ws + args[2] - now_us, true, args[1], args[1] - cnt,
            0, ws + args[2] - now_us, 0)::ratelimit_step;
    END IF;
    -- Denied, or a peek: nothing to store.
    RETURN ROW(NULL, NULL, ok, args[1], greatest(args[1] - cnt, 0),
        CASE WHEN ok THEN 0 ELSE ws + args[2] - now_us END,
        CASE WHEN cnt = 0 THEN 0 ELSE ws + args[2] - now_us END, 0)::ratelimit_step;
END
$$;

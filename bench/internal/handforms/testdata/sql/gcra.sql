-- GCRA: the SQL form of algorithms.GCRA (rate.go).
--
-- args: [unit, drip, capacity, fill, burst], the exact fixed-point rate of
-- rate.args. state: [TAT µs, TAT fraction in 1/drip µs, drip], or NULL for
-- a key with no live state. A fraction stored under another drip is
-- rescaled in float8 exactly as the Go form does.
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

CREATE OR REPLACE FUNCTION ratelimit_gcra(
    state bigint[], now_us bigint, cost bigint, peek boolean, args bigint[])
RETURNS ratelimit_step LANGUAGE plpgsql IMMUTABLE PARALLEL SAFE AS $$
DECLARE
    -- Units by which the TAT lies ahead of now; a TAT further ahead than the
    -- capacity (a clock behind the one that stored it, or a smaller burst
    -- than before) is capped.
    ahead bigint := CASE
        WHEN state IS NULL THEN 0
        WHEN cardinality(state) <> 3 OR state[3] <= 0 OR state[2] < 0 OR state[2] >= state[3] THEN
            ratelimit_corrupt(format('gcra %s', state))
        WHEN state[1] < now_us THEN 0
        ELSE least(least(state[1] - now_us, args[4]) * args[2]
            + CASE WHEN state[3] = args[2] THEN state[2]
                ELSE floor(state[2]::float8 / state[3]::float8 * args[2]::float8)::bigint END,
            args[3])
        END;
    need bigint := cost * args[1];
    ok boolean := ahead + need <= args[3];
BEGIN
    IF ok AND NOT peek THEN
        ahead := ahead + need;
        RETURN ROW(ARRAY[now_us + ahead / args[2], ahead % args[2], args[2]],
            (ahead + args[2] - 1) / args[2], true, args[5], greatest(args[3] - ahead, 0) / args[1],
            0, (ahead + args[2] - 1) / args[2], 0)::ratelimit_step;
    END IF;
    RETURN ROW(NULL, NULL, ok, args[5], greatest(args[3] - ahead, 0) / args[1],
        CASE WHEN ok THEN 0 ELSE (ahead + need - args[3] + args[2] - 1) / args[2] END,
        (ahead + args[2] - 1) / args[2], 0)::ratelimit_step;
END
$$;

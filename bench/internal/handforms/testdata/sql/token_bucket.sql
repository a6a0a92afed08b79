-- Token bucket: the SQL form of algorithms.TokenBucket (rate.go).
--
-- args: [unit, drip, capacity, fill, burst], the exact fixed-point rate of
-- rate.args. state: [missing units, last update µs, unit], or NULL for a
-- key with no live state (a full bucket). A level stored under another unit
-- is rescaled in float8 exactly as rate.rescale does, then drained as
-- rate.drain does.
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

CREATE OR REPLACE FUNCTION ratelimit_token_bucket(
    state bigint[], now_us bigint, cost bigint, peek boolean, args bigint[])
RETURNS ratelimit_step LANGUAGE plpgsql IMMUTABLE PARALLEL SAFE AS $$
DECLARE
    deficit bigint := CASE
        WHEN state IS NULL THEN 0
        WHEN cardinality(state) <> 3 OR state[3] <= 0 THEN
            ratelimit_corrupt(format('token bucket %s', state))
        WHEN now_us - state[2] >= args[4] THEN 0
        WHEN now_us - state[2] <= 0 THEN least(CASE WHEN state[3] = args[1] THEN state[1]
            ELSE floor(state[1]::float8 / state[3]::float8 * args[1]::float8)::bigint END, args[3])
        ELSE greatest(least(CASE WHEN state[3] = args[1] THEN state[1]
            ELSE floor(state[1]::float8 / state[3]::float8 * args[1]::float8)::bigint END, args[3])
            - (now_us - state[2]) * args[2], 0)
        END;
    need bigint := cost * args[1];
    ok boolean := deficit + need <= args[3];
BEGIN
    IF ok AND NOT peek THEN
        deficit := deficit + need;
        RETURN ROW(ARRAY[deficit, CASE WHEN state IS NULL THEN now_us ELSE greatest(state[2], now_us) END, args[1]],
            (deficit + args[2] - 1) / args[2], true, args[5], (args[3] - deficit) / args[1],
            0, (deficit + args[2] - 1) / args[2], 0)::ratelimit_step;
    END IF;
    RETURN ROW(NULL, NULL, ok, args[5], (args[3] - deficit) / args[1],
        CASE WHEN ok THEN 0 ELSE (deficit + need - args[3] + args[2] - 1) / args[2] END,
        (deficit + args[2] - 1) / args[2], 0)::ratelimit_step;
END
$$;

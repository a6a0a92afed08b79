-- Leaky bucket (as a queue): the SQL form of algorithms.LeakyBucket
-- (rate.go).
--
-- args: [unit, drip, capacity, fill, capacity in requests], the exact
-- fixed-point rate of rate.args. state: [queued units, last update µs,
-- unit], or NULL for a key with no live state (an empty queue). A level
-- stored under another unit is rescaled in float8 exactly as rate.rescale
-- does, then drained as rate.drain does.
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

CREATE OR REPLACE FUNCTION ratelimit_leaky_bucket(
    state bigint[], now_us bigint, cost bigint, peek boolean, args bigint[])
RETURNS ratelimit_step LANGUAGE plpgsql IMMUTABLE PARALLEL SAFE AS $$
DECLARE
    level bigint := CASE
        WHEN state IS NULL THEN 0
        WHEN cardinality(state) <> 3 OR state[3] <= 0 THEN
            ratelimit_corrupt(format('leaky bucket %s', state))
        WHEN now_us - state[2] >= args[4] THEN 0
        WHEN now_us - state[2] <= 0 THEN least(CASE WHEN state[3] = args[1] THEN state[1]
            ELSE floor(state[1]::float8 / state[3]::float8 * args[1]::float8)::bigint END, args[3])
        ELSE greatest(least(CASE WHEN state[3] = args[1] THEN state[1]
            ELSE floor(state[1]::float8 / state[3]::float8 * args[1]::float8)::bigint END, args[3])
            - (now_us - state[2]) * args[2], 0)
        END;
    need bigint := cost * args[1];
    ok boolean := level + need <= args[3];
BEGIN
    IF ok AND NOT peek THEN
        level := level + need;
        RETURN ROW(ARRAY[level, CASE WHEN state IS NULL THEN now_us ELSE greatest(state[2], now_us) END, args[1]],
            (level + args[2] - 1) / args[2], true, args[5], (args[3] - level) / args[1],
            0, (level + args[2] - 1) / args[2], (level - need + args[2] - 1) / args[2])::ratelimit_step;
    END IF;
    RETURN ROW(NULL, NULL, ok, args[5], (args[3] - level) / args[1],
        CASE WHEN ok THEN 0 ELSE (level + need - args[3] + args[2] - 1) / args[2] END,
        (level + args[2] - 1) / args[2],
        CASE WHEN ok THEN (level + args[2] - 1) / args[2] ELSE 0 END)::ratelimit_step;
END
$$;

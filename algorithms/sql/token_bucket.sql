-- Token bucket: the SQL form of algorithms.TokenBucket (rate.go).
--
-- args: [unit, drip, capacity, fill, burst], the exact fixed-point rate of
-- rate.args. state: [missing units, last update µs, unit], or NULL for a
-- key with no live state (a full bucket). A level stored under another unit
-- is rescaled in float8 exactly as rate.rescale does.
CREATE OR REPLACE FUNCTION ratelimit_token_bucket(
    state bigint[], now_us bigint, cost bigint, peek boolean, args bigint[],
    OUT next_state bigint[], OUT ttl bigint, OUT allowed boolean, OUT lim bigint,
    OUT remaining bigint, OUT retry_after bigint, OUT reset_after bigint, OUT delay bigint)
LANGUAGE plpgsql IMMUTABLE PARALLEL SAFE AS $$
DECLARE
    a_unit     bigint := args[1];
    a_drip     bigint := args[2];
    a_capacity bigint := args[3];
    a_fill     bigint := args[4];
    a_burst    bigint := args[5];
    deficit    bigint := 0;
    last       bigint := now_us;
    elapsed    bigint;
    need       bigint;
BEGIN
    IF state IS NOT NULL THEN
        IF cardinality(state) <> 3 THEN
            RAISE EXCEPTION USING ERRCODE = 'RL001',
                MESSAGE = format('ratelimit: corrupt state: token bucket of %s fields, want 3', cardinality(state));
        END IF;
        IF state[3] <= 0 THEN
            RAISE EXCEPTION USING ERRCODE = 'RL001',
                MESSAGE = format('ratelimit: corrupt state: token bucket unit %s', state[3]);
        END IF;
        -- rescale
        IF state[3] = a_unit THEN
            deficit := least(state[1], a_capacity);
        ELSE
            deficit := least(floor(state[1]::float8 / state[3]::float8 * a_unit::float8)::bigint, a_capacity);
        END IF;
        last := greatest(state[2], now_us);
        -- drain
        elapsed := now_us - state[2];
        IF elapsed > 0 THEN
            IF elapsed >= a_fill THEN
                deficit := 0;
            ELSE
                deficit := greatest(deficit - elapsed * a_drip, 0);
            END IF;
        END IF;
    END IF;
    need := cost * a_unit;
    lim := a_burst;
    retry_after := 0;
    delay := 0;
    allowed := deficit + need <= a_capacity;
    IF allowed AND NOT peek THEN
        deficit := deficit + need;
    END IF;
    remaining := (a_capacity - deficit) / a_unit;
    reset_after := (deficit + a_drip - 1) / a_drip;
    IF NOT allowed THEN
        retry_after := (deficit + need - a_capacity + a_drip - 1) / a_drip;
        RETURN;
    END IF;
    IF peek THEN
        RETURN;
    END IF;
    next_state := ARRAY[deficit, last, a_unit];
    ttl := reset_after;
END
$$;

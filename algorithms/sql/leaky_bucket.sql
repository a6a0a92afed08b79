-- Leaky bucket (as a queue): the SQL form of algorithms.LeakyBucket
-- (rate.go).
--
-- args: [unit, drip, capacity, fill, capacity in requests], the exact
-- fixed-point rate of rate.args. state: [queued units, last update µs,
-- unit], or NULL for a key with no live state (an empty queue).
CREATE OR REPLACE FUNCTION ratelimit_leaky_bucket(
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
    level      bigint := 0;
    last       bigint := now_us;
    elapsed    bigint;
    need       bigint;
BEGIN
    IF state IS NOT NULL THEN
        IF cardinality(state) <> 3 THEN
            RAISE EXCEPTION USING ERRCODE = 'RL001',
                MESSAGE = format('ratelimit: corrupt state: leaky bucket of %s fields, want 3', cardinality(state));
        END IF;
        IF state[3] <= 0 THEN
            RAISE EXCEPTION USING ERRCODE = 'RL001',
                MESSAGE = format('ratelimit: corrupt state: leaky bucket unit %s', state[3]);
        END IF;
        -- rescale
        IF state[3] = a_unit THEN
            level := least(state[1], a_capacity);
        ELSE
            level := least(floor(state[1]::float8 / state[3]::float8 * a_unit::float8)::bigint, a_capacity);
        END IF;
        -- drain
        elapsed := now_us - state[2];
        IF elapsed > 0 THEN
            IF elapsed >= a_fill THEN
                level := 0;
            ELSE
                level := greatest(level - elapsed * a_drip, 0);
            END IF;
        END IF;
        last := greatest(state[2], now_us);
    END IF;
    need := cost * a_unit;
    lim := a_burst;
    retry_after := 0;
    delay := 0;
    allowed := level + need <= a_capacity;
    IF allowed THEN
        delay := (level + a_drip - 1) / a_drip;
        IF NOT peek THEN
            level := level + need;
        END IF;
    END IF;
    remaining := (a_capacity - level) / a_unit;
    reset_after := (level + a_drip - 1) / a_drip;
    IF NOT allowed THEN
        retry_after := (level + need - a_capacity + a_drip - 1) / a_drip;
        RETURN;
    END IF;
    IF peek THEN
        RETURN;
    END IF;
    next_state := ARRAY[level, last, a_unit];
    ttl := reset_after;
END
$$;

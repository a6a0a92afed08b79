-- GCRA: the SQL form of algorithms.GCRA (rate.go).
--
-- args: [unit, drip, capacity, fill, burst], the exact fixed-point rate of
-- rate.args. state: [TAT µs, TAT fraction in 1/drip µs, drip], or NULL for
-- a key with no live state. A fraction stored under another drip is
-- rescaled in float8 exactly as the Go form does.
CREATE OR REPLACE FUNCTION ratelimit_gcra(
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
    ahead      bigint := 0; -- units by which the TAT lies ahead of now
    tat        bigint;
    frac       bigint;
    s_drip     bigint;
    us         bigint;
    need       bigint;
BEGIN
    IF state IS NOT NULL THEN
        IF cardinality(state) <> 3 THEN
            RAISE EXCEPTION USING ERRCODE = 'RL001',
                MESSAGE = format('ratelimit: corrupt state: gcra of %s fields, want 3', cardinality(state));
        END IF;
        tat := state[1];
        frac := state[2];
        s_drip := state[3];
        IF s_drip <= 0 OR frac < 0 OR frac >= s_drip THEN
            RAISE EXCEPTION USING ERRCODE = 'RL001',
                MESSAGE = format('ratelimit: corrupt state: gcra fraction %s/%s', frac, s_drip);
        END IF;
        IF tat >= now_us THEN
            -- A TAT further ahead than the capacity is capped.
            us := least(tat - now_us, a_fill);
            IF s_drip <> a_drip THEN
                frac := floor(frac::float8 / s_drip::float8 * a_drip::float8)::bigint;
            END IF;
            ahead := least(us * a_drip + frac, a_capacity);
        END IF;
    END IF;
    need := cost * a_unit;
    lim := a_burst;
    retry_after := 0;
    delay := 0;
    allowed := ahead + need <= a_capacity;
    IF allowed AND NOT peek THEN
        ahead := ahead + need;
    END IF;
    remaining := greatest(a_capacity - ahead, 0) / a_unit;
    reset_after := (ahead + a_drip - 1) / a_drip;
    IF NOT allowed THEN
        retry_after := (ahead + need - a_capacity + a_drip - 1) / a_drip;
        RETURN;
    END IF;
    IF peek THEN
        RETURN;
    END IF;
    next_state := ARRAY[now_us + ahead / a_drip, ahead % a_drip, a_drip];
    ttl := reset_after;
END
$$;

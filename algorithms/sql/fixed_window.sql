-- Fixed window: the SQL form of algorithms.FixedWindow (fixedwindow.go).
--
-- args: [limit, period µs]. state: [window start µs, count], or NULL for a
-- key with no live state. Every value is a bigint below 2^53, computed with
-- the Go form's integer operations in the Go form's order.
CREATE OR REPLACE FUNCTION ratelimit_fixed_window(
    state bigint[], now_us bigint, cost bigint, peek boolean, args bigint[],
    OUT next_state bigint[], OUT ttl bigint, OUT allowed boolean, OUT lim bigint,
    OUT remaining bigint, OUT retry_after bigint, OUT reset_after bigint, OUT delay bigint)
LANGUAGE plpgsql IMMUTABLE PARALLEL SAFE AS $$
DECLARE
    a_limit  bigint := args[1];
    a_period bigint := args[2];
    ws       bigint := 0;
    cnt      bigint := 0;
    fresh    boolean := true;
    we       bigint;
BEGIN
    IF state IS NOT NULL THEN
        IF cardinality(state) <> 2 THEN
            RAISE EXCEPTION USING ERRCODE = 'RL001',
                MESSAGE = format('ratelimit: corrupt state: fixed window of %s fields, want 2', cardinality(state));
        END IF;
        ws := state[1];
        cnt := state[2];
        fresh := now_us >= ws + a_period;
    END IF;
    IF fresh THEN
        ws := now_us - now_us % a_period;
        cnt := 0;
    END IF;
    we := ws + a_period;
    lim := a_limit;
    remaining := 0;
    retry_after := 0;
    reset_after := we - now_us;
    delay := 0;
    IF cnt = 0 THEN
        reset_after := 0;
    END IF;
    allowed := cnt + cost <= a_limit;
    IF NOT allowed THEN
        remaining := greatest(a_limit - cnt, 0);
        retry_after := we - now_us;
        RETURN;
    END IF;
    IF peek THEN
        remaining := greatest(a_limit - cnt, 0);
        RETURN;
    END IF;
    cnt := cnt + cost;
    remaining := a_limit - cnt;
    reset_after := we - now_us;
    next_state := ARRAY[ws, cnt];
    ttl := we - now_us;
END
$$;

-- Sliding log: the SQL form of algorithms.SlidingLog (slidinglog.go).
--
-- args: [limit, period µs]. state: the log as a flat array of (time µs,
-- cost) pairs sorted by time, [t1, c1, t2, c2, ...], or NULL for a key with
-- no live state. Two requests in the same microsecond are two pairs.
CREATE OR REPLACE FUNCTION ratelimit_sliding_log(
    state bigint[], now_us bigint, cost bigint, peek boolean, args bigint[],
    OUT next_state bigint[], OUT ttl bigint, OUT allowed boolean, OUT lim bigint,
    OUT remaining bigint, OUT retry_after bigint, OUT reset_after bigint, OUT delay bigint)
LANGUAGE plpgsql IMMUTABLE PARALLEL SAFE AS $$
DECLARE
    a_limit  bigint := args[1];
    a_period bigint := args[2];
    log      bigint[] := coalesce(state, '{}'::bigint[]);
    n        integer;
    lo       integer := 0; -- first live entry, counting from 0
    pos      integer;
    used     bigint := 0;
    newest   bigint := -1;
    excess   bigint;
    c        bigint;
BEGIN
    IF cardinality(log) % 2 <> 0 THEN
        RAISE EXCEPTION USING ERRCODE = 'RL001',
            MESSAGE = format('ratelimit: corrupt state: sliding log of %s fields', cardinality(log));
    END IF;
    n := cardinality(log) / 2;
    -- Skip expired entries: they are the oldest, at the front.
    WHILE lo < n LOOP
        EXIT WHEN now_us < log[2*lo + 1] + a_period;
        lo := lo + 1;
    END LOOP;
    FOR i IN lo .. n - 1 LOOP
        c := log[2*i + 2];
        IF c <= 0 THEN
            RAISE EXCEPTION USING ERRCODE = 'RL001',
                MESSAGE = format('ratelimit: corrupt state: sliding log entry of cost %s', c);
        END IF;
        used := used + c;
        newest := log[2*i + 1];
    END LOOP;
    lim := a_limit;
    remaining := 0;
    retry_after := 0;
    reset_after := 0;
    delay := 0;
    IF newest >= 0 THEN
        reset_after := newest + a_period - now_us;
    END IF;
    allowed := used + cost <= a_limit;
    IF NOT allowed THEN
        remaining := greatest(a_limit - used, 0);
        -- Wait until enough of the oldest entries have left the window.
        excess := used + cost - a_limit;
        FOR i IN lo .. n - 1 LOOP
            excess := excess - log[2*i + 2];
            IF excess <= 0 THEN
                retry_after := log[2*i + 1] + a_period - now_us;
                EXIT;
            END IF;
        END LOOP;
        RETURN;
    END IF;
    IF peek THEN
        remaining := greatest(a_limit - used, 0);
        RETURN;
    END IF;
    remaining := greatest(a_limit - used - cost, 0);
    -- The new log: the live entries plus this request, kept sorted by time.
    pos := n;
    WHILE pos > lo LOOP
        EXIT WHEN log[2*pos - 1] <= now_us;
        pos := pos - 1;
    END LOOP;
    next_state := log[2*lo + 1 : 2*pos] || ARRAY[now_us, cost] || log[2*pos + 1 : 2*n];
    newest := greatest(newest, now_us);
    reset_after := newest + a_period - now_us;
    ttl := reset_after;
END
$$;

-- Sliding window counter: the SQL form of algorithms.SlidingWindow
-- (slidingwindow.go).
--
-- args: [limit, period µs]. state: [current window start µs, current count,
-- previous count], or NULL for a key with no live state. The weighted
-- estimate and the retry search use float8, with the Go form's operations in
-- the Go form's order, so that floor gives the same integers.

-- ratelimit_sliding_window_weighted is the previous window's contribution
-- after elapsed µs of the current one: floor(prev × (period − elapsed) ÷ period).
CREATE OR REPLACE FUNCTION ratelimit_sliding_window_weighted(prev bigint, elapsed bigint, period bigint)
RETURNS bigint LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
    SELECT floor(prev::float8 * (period - elapsed)::float8 / period::float8)::bigint
$$;

-- ratelimit_sliding_window_wait is the smallest e ≥ from_us, within a
-- window, at which the weighted estimate is at most room; period when there
-- is none before the window ends.
CREATE OR REPLACE FUNCTION ratelimit_sliding_window_wait(prev bigint, room bigint, from_us bigint, period bigint)
RETURNS bigint LANGUAGE plpgsql IMMUTABLE PARALLEL SAFE AS $$
DECLARE
    e bigint := from_us;
BEGIN
    IF room < 0 THEN
        RETURN period;
    END IF;
    IF prev > 0 THEN
        e := greatest(from_us, period - floor((room + 1)::float8 * period::float8 / prev::float8)::bigint);
    END IF;
    WHILE e > from_us AND ratelimit_sliding_window_weighted(prev, e - 1, period) <= room LOOP
        e := e - 1;
    END LOOP;
    WHILE e < period AND ratelimit_sliding_window_weighted(prev, e, period) > room LOOP
        e := e + 1;
    END LOOP;
    RETURN e;
END
$$;

CREATE OR REPLACE FUNCTION ratelimit_sliding_window(
    state bigint[], now_us bigint, cost bigint, peek boolean, args bigint[],
    OUT next_state bigint[], OUT ttl bigint, OUT allowed boolean, OUT lim bigint,
    OUT remaining bigint, OUT retry_after bigint, OUT reset_after bigint, OUT delay bigint)
LANGUAGE plpgsql IMMUTABLE PARALLEL SAFE AS $$
DECLARE
    a_limit  bigint := args[1];
    a_period bigint := args[2];
    ws       bigint := now_us - now_us % a_period;
    curr     bigint := 0;
    prev     bigint := 0;
    elapsed  bigint;
    weighted bigint;
    e        bigint;
BEGIN
    IF state IS NOT NULL THEN
        IF cardinality(state) <> 3 THEN
            RAISE EXCEPTION USING ERRCODE = 'RL001',
                MESSAGE = format('ratelimit: corrupt state: sliding window of %s fields, want 3', cardinality(state));
        END IF;
        IF now_us < state[1] + a_period THEN
            -- the current window (or one ahead of our clock)
            ws := state[1];
            curr := state[2];
            prev := state[3];
        ELSIF (now_us - state[1]) / a_period = 1 THEN
            -- the stored window is the previous one
            ws := state[1] + a_period;
            curr := 0;
            prev := state[2];
        END IF;
    END IF;
    elapsed := greatest(now_us - ws, 0);
    weighted := ratelimit_sliding_window_weighted(prev, elapsed, a_period);
    lim := a_limit;
    retry_after := 0;
    reset_after := 0;
    delay := 0;
    allowed := weighted + curr + cost <= a_limit;
    IF allowed AND NOT peek THEN
        curr := curr + cost;
    END IF;
    remaining := greatest(a_limit - weighted - curr, 0);
    IF curr > 0 THEN
        reset_after := ws + 2*a_period - now_us;
    ELSIF prev > 0 THEN
        reset_after := ws + a_period - now_us;
    END IF;
    IF NOT allowed THEN
        -- First try later in this window, as prev decays; failing that, in
        -- the next window, where this window's count becomes prev.
        e := ratelimit_sliding_window_wait(prev, a_limit - curr - cost, elapsed, a_period);
        IF e < a_period THEN
            retry_after := e - elapsed;
        ELSE
            retry_after := a_period - elapsed + ratelimit_sliding_window_wait(curr, a_limit - cost, 0, a_period);
        END IF;
        RETURN;
    END IF;
    IF peek THEN
        RETURN;
    END IF;
    next_state := ARRAY[ws, curr, prev];
    ttl := ws + 2*a_period - now_us;
END
$$;

-- Sliding window counter: the SQL form of algorithms.SlidingWindow
-- (slidingwindow.go).
--
-- args: [limit, period µs]. state: [current window start µs, current count,
-- previous count], or NULL for a key with no live state. The weighted
-- estimate and the retry search use float8, with the Go form's operations in
-- the Go form's order, so that floor gives the same integers.
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

-- ratelimit_sliding_window_retry is a denied request's retry-after: first
-- later in this window, as prev decays; failing that, in the next window,
-- where this window's count becomes prev.
CREATE OR REPLACE FUNCTION ratelimit_sliding_window_retry(
    prev bigint, curr bigint, cost bigint, elapsed bigint, lim bigint, period bigint)
RETURNS bigint LANGUAGE plpgsql IMMUTABLE PARALLEL SAFE AS $$
DECLARE
    e bigint := ratelimit_sliding_window_wait(prev, lim - curr - cost, elapsed, period);
BEGIN
    IF e < period THEN
        RETURN e - elapsed;
    END IF;
    RETURN period - elapsed + ratelimit_sliding_window_wait(curr, lim - cost, 0, period);
END
$$;

CREATE OR REPLACE FUNCTION ratelimit_sliding_window(
    state bigint[], now_us bigint, cost bigint, peek boolean, args bigint[])
RETURNS ratelimit_step LANGUAGE plpgsql IMMUTABLE PARALLEL SAFE AS $$
DECLARE
    -- 1: the stored window is current (or ahead of our clock); 2: it is the
    -- previous one; 0: it is older, or there is none.
    k integer := CASE
        WHEN state IS NULL THEN 0
        WHEN cardinality(state) <> 3 THEN
            ratelimit_corrupt(format('sliding window of %s fields, want 3', cardinality(state)))
        WHEN now_us < state[1] + args[2] THEN 1
        WHEN (now_us - state[1]) / args[2] = 1 THEN 2
        ELSE 0 END;
    ws bigint := CASE k WHEN 1 THEN state[1] WHEN 2 THEN state[1] + args[2] ELSE now_us - now_us % args[2] END;
    curr bigint := CASE k WHEN 1 THEN state[2] ELSE 0 END;
    prev bigint := CASE k WHEN 1 THEN state[3] WHEN 2 THEN state[2] ELSE 0 END;
    elapsed bigint := greatest(now_us - ws, 0);
    weighted bigint := ratelimit_sliding_window_weighted(prev, elapsed, args[2]);
    ok boolean := weighted + curr + cost <= args[1];
BEGIN
    IF ok AND NOT peek THEN
        curr := curr + cost;
        RETURN ROW(ARRAY[ws, curr, prev], ws + 2*args[2] - now_us, true, args[1],
            greatest(args[1] - weighted - curr, 0), 0, ws + 2*args[2] - now_us, 0)::ratelimit_step;
    END IF;
    RETURN ROW(NULL, NULL, ok, args[1], greatest(args[1] - weighted - curr, 0),
        CASE WHEN ok THEN 0 ELSE ratelimit_sliding_window_retry(prev, curr, cost, elapsed, args[1], args[2]) END,
        CASE WHEN curr > 0 THEN ws + 2*args[2] - now_us WHEN prev > 0 THEN ws + args[2] - now_us ELSE 0 END,
        0)::ratelimit_step;
END
$$;

-- Sliding log: the SQL form of algorithms.SlidingLog (slidinglog.go).
--
-- args: [limit, period µs]. state: the log as a flat array of (time µs,
-- cost) pairs sorted by time, [t1, c1, t2, c2, ...], or NULL for a key with
-- no live state. Two requests in the same microsecond are two pairs.

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

CREATE OR REPLACE FUNCTION ratelimit_sliding_log(
    state bigint[], now_us bigint, cost bigint, peek boolean, args bigint[])
RETURNS ratelimit_step LANGUAGE plpgsql IMMUTABLE PARALLEL SAFE AS $$
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
    r        ratelimit_step;
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
    r.lim := a_limit;
    r.remaining := 0;
    r.retry_after := 0;
    r.reset_after := 0;
    r.delay := 0;
    IF newest >= 0 THEN
        r.reset_after := newest + a_period - now_us;
    END IF;
    r.allowed := used + cost <= a_limit;
    IF NOT r.allowed THEN
        r.remaining := greatest(a_limit - used, 0);
        -- Wait until enough of the oldest entries have left the window.
        excess := used + cost - a_limit;
        FOR i IN lo .. n - 1 LOOP
            excess := excess - log[2*i + 2];
            IF excess <= 0 THEN
                r.retry_after := log[2*i + 1] + a_period - now_us;
                EXIT;
            END IF;
        END LOOP;
        RETURN r;
    END IF;
    IF peek THEN
        r.remaining := greatest(a_limit - used, 0);
        RETURN r;
    END IF;
    r.remaining := greatest(a_limit - used - cost, 0);
    -- The new log: the live entries plus this request, kept sorted by time.
    pos := n;
    WHILE pos > lo LOOP
        EXIT WHEN log[2*pos - 1] <= now_us;
        pos := pos - 1;
    END LOOP;
    r.next_state := log[2*lo + 1 : 2*pos] || ARRAY[now_us, cost] || log[2*pos + 1 : 2*n];
    newest := greatest(newest, now_us);
    r.reset_after := newest + a_period - now_us;
    r.ttl := r.reset_after;
    RETURN r;
END
$$;

-- Sliding log: the SQL form of algorithms.SlidingLog (slidinglog.go).
--
-- args: [limit, period µs]. state: a header pair (-1, total cost), then the
-- entries as (time µs, cost) pairs sorted by time, [-1, total, t1, c1, t2,
-- c2, ...], or NULL for a key with no live state. Two requests in the same
-- microsecond are two pairs. A log written before the header existed,
-- [t1, c1, ...], is still read: it is summed once, and written with its
-- header when it next admits. (Versions without the header drop it as an
-- expired entry, so they read a log with one too.)
--
-- A decision reads only the entries that have left the window, the newest
-- one, and for a denial the oldest ones until its retry time is known; the
-- next state is built with array slices, not element by element.

-- formgen: prelude

-- Raises RL001 unless (t, c) is an entry the log could hold.
CREATE OR REPLACE FUNCTION ratelimit_sliding_log_entry(t bigint, c bigint) RETURNS void
LANGUAGE plpgsql IMMUTABLE PARALLEL SAFE AS $$
BEGIN
    IF t IS NULL OR c IS NULL OR t < 0 OR t > 9007199254740992 OR c <= 0 OR c > 9007199254740992 THEN
        RAISE EXCEPTION USING ERRCODE = 'RL001',
            MESSAGE = format('ratelimit: corrupt state: sliding log entry (%s, %s)', t, c);
    END IF;
END
$$;

CREATE OR REPLACE FUNCTION ratelimit_sliding_log(
    state bigint[], now_us bigint, cost bigint, peek boolean, args bigint[],
    max_delay bigint, refund boolean, act bigint)
RETURNS ratelimit_step LANGUAGE plpgsql IMMUTABLE PARALLEL SAFE AS $$
DECLARE
    a_limit  bigint := args[1];
    a_period bigint := args[2];
    log      bigint[] := coalesce(state, '{}'::bigint[]);
    b        integer := 0; -- entry i is log[b + 2i + 1 : b + 2i + 2]
    n        integer;
    lo       integer := 0; -- first live entry, counting from 0
    pos      integer;
    used     bigint := 0;
    newest   bigint := -1;
    excess   bigint;
    t        bigint;
    c        bigint;
    r        ratelimit_step;
BEGIN
    IF cardinality(log) % 2 <> 0 THEN
        RAISE EXCEPTION USING ERRCODE = 'RL001',
            MESSAGE = format('ratelimit: corrupt state: sliding log of %s fields', cardinality(log));
    END IF;
    IF log[1] = -1 THEN
        b := 2;
    END IF;
    n := (cardinality(log) - b) / 2;
    IF b = 2 THEN
        used := log[2];
        IF used IS NULL OR used < n OR used > 9007199254740992 THEN
            RAISE EXCEPTION USING ERRCODE = 'RL001',
                MESSAGE = format('ratelimit: corrupt state: sliding log of %s entries with total %s', n, used);
        END IF;
    ELSE
        -- A log without its total: sum it once.
        FOR i IN 0 .. n - 1 LOOP
            t := log[2*i + 1];
            c := log[2*i + 2];
            PERFORM ratelimit_sliding_log_entry(t, c);
            used := used + c;
            IF used > 9007199254740992 THEN
                RAISE EXCEPTION USING ERRCODE = 'RL001',
                    MESSAGE = 'ratelimit: corrupt state: sliding log total above 9007199254740992';
            END IF;
        END LOOP;
    END IF;
    -- Drop the expired entries: they are the oldest, at the front.
    WHILE lo < n LOOP
        t := log[b + 2*lo + 1];
        c := log[b + 2*lo + 2];
        PERFORM ratelimit_sliding_log_entry(t, c);
        EXIT WHEN now_us < t + a_period;
        lo := lo + 1;
        used := used - c;
        IF used < n - lo THEN
            RAISE EXCEPTION USING ERRCODE = 'RL001',
                MESSAGE = format('ratelimit: corrupt state: sliding log total %s below its entries'' costs', used);
        END IF;
    END LOOP;
    IF lo < n THEN
        newest := log[b + 2*n - 1];
        c := log[b + 2*n];
        PERFORM ratelimit_sliding_log_entry(newest, c);
    ELSIF used <> 0 THEN
        RAISE EXCEPTION USING ERRCODE = 'RL001',
            MESSAGE = format('ratelimit: corrupt state: sliding log total %s with no live entry', used);
    END IF;
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
        pos := lo;
        WHILE pos < n AND excess > 0 LOOP
            t := log[b + 2*pos + 1];
            c := log[b + 2*pos + 2];
            PERFORM ratelimit_sliding_log_entry(t, c);
            excess := excess - c;
            IF excess <= 0 THEN
                r.retry_after := t + a_period - now_us;
            END IF;
            pos := pos + 1;
        END LOOP;
        IF excess > 0 AND cost <= a_limit THEN
            RAISE EXCEPTION USING ERRCODE = 'RL001',
                MESSAGE = format('ratelimit: corrupt state: sliding log total %s above its entries'' costs', used);
        END IF;
        RETURN r;
    END IF;
    IF peek OR refund THEN -- the log gives nothing back: a refund is a peek
        r.remaining := greatest(a_limit - used, 0);
        RETURN r;
    END IF;
    r.remaining := greatest(a_limit - used - cost, 0);
    -- The request's time: now, or the newest entry's time when now lies
    -- behind it (slidingLog.Decide). Its place: behind every entry timed
    -- at or before that.
    newest := greatest(newest, now_us);
    pos := n;
    WHILE pos > lo LOOP
        t := log[b + 2*pos - 1];
        c := log[b + 2*pos];
        PERFORM ratelimit_sliding_log_entry(t, c);
        EXIT WHEN t <= newest;
        pos := pos - 1;
    END LOOP;
    r.next_state := ARRAY[-1, used + cost] || log[b + 2*lo + 1 : b + 2*pos]
        || ARRAY[newest, cost] || log[b + 2*pos + 1 : b + 2*n];
    r.reset_after := newest + a_period - now_us;
    r.ttl := r.reset_after;
    RETURN r;
END
$$;

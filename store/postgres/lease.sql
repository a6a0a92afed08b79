-- The lease function of one table: the lease's transition (lease.Step,
-- lease/step.go) as one PL/pgSQL function, so that a lease's acquire,
-- extend, release or read is one statement (SELECT it), where Update takes
-- a transaction of several. Store.RunLease calls it. This file is a
-- text/template that lease.go fills in with the function's quoted name (the
-- table's name with "_lease" appended), the table's quoted name, the
-- server's clock in microseconds as an expression (as in ratelimit_now),
-- the corrupt-state SQLSTATE and a dollar-quote tag that occurs nowhere
-- else in the function.
--
-- Written by hand, as lease.lua is and for the same reasons (see its
-- header); the conformance group LeaseDifferential holds it to Step, field
-- by field, on seeded sequences that mix it with Update on one record.
--
-- It keeps Update's row format, so both paths share one record: the record
-- (Step's 34 bytes: version 1, flags (bit 0: released), fence and expiry as
-- big-endian int64s, the owner token) in state, vals NULL, and expires_at
-- the time until which Step asks to keep it. A row whose expires_at is not
-- after now holds no record.
--
-- p_now NULL reads the server's clock. It returns res = [code, now, fence,
-- expires, released (1 or 0), found (1 or 0)] and holder, the owner token
-- of the record written or found (NULL for none), which is Step's Result:
-- for a transition that writes, the record written; otherwise the record
-- found.
--
-- It locks the key's row (SELECT ... FOR NO KEY UPDATE) and decides on its
-- latest committed record. When the key has no row and the transition
-- writes (an acquire), it inserts the row; a concurrent first acquire that
-- inserted first makes the INSERT ... ON CONFLICT DO NOTHING insert
-- nothing, and the function goes round again, now locking that row.
CREATE OR REPLACE FUNCTION {{.Func}}(
    p_key bytea, p_now bigint, p_op int, p_fence bigint, p_ttl bigint, p_owner bytea,
    OUT res bigint[], OUT holder bytea)
LANGUAGE plpgsql VOLATILE AS {{.Tag}}
DECLARE
    now_us   bigint := coalesce(p_now, {{.Now}});
    st       bytea;
    kept     bigint;
    has_row  boolean;
    found_   boolean;
    released boolean;
    fence    bigint;
    expires  bigint;
    live     boolean;
    mine     boolean;
    code     int;
    wf       bigint; -- the record to write: its fence (NULL: write nothing),
    we       bigint; -- its expiry
    wflags   int;    -- and its flags
BEGIN
    IF p_op NOT BETWEEN 1 AND 4 THEN
        RAISE EXCEPTION 'ratelimit: unknown lease op %', p_op;
    END IF;
    LOOP
        SELECT t.state, t.expires_at INTO st, kept FROM {{.Table}} t WHERE t.key = p_key FOR NO KEY UPDATE;
        has_row := FOUND;
        found_ := has_row AND kept > now_us;
        released := false; fence := 0; expires := 0; holder := NULL;
        IF found_ THEN
            IF st IS NULL OR length(st) <> 34 OR get_byte(st, 0) <> 1 OR get_byte(st, 1) NOT IN (0, 1) THEN
                RAISE EXCEPTION USING ERRCODE = '{{.Corrupt}}',
                    MESSAGE = format('ratelimit: corrupt state: lease record of %s bytes is not one this package wrote',
                                     coalesce(length(st), 0));
            END IF;
            released := get_byte(st, 1) = 1;
            fence := ('x' || encode(substring(st FROM 3 FOR 8), 'hex'))::bit(64)::bigint;
            expires := ('x' || encode(substring(st FROM 11 FOR 8), 'hex'))::bit(64)::bigint;
            holder := substring(st FROM 19 FOR 16);
            IF fence < 1 OR fence >= 9007199254740992 OR expires < 0 THEN
                RAISE EXCEPTION USING ERRCODE = '{{.Corrupt}}',
                    MESSAGE = format('ratelimit: corrupt state: lease record with fence %s and expiry %s', fence, expires);
            END IF;
        END IF;
        live := found_ AND NOT released AND expires > now_us;
        mine := found_ AND holder = p_owner;
        code := 1; wf := NULL; we := 0; wflags := 0;
        CASE p_op
        WHEN 1 THEN -- acquire
            IF live AND NOT mine THEN
                code := 2; -- held
            ELSE
                wf := now_us;
                IF live THEN
                    wf := fence; -- the same owner again: the same lease
                ELSIF found_ AND fence >= wf THEN
                    wf := fence + 1;
                END IF;
                wf := greatest(wf, 1);
                IF wf >= 9007199254740992 THEN
                    RAISE EXCEPTION USING ERRCODE = '{{.Corrupt}}',
                        MESSAGE = format('ratelimit: corrupt state: fence %s would reach 2^53', wf);
                END IF;
                we := now_us + p_ttl;
            END IF;
        WHEN 2 THEN -- extend
            IF live AND mine AND fence = p_fence THEN
                wf := fence; we := now_us + p_ttl;
            ELSE
                code := 3; -- lost
            END IF;
        WHEN 3 THEN -- release
            IF NOT mine OR fence <> p_fence THEN
                code := 3;
            ELSIF NOT released THEN -- released already: a retried release, OK
                IF live THEN
                    wf := fence; wflags := 1;
                ELSE
                    code := 3; -- it ran out before the release
                END IF;
            END IF;
        ELSE -- read
        END CASE;
        IF wf IS NULL THEN
            IF released THEN
                expires := 0;
            END IF;
            res := ARRAY[code, now_us, fence, expires, released::int, found_::int];
            RETURN;
        END IF;
        -- Kept max(ttl, fence - now + 1, 1) µs: until the clock has passed
        -- the fence, so that a later acquire that finds no record mints a
        -- greater one.
        kept := now_us + greatest(p_ttl, wf - now_us + 1, 1);
        st := '\x01'::bytea || set_byte('\x00'::bytea, 0, wflags) || int8send(wf) || int8send(we) || p_owner;
        IF has_row THEN
            UPDATE {{.Table}} SET state = st, vals = NULL, expires_at = kept WHERE key = p_key;
        ELSE
            INSERT INTO {{.Table}} (key, state, expires_at) VALUES (p_key, st, kept) ON CONFLICT (key) DO NOTHING;
            CONTINUE WHEN NOT FOUND; -- a concurrent acquire created the row: go round again
        END IF;
        res := ARRAY[1, now_us, wf, we, wflags, found_::int];
        holder := p_owner;
        RETURN;
    END LOOP;
END
{{.Tag}};

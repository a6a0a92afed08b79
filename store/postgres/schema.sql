-- The store's schema: its table and two helper functions. This file is a
-- text/template that schema.go fills in with the table's quoted name; the
-- migration runs it, then every built-in algorithm's SQL form
-- (algorithms/sql), then decide.sql once per algorithm. Every statement
-- creates only what is missing or replaces a function, so it runs again at
-- every migration.

-- Rate-limit state: one row per key. key is the limiter's namespace, ':'
-- and the caller's key, as bytes. The built-in algorithms keep their state
-- in vals (the bigint[] their SQL forms take and return); Update (users' own
-- algorithms) keeps it in state, as the Go form's bytes. expires_at is in
-- microseconds since the Unix epoch, on the clock the store decides by: a
-- row whose expires_at is not after now is treated as absent, whether or
-- not DeleteExpired has removed it yet. fillfactor leaves room on each page
-- so that decisions update rows in place (HOT updates, no index churn).
-- dec is the decision of the request that wrote the row last through the
-- store's one-statement decision (an UPDATE of the row: see row.sql),
-- which hands it back with RETURNING; nothing else reads it.
CREATE {{if .Unlogged}}UNLOGGED {{end}}TABLE IF NOT EXISTS {{.Table}} (
    key        bytea    PRIMARY KEY,
    vals       bigint[],
    state      bytea,
    expires_at bigint   NOT NULL,
    dec        bigint[]
) WITH (fillfactor = 70);

-- The server's clock in microseconds since the Unix epoch: the time a
-- decision uses unless the store was built WithServerClock(false). (The decide
-- functions compute the same expression themselves: calling this function
-- from PL/pgSQL costs more than the rest of reading the clock.)
CREATE OR REPLACE FUNCTION ratelimit_now() RETURNS bigint
LANGUAGE sql VOLATILE PARALLEL SAFE AS $$
    SELECT {{.Now}}
$$;

-- State written by Update (little-endian int64 fields) as a bigint[], so
-- that a built-in algorithm's SQL form reads state Update wrote.
CREATE OR REPLACE FUNCTION ratelimit_int8s(b bytea) RETURNS bigint[]
LANGUAGE plpgsql IMMUTABLE STRICT PARALLEL SAFE AS $$
DECLARE
    res bigint[] := '{}';
    v   bigint;
BEGIN
    IF length(b) % 8 <> 0 THEN
        RAISE EXCEPTION USING ERRCODE = '{{.Corrupt}}',
            MESSAGE = format('ratelimit: corrupt state: %s bytes, not a multiple of 8', length(b));
    END IF;
    FOR i IN 0 .. length(b) / 8 - 1 LOOP
        v := 0;
        FOR j IN REVERSE 7 .. 0 LOOP
            v := (v << 8) | get_byte(b, 8*i + j);
        END LOOP;
        res := res || v;
    END LOOP;
    RETURN res;
END
$$;


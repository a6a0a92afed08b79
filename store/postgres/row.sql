{{- /*
The one-statement decision of one table and one built-in algorithm: what
Store.Decide sends for a request that may consume (not a peek) on a key
that has a row. This file is a text/template that schema.go (rowDecideSQL)
fills in once per algorithm when the store is created; these lines are a
template comment, so the statement sent carries none of them.

It is one UPDATE, so that the executor finds the row by its key, locks it
and writes it, as a bare upsert does, and the form runs once inside it.
Its parameters are:

    $1           the row's key
    $2           the request's time, or NULL for the server's clock
    $3           the cost
    $4 ...       the algorithm's arguments: one bigint each when the form
                 has a row form ({{.Args}} lists their numbers), else one
                 bigint[] ($4)
    ${{.Wait}}   when Wait is set, the milliseconds the row lock may be
                 waited for

The SET list is a subquery over the row being updated. With a row form
({{.Row}}, algorithms.SQLRowFunction), the row form reads the clock, treats
expired state as none and returns the next state and its expiry, or NULLs
when it writes nothing (a denial rewrites the row unchanged), and the
decision, kept in the row's dec column so that RETURNING hands it back.
Only a row that holds state in vals qualifies: state written by Update, in
the state column, goes to the decide function (decide.sql), which reads it
through ratelimit_int8s. When a concurrent decision has updated the row
meanwhile, the executor waits for it to commit and evaluates the SET list
again on the new version (EvalPlanQual): the row form runs again and reads
the clock again, so no decision is made at a time before the state it
reads.

A form without a row form (the sliding log's, or a form of another release
installed in tests) runs as a function ({{.Function}}) of the state, the
time and the arguments as an array: the subquery reads the clock in a
subquery of its own, fenced by OFFSET 0 so that the planner neither pulls
it up nor reads the clock at each use, and treats the row as absent when
it has expired (state written by Update is read through ratelimit_int8s).
Both ways keep the row's own state when the form writes nothing.

With Wait, the WHERE clause sets lock_timeout for the statement's
transaction (set_config(..., true)) when it meets the row, before the
executor waits for its lock, so that the wait is bounded by the caller's
deadline. The setting lasts until the transaction ends: the statement's
own, unless the store's DB is a transaction (pgx.Tx), where Decide uses the
decide function, which restores it, instead.

No row: the statement updates nothing and returns no row, and Decide calls
the decide function, which inserts the row (and handles a concurrent first
insert).
*/ -}}
UPDATE {{.Table}} r SET (vals, state, expires_at, dec) = (
    SELECT coalesce(d.next_state, r.vals),
           CASE WHEN d.next_state IS NULL THEN r.state END,
{{- if .Row}}
           coalesce(d.expires_at, r.expires_at),
           d.decision
    FROM {{.Row}}(r.vals, r.expires_at, $2, $3{{range .Args}}, ${{.}}{{end}}) d)
WHERE r.key = $1 AND r.vals IS NOT NULL
{{- else}}
           CASE WHEN d.next_state IS NULL THEN r.expires_at ELSE n.now + d.ttl END,
           ARRAY[d.allowed::int::bigint, d.lim, d.remaining, d.retry_after, d.reset_after, d.delay]
    FROM (SELECT coalesce($2::bigint, {{.Now}}) AS now OFFSET 0) n,
         LATERAL {{.Function}}(
             CASE WHEN r.expires_at > n.now THEN coalesce(r.vals, {{.Int8s}}(r.state)) END,
             n.now, $3, false, $4, 0, false, 0) d)
WHERE r.key = $1
{{- end}}
{{- if .Wait}}
  AND set_config('lock_timeout', ${{.Wait}}::bigint || 'ms', true) IS NOT NULL
{{- end}}
RETURNING r.dec

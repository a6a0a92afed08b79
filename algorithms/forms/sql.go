package forms

// SQLErrCorrupt is the SQLSTATE of the error a SQL form raises when the
// stored state cannot be read.
const SQLErrCorrupt = "RL001"

// SQLFunction returns the name of the SQL function of the built-in algorithm
// with the given name, as its SQL form defines it: ratelimit_<name>_<version>,
// such as "ratelimit_gcra_1a2b3c4d", where the version is a hash of the
// form's text (1a2b3c4d stands for one; the last paragraph says why). It
// returns "" when the algorithm has no SQL form.
//
// The SQL forms (sql/*.sql, read with SQL) are PL/pgSQL functions for
// PostgreSQL that share one signature, so that a store calls any of them the
// same way from a single statement:
//
//	ratelimit_<name>_<version>(
//	    state  bigint[],  -- the key's live state, or NULL when it has none
//	    now_us bigint,    -- microseconds since the Unix epoch
//	    cost   bigint,    -- at least 1 and at most the algorithm's MaxCost
//	    peek   boolean,   -- decide without consuming
//	    args   bigint[])  -- the algorithm's ServerArgs, in order
//	RETURNS ratelimit_step
//
//	CREATE TYPE ratelimit_step AS (
//	    next_state bigint[], ttl bigint,
//	    allowed boolean, lim bigint, remaining bigint,
//	    retry_after bigint, reset_after bigint, delay bigint)
//
// where <name> is the algorithm's Name and <version> a hash of the form's
// text (SQLFunction returns the name). The
// functions are pure (IMMUTABLE): they read no table and write nothing. A
// store reads the row, calls the function and writes next_state with an
// expiry of now_us + ttl, all inside one server-side statement; a NULL
// next_state (a peek, or a denied request) means the stored row stays
// exactly as it is. The fields after ttl are Decision's fields in
// declaration order.
//
// State is a bigint[] holding the Go form's fields in the Go form's order:
// [window start, count] for the fixed window, [start, current, previous]
// for the sliding window, [deficit, last, unit] and [level, last, unit] for
// the token and leaky buckets, [TAT, fraction, drip] for GCRA, and for the
// sliding log the header pair (-1, total cost) then the flat list of (time,
// cost) pairs sorted by time. So the
// little-endian int64 fields of the Go form's state and the array's elements
// are the same numbers.
//
// A function computes exactly what the algorithm's Decide computes: the same
// bigint arithmetic (PostgreSQL's bigint division truncates toward zero, as
// Go's does) and, where the Go form uses float64 (the sliding window's
// weighted estimate and its retry search, the rate algorithms' rescale and
// GCRA's fraction rescale), the same float8 operations in the same order
// followed by floor. State a function cannot read raises an error with
// SQLSTATE SQLErrCorrupt (through the helper ratelimit_corrupt_<version>).
//
// Each file first creates the shared type and helper if they are missing,
// then may define helper functions before its main one (the sliding
// window's retry search), all named ratelimit_<name>_<version> or
// ratelimit_<name>_<helper>_<version>; executing a file creates or replaces them, so
// it can run again at every migration. The forms are a few statements of
// one expression each: PL/pgSQL prepares each expression the first time it
// runs in a transaction, and a store's decision is usually a transaction of
// its own. Every form but the sliding log's is generated from the Go form
// by internal/formgen, which writes them in that shape.
//
// Every function a SQL form defines carries a version in its name: the
// first 8 hex digits of the SHA-256 of the form's text (internal/formgen
// computes it), as in ratelimit_gcra_1a2b3c4d and ratelimit_corrupt_1a2b3c4d.
// A form whose text changes gets a new name, so two releases of the SDK
// that migrate one database (a rolling deploy, or tests of two branches on
// one server) install their forms side by side instead of replacing each
// other's, and each store's decide functions call the forms they were
// migrated with. The composite form's version follows from its parts', as
// it calls them by their versioned names. The result types
// (ratelimit_step, ratelimit_all_step) are shared and never change.
// SQLFunction, SQLRowFunction and CompositeSQLFunction return the names.
func SQLFunction(name string) string { return manifestEntry(name).sqlFunction }

// SQLRowFunction returns the name of the row form of the built-in algorithm
// with the given name, ratelimit_<name>_row_<version> (as below), or "" when it has none (the sliding log's form has none).
//
// Every generated form (all but the sliding log's) also defines a row form,
// the same decision for a request that consumes (never a peek), in the
// shape a store that keeps a key's state in a row wants for one statement
// that rewrites the row (the PostgreSQL store's UPDATE of a key's row):
//
//	ratelimit_<name>_row_<version>(
//	    p_state      bigint[],  -- the key's stored state, or NULL
//	    p_expires_at bigint,    -- when the stored state expires (µs)
//	    p_now        bigint,    -- the request's time, or NULL: the server's clock
//	    cost         bigint,
//	    arg_<name>   bigint, ...)  -- the ServerArgs, one parameter each
//	RETURNS ratelimit_row_step
//
//	CREATE TYPE ratelimit_row_step AS (
//	    next_state bigint[], expires_at bigint, decision bigint[])
//
// It reads the clock itself when p_now is NULL (so a statement that calls
// it again, as PostgreSQL's EvalPlanQual does after waiting for a row lock,
// reads it again), treats state that expires at or before that time as no
// state, and returns the next state with its expiry (both NULL when
// nothing is to be written: a denial) and the decision as [allowed (1 or
// 0), limit, remaining, retry_after, reset_after, delay]. It is VOLATILE
// (the clock). Its parameters come one by one, not as an array: PostgreSQL
// sets up every array subscript of a PL/pgSQL function again in each
// transaction, and a decision is usually one; for the same reason it is
// generated for the path a consuming request takes only (peek folded
// away), in the same few statements as the form.
func SQLRowFunction(name string) string { return manifestEntry(name).sqlRowFunction }

// CompositeSQLFunction returns the name of the composite SQL form's
// function, ratelimit_all_<version> (see CompositeSQL).
func CompositeSQLFunction() string { return manifest.compositeSQLFunction }

// manifestEntry returns the manifest's entry (manifest.go, which formgen
// writes with the forms) of the built-in algorithm with the given name, or
// the zero entry when it has no server-side form there.
func manifestEntry(name string) formEntry {
	for _, e := range manifest.forms {
		if e.name == name {
			return e
		}
	}
	return formEntry{}
}

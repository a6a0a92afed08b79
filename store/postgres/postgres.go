// Package postgres is the PostgreSQL store, on github.com/jackc/pgx/v5.
//
// State lives in one table with a row per key. Each built-in algorithm's SQL
// form (package algorithms, sql/*.sql) is installed as a PL/pgSQL function
// whose name carries a version (a hash of its text), so that releases
// sharing a database install their forms side by side, and a decision is
// one statement. For a key that has a row it is one UPDATE of the row,
// whose SET list runs the algorithm's row form (forms.SQLRowFunction:
// it reads the clock and runs the algorithm once on the row's live state)
// and which returns the decision through the row's dec column: the
// executor finds, locks and writes the row as it does for a bare upsert,
// and evaluates the SET list again (the clock included) on the newest
// version of a row a concurrent decision updated meanwhile. A key's first
// request (the UPDATE finds no row), a peek and a composite
// call a function generated for the table and algorithm instead, which
// locks the key's row if any (SELECT ... FOR NO KEY UPDATE), reads the
// clock, runs the form once and writes the result only when the request
// is admitted (an UPDATE of the locked row, or an INSERT ... ON CONFLICT
// DO NOTHING for a new key). The row lock is taken and released inside
// the server, never held across a round trip to the client (unless the
// caller passes its own transaction), and concurrent first requests for a
// new key neither fail nor over-admit. A user's own algorithm runs through
// Update, a short transaction with SELECT ... FOR NO KEY UPDATE.
//
// The table and functions are created in the first schema of the
// connection's search_path; set search_path in the connection string to
// use another schema.
//
// Create the table and functions once with Migrate (or run SchemaSQL with
// your own migration tool), then build a limiter:
//
//	pool, err := pgxpool.New(ctx, "postgres://...")
//	...
//	store, err := postgres.New(pool)
//	...
//	if err := store.Migrate(ctx); err != nil { ... }
//	lim, err := ratelimit.New(store, algorithms.GCRA(100, time.Minute, 20))
//
// Migrate on a schema already in place only reads the catalog, so every
// process may run it at start. A call on a table or function that is not
// there fails with an error wrapping ErrNoSchema, which says to run
// Migrate.
//
// Time comes from the server's clock by default; see WithServerClock.
// Expired rows never affect decisions; DeleteExpired reclaims them.
package postgres

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/ratelimitkit/ratelimit/algorithms"
	"github.com/ratelimitkit/ratelimit/algorithms/forms"
	"github.com/ratelimitkit/ratelimit/store"
)

// DB is what the store needs from PostgreSQL: the methods that
// *pgxpool.Pool, *pgx.Conn and pgx.Tx have in common. Pass a pool in
// production. Passing a pgx.Tx makes decisions part of the caller's
// transaction: they see its snapshot rules, hold the key's row lock until it
// commits or rolls back, and vanish if it rolls back. A *pgx.Conn is not
// safe for concurrent use, and neither is a store built on one.
type DB interface {
	Exec(ctx context.Context, sql string, arguments ...any) (pgconn.CommandTag, error)
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
	Begin(ctx context.Context) (pgx.Tx, error)
}

// DefaultTable is the name of the store's table when WithTable is not used.
const DefaultTable = "ratelimit"

// MaxTableLen is the longest table name WithTable accepts, in bytes. The
// store derives function names from it, and PostgreSQL cuts identifiers at
// 63 bytes.
const MaxTableLen = 40

// Option configures a Store.
type Option func(*Store) error

// WithTable sets the name of the table that holds the state (default
// DefaultTable). The store also creates functions named after it, with
// "_decide_" and an algorithm's name appended. Any name of 1 to MaxTableLen
// bytes without NUL is accepted, except one starting with "pg_": PostgreSQL
// looks an unqualified name up in its catalog (pg_catalog) before the
// search_path, and the catalog's tables are all named pg_..., so such a
// name could resolve to a catalog table. The name is always quoted as an
// identifier, never spliced into SQL as text.
func WithTable(name string) Option {
	return func(s *Store) error {
		if err := checkIdent("table", name, MaxTableLen); err != nil {
			return err
		}
		if strings.HasPrefix(name, "pg_") {
			return fmt.Errorf("%w: postgres: table name %q starts with pg_, which names PostgreSQL's catalog tables (an unqualified name is looked up in pg_catalog first)", algorithms.ErrInvalidParams, name)
		}
		s.table = name
		return nil
	}
}

// WithUnlogged makes Migrate create the table UNLOGGED: PostgreSQL writes no
// WAL for it, so each decision costs less I/O, but the table is emptied
// after a crash or an unclean shutdown (every key starts afresh, admitting
// up to a full limit again) and is not copied to streaming replicas (a
// failover to a replica starts from an empty table). The option only
// matters when Migrate creates the table; it does not convert an existing
// one.
func WithUnlogged() Option {
	return func(s *Store) error {
		s.unlogged = true
		return nil
	}
}

// WithServerClock chooses whose clock the store uses. With on (the
// default), the store reads PostgreSQL's clock_timestamp(), in
// microseconds, once per decision after taking the key's row lock, so every
// application server shares one clock whatever their own clocks say, and a
// decision that waited for a concurrent one decides at a time after it;
// ratelimit.New then refuses ratelimit.WithClock with any clock but
// clock.System, which the store would ignore. Should the server's clock step
// back, the algorithms treat state from a clock ahead of theirs
// conservatively, so this never admits more. With off, the store uses the
// time the limiter passes with each request (its clock): use it in tests
// with a fake clock, and for the conformance suite.
func WithServerClock(on bool) Option {
	return func(s *Store) error {
		s.requestClock = !on
		return nil
	}
}

// WithRequestClock is WithServerClock(false).
//
// Deprecated: use WithServerClock(false), spelled the same on every store
// that can use its server's clock.
func WithRequestClock() Option { return WithServerClock(false) }

// rowStatement is an algorithm's one-statement decision (row.sql),
// without and with a bound on the lock wait; scalar reports that it takes
// the algorithm's arguments one by one (its form has a row form) rather
// than as one bigint[].
type rowStatement struct {
	sql    [2]string
	scalar bool
}

// Store is a store.Store and store.Decider on PostgreSQL. Create it
// with New and call Migrate (or apply SchemaSQL) before use; the zero value
// is not usable. Decide, the method a Limiter uses for the built-in
// algorithms, is one statement per decision. A Store is safe for concurrent
// use when its DB is (a pool is), and holds no resources of its own: close
// the pool, not the store.
type Store struct {
	db           DB
	table        string
	unlogged     bool
	requestClock bool

	// forms are the SQL forms the store installs and calls (releaseForms
	// but in tests).
	forms formSet

	// args holds the text forms of the algorithms' ServerArgs last used.
	args argsCache

	// inTx is set when db is a pgx.Tx: the one-statement path then leaves
	// lock_timeout alone (see Decide).
	inTx bool

	// SQL built once from the quoted identifiers.
	decideSQL                                   map[*forms.Builtin]string
	rowSQL                                      map[*forms.Builtin]*rowStatement
	decideAllSQL                                string
	selectSQL, selectLockSQL, clockSQL          string
	updateSQL, insertSQL, deleteSQL, expiredSQL string
	leaseSQL                                    string
}

// New returns a store that keeps its state in db. It does not contact the
// server; call Migrate to create the table and functions. It reports an
// error wrapping ratelimit.ErrInvalidParams for a nil db or a bad option.
func New(db DB, opts ...Option) (*Store, error) {
	if db == nil {
		return nil, fmt.Errorf("%w: postgres: nil DB", algorithms.ErrInvalidParams)
	}
	s := &Store{db: db, table: DefaultTable, forms: releaseForms}
	for _, opt := range opts {
		if err := opt(s); err != nil {
			return nil, err
		}
	}
	t := s.ident(s.table)
	s.decideSQL = make(map[*forms.Builtin]string, len(builtins))
	for _, b := range builtins {
		s.decideSQL[b] = "SELECT " + s.decideFunction(b.Name) + "($1, $2, $3, $4, $5, $6, $7, $8, $9)"
	}
	s.rowSQL = make(map[*forms.Builtin]*rowStatement, len(builtins))
	for _, b := range builtins {
		f := s.forms.alg[b.Name]
		rs := &rowStatement{scalar: f.row != ""}
		rs.sql[0], rs.sql[1] = s.rowDecideSQL(f, b.Args, false), s.rowDecideSQL(f, b.Args, true)
		s.rowSQL[b] = rs
	}
	_, s.inTx = db.(pgx.Tx)
	s.decideAllSQL = "SELECT " + s.decideFunction(compositeName) + "($1, $2, $3, $4, $5, $6, $7, $8, $9, $10)"
	s.selectSQL = "SELECT state, vals, expires_at FROM " + t + " WHERE key = $1"
	s.selectLockSQL = s.selectSQL + " FOR NO KEY UPDATE"
	s.clockSQL = "SELECT " + s.ident("ratelimit_now") + "()"
	s.updateSQL = "UPDATE " + t + " SET state = $2, vals = NULL, expires_at = $3 WHERE key = $1"
	s.insertSQL = "INSERT INTO " + t + " (key, state, expires_at) VALUES ($1, $2, $3) ON CONFLICT (key) DO NOTHING"
	s.deleteSQL = "DELETE FROM " + t + " WHERE key = $1"
	s.leaseSQL = "SELECT res, holder FROM " + s.leaseFunction() + "($1, $2, $3, $4, $5, $6)"
	s.expiredSQL = "DELETE FROM " + t + " WHERE key IN (SELECT key FROM " + t +
		" WHERE expires_at <= " + s.ident("ratelimit_now") + "() LIMIT $1 FOR UPDATE SKIP LOCKED)"
	return s, nil
}

// DB returns the DB the store was created with: the escape hatch for what
// the store does not do itself.
func (s *Store) DB() DB { return s.db }

// Table returns the table's name as quoted SQL, ready to splice into a
// query of your own.
func (s *Store) Table() string { return s.ident(s.table) }

// ServerClock reports whether the store reads the server's clock (see
// WithServerClock). It implements store.ServerClocker.
func (s *Store) ServerClock() bool { return !s.requestClock }

// ident quotes name as an identifier.
func (s *Store) ident(name string) string { return pgx.Identifier{name}.Sanitize() }

func checkIdent(what, name string, maxLen int) error {
	if name == "" || len(name) > maxLen || strings.IndexByte(name, 0) >= 0 {
		return fmt.Errorf("%w: postgres: %s name %q must be 1 to %d bytes without NUL", algorithms.ErrInvalidParams, what, name, maxLen)
	}
	return nil
}

// maxLockWait is the longest lock_timeout PostgreSQL accepts: 2^31-1 ms,
// about 24.8 days.
const maxLockWait = math.MaxInt32 * time.Millisecond

// lockWaitMillis returns the lock_timeout, in whole milliseconds, for a
// context whose deadline is d away: d rounded up, at least 1, and at most
// maxLockWait (a deadline further away waits that long at most).
func lockWaitMillis(d time.Duration) int64 {
	if d >= maxLockWait {
		return int64(maxLockWait / time.Millisecond)
	}
	return max(int64((d+time.Millisecond-1)/time.Millisecond), 1)
}

// numericOutOfRange is the SQLSTATE of an integer overflow. The algorithms'
// parameters and times keep every computation on state they wrote below
// 2^54, so in a decision only stored values the store did not write can
// overflow: the state is corrupt, and must not pass for a store failure
// that a fail-open limiter would admit on.
const numericOutOfRange = "22003"

// undefinedFunction reports whether err is PostgreSQL's "function does not
// exist": the form of this release that the one-statement path calls is
// not installed (a newer release migrated the table and this release's
// forms were dropped), and the table's decide function, which calls the
// forms of the release that migrated it, decides instead.
func undefinedFunction(err error) bool {
	var pe *pgconn.PgError
	return errors.As(err, &pe) && pe.Code == undefinedFunctionCode
}

// lockNotAvailable is the SQLSTATE of a lock wait that outlasted
// lock_timeout.
const lockNotAvailable = "55P03"

// ErrNoSchema is wrapped by the error of a call on a table that Migrate
// has not created, or whose functions are missing (a database that
// SchemaSQL was never applied to, another search_path, a table name the
// migration did not use): the error says to run Migrate, names the
// table, and wraps PostgreSQL's own error (*pgconn.PgError, "relation
// does not exist" or "function does not exist") as well. Check for it with
// errors.Is.
var ErrNoSchema = errors.New("no schema")

// undefinedTable and undefinedFunctionCode are the SQLSTATEs of a relation
// and a function that do not exist.
const (
	undefinedTable        = "42P01"
	undefinedFunctionCode = "42883"
)

// zeroKey stands for "no key" in error messages.
var zeroKey store.Key

// keyBytes is the row key of k: Namespace ":" ID, distinct for distinct
// Keys (see store.Key.String), as bytea since an ID may hold any bytes.
func keyBytes(k store.Key) []byte {
	return appendKey(make([]byte, 0, len(k.Namespace)+1+len(k.ID)), k)
}

// appendKey appends the row key of k to b.
func appendKey(b []byte, k store.Key) []byte {
	b = append(b, k.Namespace...)
	b = append(b, ':')
	return append(b, k.ID...)
}

// Decide implements store.Decider for the built-in algorithms: one
// statement. For a request that may consume on a key that has a row, it is
// an UPDATE that locks the row, treats it as absent when it has expired,
// runs the algorithm's SQL form on its state and writes the next state
// with its expiry (a denial writes the row's state back unchanged). When
// the key has no row, or for a peek, it calls the table's decide function
// for alg instead, which writes only when the request is admitted (a peek
// writes nothing). Every decision is made on the latest committed state.
// When ctx has a deadline, the server waits for the row lock no
// longer than it (lock_timeout), so a decision the caller has given up on is
// not applied afterwards; such an error wraps context.DeadlineExceeded.
// PostgreSQL takes lock_timeout values up to 2^31-1 ms (about 24.8 days), so
// a deadline further away than that bounds the wait at that.
//
// For an algorithm without a SQL form it returns an error wrapping
// store.ErrUnsupported without contacting the server.
func (s *Store) Decide(ctx context.Context, key store.Key, alg algorithms.Algorithm, req algorithms.Request) (algorithms.Decision, error) {
	// The form is bound to the algorithm's type (BuiltinOf), never to its
	// name, so a user's algorithm is never run as a built-in.
	if c, ok := alg.(algorithms.Composite); ok {
		return s.decideAll(ctx, key, c, req)
	}
	sf, ok := alg.(forms.ServerForm)
	if !ok {
		return algorithms.Decision{}, fmt.Errorf("postgres: algorithm %q has no server form: %w", alg.Name(), store.ErrUnsupported)
	}
	query, ok := s.decideSQL[forms.BuiltinOf(alg)]
	if !ok {
		return algorithms.Decision{}, fmt.Errorf("postgres: algorithm %q has no SQL form: %w", alg.Name(), store.ErrUnsupported)
	}
	if err := ctx.Err(); err != nil {
		return algorithms.Decision{}, fmt.Errorf("postgres: decide %q: %w", key, err)
	}
	var now any = req.Now
	if !s.requestClock {
		now = nil // the function reads the server's clock
	}
	var wait any // milliseconds the server may wait for the row lock
	if deadline, ok := ctx.Deadline(); ok {
		wait = lockWaitMillis(time.Until(deadline))
	}
	c := newDecideCall(key)
	defer c.release()
	e := s.args.get(sf.ServerArgs())
	args := e.text
	err := pgx.ErrNoRows
	if !req.Peek && req.MaxDelay == 0 && !req.Refund && (!s.inTx || wait == nil) {
		// The common case, a key that has a row: one UPDATE that locks
		// and rewrites it (see row.sql). A key without a row goes to
		// the decide function, which inserts it.
		rs := s.rowSQL[forms.BuiltinOf(alg)]
		argv := append(c.argv[:0], c, now, req.Cost)
		if rs.scalar {
			argv = append(argv, e.boxed...)
		} else {
			argv = append(argv, args)
		}
		if wait != nil {
			err = s.db.QueryRow(ctx, rs.sql[1], append(argv, wait)...).Scan(&c.raw)
		} else {
			err = s.db.QueryRow(ctx, rs.sql[0], argv...).Scan(&c.raw)
		}
		if err != nil && !errors.Is(err, pgx.ErrNoRows) && (s.inTx || !undefinedFunction(err)) {
			return algorithms.Decision{}, s.fail(ctx, "decide", key, err)
		}
		if err != nil && wait != nil {
			deadline, _ := ctx.Deadline()
			wait = lockWaitMillis(time.Until(deadline))
		}
	}
	if err != nil {
		err = s.db.QueryRow(ctx, query, c, now, req.Cost, req.Peek, args, wait, req.MaxDelay, req.Refund, req.Act).Scan(&c.raw)
		if err != nil {
			return algorithms.Decision{}, s.fail(ctx, "decide", key, err)
		}
	}
	var v [6]int64
	if err := decodeDecision(c.raw, &v); err != nil {
		return algorithms.Decision{}, fmt.Errorf("postgres: decide %q: %w", key, err)
	}
	return algorithms.Decision{
		Allowed: v[0] == 1, Limit: v[1], Remaining: v[2], RetryAfter: v[3], ResetAfter: v[4], Delay: v[5],
	}, nil
}

// decideAll decides a composite (algorithms.All) with one statement, as
// Decide decides a single algorithm: the table's composite decide function
// locks the key's row, runs the composite SQL form (ratelimit_all_<version>, which
// calls each part's SQL form as a peek and, when every part admits, for
// real) and writes every part's next state only when all admit. For a
// composite with a part that has no composite SQL form it returns an error
// wrapping store.ErrUnsupported without contacting the server.
func (s *Store) decideAll(ctx context.Context, key store.Key, c algorithms.Composite, req algorithms.Request) (algorithms.Decision, error) {
	names, args, ok := forms.CompositeForm(c)
	if !ok {
		return algorithms.Decision{}, fmt.Errorf("postgres: composite %v has a part without a composite SQL form: %w", c, store.ErrUnsupported)
	}
	if err := ctx.Err(); err != nil {
		return algorithms.Decision{}, fmt.Errorf("postgres: decide %q: %w", key, err)
	}
	var now any = req.Now
	if !s.requestClock {
		now = nil // the function reads the server's clock
	}
	var wait any
	if deadline, ok := ctx.Deadline(); ok {
		wait = lockWaitMillis(time.Until(deadline))
	}
	call := newDecideCall(key)
	defer call.release()
	err := s.db.QueryRow(ctx, s.decideAllSQL, call, now, req.Cost, req.Peek, s.args.text(args), wait, names,
		req.MaxDelay, req.Refund, req.Act).
		Scan(&call.raw)
	if err != nil {
		return algorithms.Decision{}, s.fail(ctx, "decide", key, err)
	}
	v := make([]int64, 6*len(names))
	if err := decodeInts(call.raw, v); err != nil {
		return algorithms.Decision{}, fmt.Errorf("postgres: decide %q: %w", key, err)
	}
	parts := make([]algorithms.Decision, len(names))
	for i := range parts {
		p := v[6*i:]
		parts[i] = algorithms.Decision{
			Allowed: p[0] == 1, Limit: p[1], Remaining: p[2], RetryAfter: p[3], ResetAfter: p[4], Delay: p[5],
		}
	}
	return algorithms.Combine(parts), nil
}

// Update implements store.Store with one transaction: it locks the key's
// row (SELECT ... FOR NO KEY UPDATE), reads the server's clock when the
// store uses it, calls fn, and writes the result. When the key has no row,
// a concurrent request may create it first; Update then rolls back and
// calls fn again with that request's state, so neither fails nor
// over-admits.
func (s *Store) Update(ctx context.Context, key store.Key, now int64, fn store.UpdateFunc) error {
	k := keyBytes(key)
	for attempt := 1; ; attempt++ {
		if err := ctx.Err(); err != nil {
			return fmt.Errorf("postgres: update %q: %w", key, err)
		}
		done, err := s.updateOnce(ctx, key, k, now, fn)
		if done || err != nil {
			return err
		}
		if attempt == maxInsertRaces {
			return fmt.Errorf("postgres: update %q: lost the race to create the row %d times", key, attempt)
		}
	}
}

// maxInsertRaces bounds how often Update retries after a concurrent request
// created the key's row first. Each retry finds the row and locks it, so a
// second retry needs the row deleted again in between.
const maxInsertRaces = 10

func (s *Store) updateOnce(ctx context.Context, key store.Key, k []byte, now int64, fn store.UpdateFunc) (done bool, err error) {
	tx, err := s.db.Begin(ctx)
	if err != nil {
		return false, s.fail(ctx, "update", key, err)
	}
	defer func() {
		// A rollback that fails closes the connection (pgx does), so a
		// pool never reuses one left in a transaction.
		_ = tx.Rollback(ctx)
	}()
	var (
		state   []byte
		vals    []int64
		expires int64
	)
	found := true
	err = tx.QueryRow(ctx, s.selectLockSQL, k).Scan(&state, &vals, &expires)
	if errors.Is(err, pgx.ErrNoRows) {
		found, err = false, nil
	}
	if err != nil {
		return false, s.fail(ctx, "update", key, err)
	}
	if !s.requestClock {
		if err := tx.QueryRow(ctx, s.clockSQL).Scan(&now); err != nil {
			return false, s.fail(ctx, "update", key, err)
		}
	}
	var cur []byte
	if found && expires > now {
		cur = state
		if cur == nil {
			cur = encodeVals(vals) // written by Decide
		}
	}
	next, ttl, err := fn(cur, now)
	if err != nil {
		return false, err
	}
	if next == nil {
		return true, nil // the deferred rollback ends the transaction
	}
	if ttl <= 0 {
		return false, fmt.Errorf("postgres: state for %q written with ttl %d µs", key, ttl)
	}
	exp := now + min(ttl, math.MaxInt64-now)
	if found {
		_, err = tx.Exec(ctx, s.updateSQL, k, next, exp)
	} else {
		var tag pgconn.CommandTag
		tag, err = tx.Exec(ctx, s.insertSQL, k, next, exp)
		if err == nil && tag.RowsAffected() == 0 {
			return false, nil // a concurrent request created the row: retry
		}
	}
	if err != nil {
		return false, s.fail(ctx, "update", key, err)
	}
	if err := tx.Commit(ctx); err != nil {
		return false, s.fail(ctx, "update", key, err)
	}
	return true, nil
}

// encodeVals is the Go form's encoding of a built-in algorithm's state as
// the SQL forms store it: little-endian int64 fields.
func encodeVals(vals []int64) []byte {
	b := make([]byte, 0, 8*len(vals))
	for _, v := range vals {
		b = binary.LittleEndian.AppendUint64(b, uint64(v))
	}
	return b
}

// Delete implements store.Store: it deletes key's row, if any.
func (s *Store) Delete(ctx context.Context, key store.Key) error {
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("postgres: delete %q: %w", key, err)
	}
	if _, err := s.db.Exec(ctx, s.deleteSQL, keyBytes(key)); err != nil {
		return s.fail(ctx, "delete", key, err)
	}
	return nil
}

// DeleteExpired deletes up to limit rows whose expiry has passed by the
// server's clock, and returns how many it deleted. It is one short
// statement that skips rows locked by decisions in progress (FOR UPDATE SKIP
// LOCKED), so it never makes a decision wait; call it in a loop while it
// returns limit, from a ticker or a scheduled job. Expired rows never affect
// decisions whether or not they are deleted: this only reclaims space.
//
// The table has no index on the expiry (so that decisions update rows in
// place, as HOT updates), and the statement scans it until it has found
// limit expired rows: keep limit in the thousands, not the millions.
//
// Rows written under WithServerClock(false) carry the limiter's times, which match
// the server's clock when the limiter uses the system clock.
func (s *Store) DeleteExpired(ctx context.Context, limit int) (int64, error) {
	if limit <= 0 {
		return 0, fmt.Errorf("%w: postgres: delete expired limit %d must be positive", algorithms.ErrInvalidParams, limit)
	}
	tag, err := s.db.Exec(ctx, s.expiredSQL, limit)
	if err != nil {
		return 0, s.fail(ctx, "delete expired", zeroKey, err)
	}
	return tag.RowsAffected(), nil
}

// fail wraps a pgx error with the operation and key, and with ctx's error
// when the context ended, so that errors.Is finds context.Canceled or
// context.DeadlineExceeded and errors.As finds *pgconn.PgError.
func (s *Store) fail(ctx context.Context, op string, key store.Key, err error) error {
	what := "postgres: " + op
	if key != zeroKey {
		what += fmt.Sprintf(" %q", key)
	}
	if ce := ctx.Err(); ce != nil && !errors.Is(err, ce) {
		return fmt.Errorf("%s: %w: %w", what, ce, err)
	}
	var pe *pgconn.PgError
	if errors.As(err, &pe) {
		switch _, deadline := ctx.Deadline(); {
		case pe.Code == forms.SQLErrCorrupt:
			return fmt.Errorf("%s: %w: %w", what, algorithms.ErrCorruptState, err)
		case typeError(pe.Code):
			if se := s.schemaFault(ctx); se != nil {
				return fmt.Errorf("%s: %w: %w", what, se, err) // not corrupt state: a store failure
			}
			if pe.Code == numericOutOfRange && op == "decide" {
				return fmt.Errorf("%s: %w: %w", what, algorithms.ErrCorruptState, err)
			}
		case pe.Code == undefinedTable || pe.Code == undefinedFunctionCode:
			// The store's statements name only its own table and
			// functions (and PostgreSQL's own, which exist).
			return fmt.Errorf("%s: %w: table %s or its functions do not exist: run Migrate on the store at start or from a deployment step (or apply SchemaSQL with your own migration tool): %w",
				what, ErrNoSchema, s.ident(s.table), err)
		case pe.Code == lockNotAvailable && deadline:
			// The lock wait was bounded by the context's deadline.
			return fmt.Errorf("%s: %w: %w", what, context.DeadlineExceeded, err)
		}
	}
	return fmt.Errorf("%s: %w", what, err)
}

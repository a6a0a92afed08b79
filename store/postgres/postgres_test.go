package postgres_test

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/ratelimitkit/ratelimit"
	"github.com/ratelimitkit/ratelimit/algorithms"
	"github.com/ratelimitkit/ratelimit/algorithms/forms"
	"github.com/ratelimitkit/ratelimit/clock"
	"github.com/ratelimitkit/ratelimit/internal/testserver"
	"github.com/ratelimitkit/ratelimit/store"
	"github.com/ratelimitkit/ratelimit/store/postgres"
)

// updateOnly hides the store's Decider, so a limiter uses Update.
type updateOnly struct{ store.Store }

func newLimiter(t testing.TB, s store.Store, alg algorithms.Algorithm, opts ...ratelimit.Option) *ratelimit.Limiter {
	t.Helper()
	lim, err := ratelimit.New(s, alg, opts...)
	if err != nil {
		t.Fatalf("ratelimit.New(%v): %v", alg, err)
	}
	return lim
}

func allow(t testing.TB, lim *ratelimit.Limiter, key string, n int) ratelimit.Decision {
	t.Helper()
	d, err := lim.AllowN(context.Background(), key, n)
	if err != nil {
		t.Fatalf("lim.AllowN(%q, %d): %v", key, n, err)
	}
	return d
}

func serverNow(t testing.TB, p *testPool) time.Time {
	t.Helper()
	var us int64
	if err := p.QueryRow(context.Background(), "SELECT ratelimit_now()").Scan(&us); err != nil {
		t.Fatalf("SELECT ratelimit_now(): %v", err)
	}
	return time.UnixMicro(us)
}

// TestServerClock checks the default clock rule: the store decides by the
// server's clock, whatever the limiter's clock says, on both paths.
func TestServerClock(t *testing.T) {
	p := newTestPool(t, 8)
	for _, path := range []string{"server", "update"} {
		t.Run(path, func(t *testing.T) {
			s := newStore(t, p) // server clock
			// The limiter's clock is years ahead and never moves on its own.
			fake := clock.NewFake(time.Date(2040, 1, 1, 0, 0, 0, 0, time.UTC))
			if _, err := ratelimit.New(s, algorithms.FixedWindow(3, time.Hour), ratelimit.WithClock(fake)); !errors.Is(err, ratelimit.ErrInvalidParams) {
				t.Fatalf("ratelimit.New(server-clock store, WithClock(fake)) error = %v, want ErrInvalidParams", err)
			}
			// Hide the store's ServerClocker to pass the fake clock anyway,
			// and check that the store does ignore it.
			var store store.Store = struct {
				store.Store
				store.Decider
			}{s, s}
			if path == "update" {
				store = updateOnly{s}
			}
			lim := newLimiter(t, store, algorithms.FixedWindow(3, time.Hour), ratelimit.WithClock(fake))
			before := serverNow(t, p)
			for i := 0; i < 3; i++ {
				allow(t, lim, "k", 1)
			}
			fake.Advance(24 * time.Hour) // ignored: the server's hour has not passed
			if d := allow(t, lim, "k", 1); d.Allowed {
				t.Errorf("lim.Allow after the limiter's clock moved a day = allowed, want denied (rule: the server's clock wins)")
			}
			after := serverNow(t, p)
			list, err := expiries(p, s)(context.Background())
			if err != nil || len(list) != 1 {
				t.Fatalf("Expiries = %v, %v; want one row", list, err)
			}
			// A fixed window of an hour ends at the next hour of the server's clock.
			lo := before.Truncate(time.Hour).Add(time.Hour)
			hi := after.Truncate(time.Hour).Add(time.Hour)
			if at := list[0].At; at.Before(lo) || at.After(hi) {
				t.Errorf("row expires at %v, want the end of the server's current hour (%v..%v)", at, lo, hi)
			}
		})
	}
}

// TestRequestClock checks WithRequestClock: the limiter's (fake) clock
// decides, on both paths.
func TestRequestClock(t *testing.T) {
	p := newTestPool(t, 8)
	for _, path := range []string{"server", "update"} {
		t.Run(path, func(t *testing.T) {
			s := newStore(t, p, postgres.WithServerClock(false))
			var store store.Store = s
			if path == "update" {
				store = updateOnly{s}
			}
			start := time.Date(2040, 1, 1, 0, 0, 0, 0, time.UTC)
			fake := clock.NewFake(start)
			lim := newLimiter(t, store, algorithms.GCRA(1, time.Minute, 2), ratelimit.WithClock(fake))
			allow(t, lim, "k", 2)
			if d := allow(t, lim, "k", 1); d.Allowed || d.RetryAfter != time.Minute {
				t.Errorf("lim.Allow when empty = %+v, want denied with retry after 1m", d)
			}
			fake.Advance(time.Minute)
			if d := allow(t, lim, "k", 1); !d.Allowed {
				t.Errorf("lim.Allow a minute later by the limiter's clock = denied, want allowed")
			}
			list, _ := expiries(p, s)(context.Background())
			if len(list) != 1 || !list[0].At.Equal(start.Add(3*time.Minute)) {
				t.Errorf("Expiries = %+v, want one row expiring at %v", list, start.Add(3*time.Minute))
			}
		})
	}
}

// TestPathsShareState checks that a key's state written by Decide reads
// correctly through Update and the other way round.
func TestPathsShareState(t *testing.T) {
	p := newTestPool(t, 4)
	s := newStore(t, p, postgres.WithServerClock(false))
	for _, b := range forms.Builtins() {
		alg := b.New(5, time.Second, 5)
		fake := clock.NewFake(time.Date(2040, 1, 1, 0, 0, 0, 0, time.UTC))
		server := newLimiter(t, s, alg, ratelimit.WithClock(fake), ratelimit.WithName("shared"))
		update := newLimiter(t, updateOnly{s}, alg, ratelimit.WithClock(fake), ratelimit.WithName("shared"))
		for i, lim := range []*ratelimit.Limiter{server, update, server, update, server} {
			if d := allow(t, lim, "k", 1); !d.Allowed || d.Remaining != 4-i {
				t.Fatalf("%v: request %d = %+v, want allowed with remaining %d", alg, i, d, 4-i)
			}
		}
		if d := allow(t, update, "k", 1); d.Allowed {
			t.Errorf("%v: request 6 = allowed, want denied", alg)
		}
	}
}

// noServer is a DB that fails the test when used.
type noServer struct{ t *testing.T }

func (n noServer) Exec(context.Context, string, ...any) (pgconn.CommandTag, error) {
	n.t.Error("the store contacted the server")
	return pgconn.CommandTag{}, errors.New("no server")
}

func (n noServer) QueryRow(context.Context, string, ...any) pgx.Row {
	n.t.Error("the store contacted the server")
	return errRow{errors.New("no server")}
}

func (n noServer) Begin(context.Context) (pgx.Tx, error) {
	n.t.Error("the store contacted the server")
	return nil, errors.New("no server")
}

type ownAlg struct{ algorithms.Algorithm }

func (ownAlg) Name() string { return "own" }

type ownServerForm struct{ forms.ServerForm }

func (ownServerForm) Name() string { return "own_form" }

// TestUnsupported checks that an algorithm without a SQL form is refused
// with ErrUnsupported before anything reaches the server.
func TestUnsupported(t *testing.T) {
	s, err := postgres.New(noServer{t})
	if err != nil {
		t.Fatal(err)
	}
	key := store.Key{Namespace: "n:own", ID: "k"}
	gcra := algorithms.GCRA(1, time.Second, 1).(forms.ServerForm)
	for _, alg := range []algorithms.Algorithm{ownAlg{gcra}, ownServerForm{gcra}} {
		_, err := s.Decide(context.Background(), key, alg, algorithms.Request{Now: 1, Cost: 1})
		if !errors.Is(err, store.ErrUnsupported) || !strings.HasPrefix(err.Error(), "postgres: ") {
			t.Errorf("Decide(%s) = %v, want a postgres: error wrapping ErrUnsupported", alg.Name(), err)
		}
	}
}

// TestOptions checks option validation.
func TestOptions(t *testing.T) {
	// pg_class would resolve to the catalog's table, not the store's.
	for _, name := range []string{"", strings.Repeat("t", postgres.MaxTableLen+1), "a\x00b", "pg_class", "pg_ratelimit"} {
		if _, err := postgres.New(noServer{t}, postgres.WithTable(name)); !errors.Is(err, ratelimit.ErrInvalidParams) {
			t.Errorf("postgres.New(WithTable(%q)) error = %v, want ErrInvalidParams", name, err)
		}
	}
	if _, err := postgres.New(nil); !errors.Is(err, ratelimit.ErrInvalidParams) {
		t.Errorf("postgres.New(nil) error = %v, want ErrInvalidParams", err)
	}
	s, _ := postgres.New(noServer{t}, postgres.WithTable(`we"ird`))
	if got := s.Table(); got != `"we""ird"` {
		t.Errorf("Table() = %s, want %s", got, `"we""ird"`)
	}
	if _, err := s.DeleteExpired(context.Background(), 0); !errors.Is(err, ratelimit.ErrInvalidParams) {
		t.Errorf("DeleteExpired(0) error = %v, want ErrInvalidParams", err)
	}
}

// TestTableNames checks that table names are quoted, never spliced in as
// SQL, including names that try to end a string, a comment or a dollar
// quote.
func TestTableNames(t *testing.T) {
	p := newTestPool(t, 4)
	names := []string{
		`Mixed Case`, `with "quotes"`, `semi; DROP TABLE x; --`, `dollar $rl0$ $$ $rl1$`,
		"new\nline -- comment", `ünïcödé キー`, `a'b`, strings.Repeat("t", postgres.MaxTableLen),
	}
	for _, name := range names {
		t.Run("", func(t *testing.T) {
			t.Cleanup(func() { dropTable(t, p, name) })
			s, err := postgres.New(p, postgres.WithTable(name), postgres.WithServerClock(false))
			if err != nil {
				t.Fatalf("postgres.New(WithTable(%q)): %v", name, err)
			}
			if err := s.Migrate(context.Background()); err != nil {
				t.Fatalf("Migrate with table %q: %v", name, err)
			}
			for _, store := range []store.Store{s, updateOnly{s}} {
				lim := newLimiter(t, store, algorithms.FixedWindow(1, time.Hour), ratelimit.WithClock(clock.NewFake(time.Date(2040, 1, 1, 0, 0, 0, 0, time.UTC))))
				allow(t, lim, "k", 1)
				if d := allow(t, lim, "k", 1); d.Allowed {
					t.Errorf("table %q: second request = allowed, want denied", name)
				}
				if err := lim.Reset(context.Background(), "k"); err != nil {
					t.Errorf("table %q: Reset: %v", name, err)
				}
			}
			if _, err := s.DeleteExpired(context.Background(), 10); err != nil {
				t.Errorf("table %q: DeleteExpired: %v", name, err)
			}
		})
	}
}

// TestMigrate checks that Migrate is idempotent, also when run
// concurrently, and keeps existing state.
func TestMigrate(t *testing.T) {
	p := newTestPool(t, 8)
	s := newStore(t, p, postgres.WithServerClock(false))
	lim := newLimiter(t, s, algorithms.FixedWindow(1, time.Hour), ratelimit.WithClock(clock.NewFake(time.Date(2040, 1, 1, 0, 0, 0, 0, time.UTC))))
	allow(t, lim, "k", 1)
	var wg sync.WaitGroup
	for i := 0; i < 4; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := s.Migrate(context.Background()); err != nil {
				t.Errorf("concurrent Migrate: %v", err)
			}
		}()
	}
	wg.Wait()
	if d := allow(t, lim, "k", 1); d.Allowed {
		t.Errorf("after Migrate again, a spent key = allowed, want denied (state kept)")
	}
	if !strings.Contains(s.SchemaSQL(), "CREATE TABLE IF NOT EXISTS "+s.Table()) {
		t.Errorf("SchemaSQL does not create the table %s", s.Table())
	}
	u, _ := postgres.New(p, postgres.WithUnlogged())
	if !strings.Contains(u.SchemaSQL(), "CREATE UNLOGGED TABLE IF NOT EXISTS") {
		t.Errorf("SchemaSQL with WithUnlogged does not create an UNLOGGED table")
	}
}

// TestDeleteExpired checks the bounded cleanup: it deletes expired rows in
// batches of at most limit, keeps live ones, and skips rows that a decision
// has locked instead of waiting for them.
func TestDeleteExpired(t *testing.T) {
	p := newTestPool(t, 4)
	s := newStore(t, p, postgres.WithServerClock(false))
	ctx := context.Background()
	// Rows written an hour ago by the limiter's clock have expired by the
	// server's clock; rows written an hour ahead have not.
	past := clock.NewFake(time.Now().Add(-time.Hour))
	old := newLimiter(t, s, algorithms.GCRA(1, time.Second, 1), ratelimit.WithClock(past), ratelimit.WithName("old"))
	future := clock.NewFake(time.Now().Add(time.Hour))
	live := newLimiter(t, s, algorithms.GCRA(1, time.Second, 1), ratelimit.WithClock(future), ratelimit.WithName("live"))
	for i := 0; i < 25; i++ {
		allow(t, old, "k"+strings.Repeat("x", i), 1)
	}
	for i := 0; i < 3; i++ {
		allow(t, live, "k"+strings.Repeat("x", i), 1)
	}
	// Hold the lock of one expired row, as a decision in progress would.
	tx, err := p.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(ctx)
	if _, err := tx.Exec(ctx, "SELECT 1 FROM "+s.Table()+" WHERE key = $1 FOR NO KEY UPDATE", []byte(old.Namespace()+":k")); err != nil {
		t.Fatal(err)
	}
	var got []int64
	for {
		ctx1, cancel := context.WithTimeout(ctx, 5*time.Second)
		n, err := s.DeleteExpired(ctx1, 10)
		cancel()
		if err != nil {
			t.Fatalf("DeleteExpired(10): %v (it must not wait for a locked row)", err)
		}
		got = append(got, n)
		if n < 10 {
			break
		}
	}
	if want := []int64{10, 10, 4}; len(got) != len(want) || got[0] != 10 || got[1] != 10 || got[2] != 4 {
		t.Errorf("DeleteExpired(10) in a loop deleted %v, want %v (one expired row is locked)", got, want)
	}
	_ = tx.Rollback(ctx)
	if n, err := s.DeleteExpired(ctx, 10); err != nil || n != 1 {
		t.Errorf("DeleteExpired after the lock is released = %d, %v; want 1", n, err)
	}
	list, _ := expiries(p, s)(ctx)
	if len(list) != 3 {
		t.Errorf("after DeleteExpired, %d rows remain, want the 3 live ones", len(list))
	}
}

// TestJoinTransaction checks that a store built on a pgx.Tx decides inside
// the caller's transaction: its writes vanish when the transaction rolls
// back.
func TestJoinTransaction(t *testing.T) {
	p := newTestPool(t, 4)
	s := newStore(t, p, postgres.WithServerClock(false))
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, testserver.PostgresURL(t))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	fake := clock.NewFake(time.Date(2040, 1, 1, 0, 0, 0, 0, time.UTC))
	for _, commit := range []bool{false, true} {
		tx, err := conn.Begin(ctx)
		if err != nil {
			t.Fatal(err)
		}
		ts, err := postgres.New(tx, postgres.WithTable(strings.Trim(s.Table(), `"`)), postgres.WithServerClock(false))
		if err != nil {
			t.Fatal(err)
		}
		lim := newLimiter(t, ts, algorithms.FixedWindow(1, time.Hour), ratelimit.WithClock(fake), ratelimit.WithName("tx"))
		if d := allow(t, lim, "k", 1); !d.Allowed {
			t.Fatalf("first request in a transaction (commit=%v) = denied", commit)
		}
		if commit {
			err = tx.Commit(ctx)
		} else {
			err = tx.Rollback(ctx)
		}
		if err != nil {
			t.Fatal(err)
		}
	}
	lim := newLimiter(t, s, algorithms.FixedWindow(1, time.Hour), ratelimit.WithClock(fake), ratelimit.WithName("tx"))
	if d := allow(t, lim, "k", 1); d.Allowed {
		t.Errorf("after one rolled-back and one committed request, a limit-1 key = allowed, want denied")
	}
}

// TestBackendErrors checks that server errors come back prefixed and
// wrapping *pgconn.PgError.
func TestBackendErrors(t *testing.T) {
	p := newTestPool(t, 4)
	s, err := postgres.New(p, postgres.WithTable(newTable(t, p, "rl_missing")))
	if err != nil {
		t.Fatal(err)
	}
	// Not migrated: the table and function do not exist.
	lim := newLimiter(t, s, algorithms.GCRA(1, time.Second, 1))
	for _, store := range []store.Store{s, updateOnly{s}} {
		lim = newLimiter(t, store, algorithms.GCRA(1, time.Second, 1))
		d, err := lim.Allow(context.Background(), "k")
		var pe *pgconn.PgError
		if !errors.As(err, &pe) || !strings.HasPrefix(err.Error(), "postgres: ") {
			t.Errorf("lim.Allow on an unmigrated table: error %v, want a postgres: error wrapping *pgconn.PgError", err)
		}
		if d.Allowed {
			t.Errorf("lim.Allow on a failing store (FailClosed) = allowed, want denied")
		}
	}
	// Corrupt state is ErrCorruptState.
	s2 := newStore(t, p, postgres.WithServerClock(false))
	lim = newLimiter(t, s2, algorithms.GCRA(1, time.Second, 1), ratelimit.WithName("c"), ratelimit.WithFailurePolicy(ratelimit.FailOpen))
	if _, err := p.Exec(context.Background(), "INSERT INTO "+s2.Table()+" (key, vals, expires_at) VALUES ($1, '{1,2}', $2)",
		[]byte(lim.Namespace()+":k"), int64(1)<<60); err != nil {
		t.Fatal(err)
	}
	d, err := lim.Allow(context.Background(), "k")
	if !errors.Is(err, ratelimit.ErrCorruptState) {
		t.Errorf("lim.Allow on corrupt state: error %v, want ErrCorruptState", err)
	}
	if d.Allowed {
		t.Errorf("lim.Allow on corrupt state = allowed, want denied even when failing open")
	}
}

// TestExecModes checks that decisions read the same through every pgx
// query mode: the decision comes back in PostgreSQL's binary format from a
// prepared statement and in its text format through the simple protocol,
// and the arguments go as text in both.
func TestExecModes(t *testing.T) {
	url := testserver.PostgresURL(t)
	sep := "?"
	if strings.Contains(url, "?") {
		sep = "&"
	}
	for _, mode := range []string{"cache_statement", "cache_describe", "describe_exec", "exec", "simple_protocol"} {
		t.Run(mode, func(t *testing.T) {
			p := newTestPoolURL(t, url+sep+"default_query_exec_mode="+mode, 2)
			s := newStore(t, p, postgres.WithRequestClock())
			start := time.Date(2040, 1, 1, 0, 0, 0, 0, time.UTC)
			lim := newLimiter(t, s, algorithms.TokenBucket(3, time.Minute, 3), ratelimit.WithClock(clock.NewFake(start)))
			// A key with bytes that are not UTF-8, a NUL, a backslash and a
			// quote, which must reach the server unchanged in every mode.
			const key = "k\x00\xff\\x'"
			// A token bucket of 3 per minute admits 3 and then retries in
			// 20 seconds.
			want := []ratelimit.Decision{
				{Allowed: true, Limit: 3, Remaining: 2, ResetAfter: 20 * time.Second, Source: ratelimit.SourceStore},
				{Allowed: true, Limit: 3, Remaining: 1, ResetAfter: 40 * time.Second, Source: ratelimit.SourceStore},
				{Allowed: true, Limit: 3, Remaining: 0, ResetAfter: time.Minute, Source: ratelimit.SourceStore},
				{Allowed: false, Limit: 3, Remaining: 0, RetryAfter: 20 * time.Second, ResetAfter: time.Minute,
					Source: ratelimit.SourceStore},
			}
			for i, w := range want {
				if d := allow(t, lim, key, 1); !reflect.DeepEqual(d, w) {
					t.Fatalf("request %d: got %+v, want %+v", i+1, d, w)
				}
			}
			// The key reached the server byte for byte.
			rows, err := p.Query(context.Background(), "SELECT key FROM "+s.Table())
			if err != nil {
				t.Fatal(err)
			}
			if len(rows) != 1 || !strings.HasSuffix(string(rows[0][0].([]byte)), ":"+key) {
				t.Fatalf("rows %q, want one whose key ends in %q", rows, ":"+key)
			}
		})
	}
}

// TestFarDeadline checks that a context deadline further away than the
// longest lock_timeout PostgreSQL accepts (2^31-1 ms, about 24.8 days)
// decides normally, on both paths.
func TestFarDeadline(t *testing.T) {
	p := newTestPool(t, 2)
	s := newStore(t, p, postgres.WithServerClock(false))
	fake := clock.NewFake(time.Date(2040, 1, 1, 0, 0, 0, 0, time.UTC))
	for _, far := range []time.Duration{25 * 24 * time.Hour, 10 * 365 * 24 * time.Hour, 1<<63 - 1} {
		for i, store := range []store.Store{s, updateOnly{s}} {
			lim := newLimiter(t, store, algorithms.FixedWindow(1, time.Hour), ratelimit.WithClock(fake), ratelimit.WithName(fmt.Sprintf("far%d", i)))
			ctx, cancel := context.WithDeadline(context.Background(), time.Now().Add(far))
			key := fmt.Sprint("k", far)
			if d, err := lim.Allow(ctx, key); err != nil || !d.Allowed {
				t.Errorf("lim.Allow with a deadline %v away = %v, %v; want allowed", far, d.Allowed, err)
			}
			if d, err := lim.Allow(ctx, key); err != nil || d.Allowed {
				t.Errorf("second lim.Allow with a deadline %v away = %v, %v; want denied, no error", far, d.Allowed, err)
			}
			cancel()
		}
	}
}

// TestCorruptOutOfRange checks that stored values so large that the SQL
// form's arithmetic overflows are ErrCorruptState on the server path, as
// on the Update path, so that a fail-open limiter still denies.
func TestCorruptOutOfRange(t *testing.T) {
	p := newTestPool(t, 2)
	s := newStore(t, p, postgres.WithServerClock(false))
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, testserver.PostgresURL(t))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	fake := clock.NewFake(time.Date(2040, 1, 1, 0, 0, 0, 0, time.UTC))
	for _, alg := range []algorithms.Algorithm{
		algorithms.SlidingLog(5, time.Second), algorithms.FixedWindow(5, time.Second), algorithms.SlidingWindow(5, time.Second),
		algorithms.TokenBucket(5, time.Second, 5), algorithms.LeakyBucket(5, time.Second, 5), algorithms.GCRA(5, time.Second, 5),
	} {
		for _, vals := range []string{"{9223372036854775000,1}", "{9223372036854775000,9223372036854775000}", "{9223372036854775000,9223372036854775000,9223372036854775000}", "{-9223372036854775000,9223372036854775000,1,1}"} {
			// In a transaction that installs this version's functions
			// first: they are shared by every table in the schema, and
			// other test runs on a shared server may install theirs.
			tx, err := conn.Begin(ctx)
			if err != nil {
				t.Fatal(err)
			}
			ts, err := postgres.New(tx, postgres.WithTable(strings.Trim(s.Table(), `"`)), postgres.WithServerClock(false))
			if err != nil {
				t.Fatal(err)
			}
			if err := ts.Migrate(ctx); err != nil {
				t.Fatal(err)
			}
			// The update path first: the server path's error ends the
			// transaction.
			for _, i := range []int{1, 0} {
				store := []store.Store{ts, updateOnly{ts}}[i]
				lim := newLimiter(t, store, alg, ratelimit.WithClock(fake), ratelimit.WithName(fmt.Sprintf("range%d", i)), ratelimit.WithFailurePolicy(ratelimit.FailOpen))
				if _, err := tx.Exec(ctx, "INSERT INTO "+s.Table()+" (key, vals, expires_at) VALUES ($1, $2, $3) ON CONFLICT (key) DO UPDATE SET vals = excluded.vals, state = NULL, expires_at = excluded.expires_at",
					[]byte(lim.Namespace()+":k"), vals, int64(1)<<60); err != nil {
					t.Fatal(err)
				}
				d, err := lim.Allow(ctx, "k")
				if !errors.Is(err, ratelimit.ErrCorruptState) || d.Allowed {
					t.Errorf("%v (path %d) on stored %s: lim.Allow = %v, %v; want denied with ErrCorruptState", alg, i, vals, d.Allowed, err)
				}
			}
			if err := tx.Rollback(ctx); err != nil {
				t.Fatal(err)
			}
		}
	}
}

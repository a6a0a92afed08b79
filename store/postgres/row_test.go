package postgres_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/ratelimitkit/ratelimit"
	"github.com/ratelimitkit/ratelimit/algorithms"
	"github.com/ratelimitkit/ratelimit/internal/testserver"
	"github.com/ratelimitkit/ratelimit/store/postgres"
)

// TestClockAfterLockWait checks the clock rule of the one-statement
// decision on a key that has a row: a decision that waits for the row lock
// of a concurrent decision reads the server's clock after that decision
// commits (PostgreSQL evaluates the UPDATE's SET list again on the new row
// version), so it never decides at a time before the state it reads.
func TestClockAfterLockWait(t *testing.T) {
	p := newTestPool(t, 4)
	s := newStore(t, p) // server clock
	ctx := context.Background()
	// 1,000 a second: each admitted request moves GCRA's TAT 1 ms past
	// the decision's time, and the row expires at the TAT.
	alg := algorithms.GCRA(1000, time.Second, 1)
	lim := newLimiter(t, s, alg, ratelimit.WithName("clk"))
	allow(t, lim, "k", 1) // the key has a row
	key := []byte(lim.Namespace() + ":k")

	conn, err := pgx.Connect(ctx, testserver.PostgresURL(t))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	tx, err := conn.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = tx.Rollback(ctx) }()
	ts, err := postgres.New(tx, postgres.WithTable(strings.Trim(s.Table(), `"`)))
	if err != nil {
		t.Fatal(err)
	}
	// A decision in the transaction updates the row and holds its lock.
	allow(t, newLimiter(t, ts, alg, ratelimit.WithName("clk")), "k", 1)

	waiting := allowAsync(ctx, lim, "k")
	admin, err := pgx.Connect(ctx, testserver.PostgresURL(t))
	if err != nil {
		t.Fatal(err)
	}
	defer admin.Close(ctx)
	waitingBackend(t, admin, strings.Trim(s.Table(), `"`))
	time.Sleep(300 * time.Millisecond)
	var committed int64 // the server's clock just before the commit
	if err := tx.QueryRow(ctx, "SELECT ratelimit_now()").Scan(&committed); err != nil {
		t.Fatal(err)
	}
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	r := await(t, waiting, 5*time.Second)
	if r.err != nil || !r.d.Allowed {
		t.Fatalf("the waiting decision = %+v, %v; want admitted", r.d, r.err)
	}
	var expires int64
	if err := p.QueryRow(ctx, "SELECT expires_at FROM "+s.Table()+" WHERE key = $1", key).Scan(&expires); err != nil {
		t.Fatal(err)
	}
	// Read after the wait, the clock is past committed and the row expires
	// 1 ms after it; read before, about 300 ms earlier.
	if expires < committed+1000 {
		t.Errorf("the waiting decision's row expires %d µs after the lock holder's commit, want at least 1000: it decided at a time before the wait ended", expires-committed)
	}
}

// TestLockTimeoutScope checks that the lock_timeout a decision with a
// deadline sets ends with its statement: on a pool's connection, the
// setting is back to the server's after the decision; in a caller's
// transaction, too.
func TestLockTimeoutScope(t *testing.T) {
	p := newTestPool(t, 1)
	s := newStore(t, p, postgres.WithServerClock(false))
	ctx := context.Background()
	var before string
	if err := p.QueryRow(ctx, "SHOW lock_timeout").Scan(&before); err != nil {
		t.Fatal(err)
	}
	show := func(db postgres.DB) string {
		var v string
		if err := db.QueryRow(ctx, "SHOW lock_timeout").Scan(&v); err != nil {
			t.Fatal(err)
		}
		return v
	}
	lim := newLimiter(t, s, algorithms.FixedWindow(10, time.Hour), ratelimit.WithName("lt"))
	for i := 0; i < 2; i++ { // the first inserts the row, the second updates it
		dctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		if _, err := lim.Allow(dctx, "k"); err != nil {
			t.Fatal(err)
		}
		cancel()
		if got := show(p); got != before {
			t.Errorf("after decision %d with a deadline, lock_timeout = %q on the pool's connection, want %q", i+1, got, before)
		}
	}
	tx, err := p.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = tx.Rollback(ctx) }()
	ts, err := postgres.New(tx, postgres.WithTable(strings.Trim(s.Table(), `"`)), postgres.WithServerClock(false))
	if err != nil {
		t.Fatal(err)
	}
	tlim := newLimiter(t, ts, algorithms.FixedWindow(10, time.Hour), ratelimit.WithName("lt"))
	dctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if _, err := tlim.Allow(dctx, "k"); err != nil {
		t.Fatal(err)
	}
	if got := show(tx); got != before {
		t.Errorf("in the caller's transaction after a decision with a deadline, lock_timeout = %q, want %q", got, before)
	}
}

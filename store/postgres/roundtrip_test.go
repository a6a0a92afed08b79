package postgres_test

import (
	"context"
	"errors"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/ratelimitkit/ratelimit"
	"github.com/ratelimitkit/ratelimit/algorithms"
	"github.com/ratelimitkit/ratelimit/internal/testserver"
	"github.com/ratelimitkit/ratelimit/lease"
	"github.com/ratelimitkit/ratelimit/store/postgres"
)

// statements counts the statements a pool's connections send (a
// transaction's BEGIN and COMMIT included): a pgx.QueryTracer.
type statements struct{ n atomic.Int64 }

func (c *statements) TraceQueryStart(ctx context.Context, _ *pgx.Conn, _ pgx.TraceQueryStartData) context.Context {
	c.n.Add(1)
	return ctx
}

func (c *statements) TraceQueryEnd(context.Context, *pgx.Conn, pgx.TraceQueryEndData) {}

// newCountedStore returns a migrated store on a fresh table, and the count
// of the statements its pool sends from then on.
func newCountedStore(t *testing.T, opts ...postgres.Option) (*postgres.Store, *statements) {
	t.Helper()
	cfg, err := pgxpool.ParseConfig(testserver.PostgresURL(t))
	if err != nil {
		t.Fatal(err)
	}
	count := &statements{}
	cfg.ConnConfig.Tracer = count
	cfg.MaxConns = 4
	pool, err := pgxpool.NewWithConfig(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	s := newStore(t, &testPool{pool}, opts...)
	return s, count
}

// TestCompositeSlidingLogOneStatement checks that a composite with a
// sliding-log part decides in one statement (the composite SQL form calls
// the log's SQL form), not through Update's transaction: a decision on a
// new key, an admission on a key with a row and a denial, one statement
// each.
func TestCompositeSlidingLogOneStatement(t *testing.T) {
	s, count := newCountedStore(t, postgres.WithServerClock(false))
	ctx := context.Background()
	alg := algorithms.All(algorithms.SlidingLog(2, time.Hour), algorithms.FixedWindow(10, time.Hour))
	lim, err := ratelimit.New(s, alg)
	if err != nil {
		t.Fatal(err)
	}
	for i, want := range []bool{true, true, false} {
		before := count.n.Load()
		d, err := lim.Allow(ctx, "k")
		if err != nil {
			t.Fatal(err)
		}
		if d.Allowed != want {
			t.Errorf("decision %d on one key allowed = %v, want %v", i+1, d.Allowed, want)
		}
		if n := count.n.Load() - before; n != 1 {
			t.Errorf("%v: decision %d on one key took %d statements, want 1", alg, i+1, n)
		}
	}
}

// TestLeaseOneStatement checks that a lease's acquire, a competing acquire,
// an extend and a release are one statement each (the table's lease
// function), not Update's transaction of four or five.
func TestLeaseOneStatement(t *testing.T) {
	for _, clock := range []bool{true, false} {
		s, count := newCountedStore(t, postgres.WithServerClock(clock))
		ctx := context.Background()
		lk, err := lease.New(s, time.Minute)
		if err != nil {
			t.Fatal(err)
		}
		step := func(what string, fn func() error) {
			t.Helper()
			before := count.n.Load()
			if err := fn(); err != nil {
				t.Fatalf("%s: %v", what, err)
			}
			if n := count.n.Load() - before; n != 1 {
				t.Errorf("server clock %v: %s took %d statements, want 1", clock, what, n)
			}
		}
		var le *lease.Lease
		step("TryAcquire", func() (err error) { le, err = lk.TryAcquire(ctx, "job"); return err })
		step("TryAcquire of a held key", func() error {
			if _, err := lk.TryAcquire(ctx, "job"); !errors.Is(err, lease.ErrHeld) {
				return errors.New("not ErrHeld: " + errString(err))
			}
			return nil
		})
		step("Extend", func() error { return le.Extend(ctx) })
		step("Release", func() error { return le.Release(ctx) })
	}
}

func errString(err error) string {
	if err == nil {
		return "nil"
	}
	return err.Error()
}

// TestLeaseWithoutFunction checks a table migrated by a release without
// the lease function: leases still work, through Update.
func TestLeaseWithoutFunction(t *testing.T) {
	p := newTestPool(t, 4)
	s := newStore(t, p, postgres.WithServerClock(false))
	ctx := context.Background()
	fn := strings.TrimSuffix(s.Table(), `"`) + `_lease"`
	if _, err := p.Exec(ctx, "DROP FUNCTION "+fn); err != nil {
		t.Fatal(err)
	}
	lk, err := lease.New(s, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	le, err := lk.TryAcquire(ctx, "job")
	if err != nil {
		t.Fatalf("TryAcquire without the lease function: %v", err)
	}
	if _, err := lk.TryAcquire(ctx, "job"); !errors.Is(err, lease.ErrHeld) {
		t.Fatalf("second TryAcquire = %v, want ErrHeld", err)
	}
	if err := le.Release(ctx); err != nil {
		t.Fatalf("Release without the lease function: %v", err)
	}
}

package postgres_test

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/ratelimitkit/ratelimit"
	"github.com/ratelimitkit/ratelimit/algorithms"
	"github.com/ratelimitkit/ratelimit/algorithms/forms"
	"github.com/ratelimitkit/ratelimit/store/postgres"
)

var migrateSeq atomic.Int64

// migrateStore returns a store on a fresh table of p (dropped with its
// functions when t ends), not yet migrated, and the table's name.
func migrateStore(t testing.TB, p *testPool, opts ...postgres.Option) (*postgres.Store, string) {
	t.Helper()
	name := fmt.Sprintf("rl_mig_%d_%d", time.Now().UnixNano()%1e9, migrateSeq.Add(1))
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		drop := []string{"DROP TABLE IF EXISTS " + pgx.Identifier{name}.Sanitize(),
			"DROP FUNCTION IF EXISTS " + pgx.Identifier{name + "_lease"}.Sanitize(),
			"DROP FUNCTION IF EXISTS " + pgx.Identifier{name + "_decide_all"}.Sanitize()}
		for _, b := range forms.Builtins() {
			drop = append(drop, "DROP FUNCTION IF EXISTS "+pgx.Identifier{name + "_decide_" + b.Name}.Sanitize())
		}
		for _, q := range drop {
			if _, err := p.Exec(ctx, q); err != nil {
				t.Errorf("%s: %v", q, err)
			}
		}
	})
	s, err := postgres.New(p, append([]postgres.Option{postgres.WithTable(name)}, opts...)...)
	if err != nil {
		t.Fatalf("postgres.New: %v", err)
	}
	return s, name
}

// TestMigrateOnLiveTable runs decisions on a live table (16 callers, every
// built-in algorithm and a composite, the limiter's default 1s budget)
// while two Migrate calls run at once, again and again, as two processes
// of a deploy would: no decision may fail or take longer than the budget.
func TestMigrateOnLiveTable(t *testing.T) {
	p := newTestPool(t, 4)
	s, table := migrateStore(t, p)
	ctx := context.Background()
	if err := s.Migrate(ctx); err != nil {
		t.Fatal(err)
	}
	algs := []algorithms.Algorithm{
		algorithms.GCRA(1e6, time.Second, 1e4),
		algorithms.TokenBucket(1e6, time.Second, 1e4),
		algorithms.FixedWindow(1e6, time.Second),
		algorithms.SlidingWindow(1e6, time.Second),
		algorithms.LeakyBucket(1e6, time.Second, 1e4),
		algorithms.SlidingLog(1e6, time.Second),
		algorithms.All(algorithms.FixedWindow(1e6, time.Second), algorithms.GCRA(1e6, time.Second, 1e4)),
	}
	var lims []*ratelimit.Limiter
	for i, a := range algs {
		lim, err := ratelimit.New(s, a, ratelimit.WithName(fmt.Sprint("live", i)))
		if err != nil {
			t.Fatal(err)
		}
		lims = append(lims, lim)
	}
	stop := make(chan struct{})
	var wg sync.WaitGroup
	var mu sync.Mutex
	var failed []string
	var calls int
	var slowest time.Duration
	for g := range 16 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; ; i++ {
				select {
				case <-stop:
					return
				default:
				}
				lim := lims[(g+i)%len(lims)]
				start := time.Now()
				_, err := lim.Allow(ctx, fmt.Sprintf("k%d", i%20))
				took := time.Since(start)
				mu.Lock()
				calls++
				slowest = max(slowest, took)
				if err != nil {
					failed = append(failed, fmt.Sprintf("after %v: %v", took, err))
				}
				mu.Unlock()
			}
		}()
	}
	time.Sleep(100 * time.Millisecond)
	// Each migrating process has a pool and a store of its own. Every
	// round first marks the schema as another release's, as a deploy of
	// a new release finds it: one of the two Migrate calls replaces every
	// function on the live table while the other waits for it, then finds
	// nothing to do.
	var migrators []*postgres.Store
	for range 2 {
		m, err := postgres.New(newTestPool(t, 4), postgres.WithTable(table))
		if err != nil {
			t.Fatal(err)
		}
		migrators = append(migrators, m)
	}
	lease := pgx.Identifier{table + "_lease"}.Sanitize()
	var migrations int
	var longest time.Duration
	for range 10 {
		if _, err := p.Exec(ctx, "COMMENT ON FUNCTION "+lease+"("+leaseArgs+") IS 'ratelimit schema of another release'"); err != nil {
			t.Fatal(err)
		}
		var mwg sync.WaitGroup
		for _, m := range migrators {
			mwg.Go(func() {
				start := time.Now()
				if err := m.Migrate(ctx); err != nil {
					t.Errorf("Migrate on a live table: %v", err)
				}
				mu.Lock()
				migrations++
				longest = max(longest, time.Since(start))
				mu.Unlock()
			})
		}
		mwg.Wait()
	}
	time.Sleep(100 * time.Millisecond)
	close(stop)
	wg.Wait()
	for i, f := range failed {
		if i == 10 {
			t.Errorf("... and %d more", len(failed)-i)
			break
		}
		t.Errorf("a decision failed while Migrate ran: %s", f)
	}
	t.Logf("%d decisions beside %d migrations (the longest %v): %d failed, the slowest took %v",
		calls, migrations, longest, len(failed), slowest)
}

// leaseArgs are the argument types of a table's lease function.
const leaseArgs = "bytea, bigint, integer, bigint, bigint, bytea"

// functionVersions returns the xmin of every catalog row of the table's
// own functions (its decide and lease functions), by name: a function
// that Migrate rewrites gets a new one.
func functionVersions(t *testing.T, p *testPool, table string) map[string]string {
	t.Helper()
	rows, err := p.Pool.Query(context.Background(), `SELECT proname::text, xmin::text FROM pg_proc WHERE starts_with(proname::text, $1)`, table+"_")
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]string{}
	var name, xmin string
	if _, err := pgx.ForEachRow(rows, []any{&name, &xmin}, func() error { out[name] = xmin; return nil }); err != nil {
		t.Fatal(err)
	}
	return out
}

// TestMigrateCurrentWritesNothing: Migrate on a schema this release has
// installed writes nothing (before the fix, every call replaced every
// function, which every session running them then compiled again), even
// two at once from two processes; and a schema that is not current (a
// function dropped by hand, a mark of another release) is migrated again.
func TestMigrateCurrentWritesNothing(t *testing.T) {
	p := newTestPool(t, 4)
	s, table := migrateStore(t, p)
	ctx := context.Background()
	if err := s.Migrate(ctx); err != nil {
		t.Fatal(err)
	}
	before := functionVersions(t, p, table)
	if len(before) != 8 { // six algorithms, the composite, the lease
		t.Fatalf("after Migrate, %d functions of the table's own, want 8: %v", len(before), before)
	}
	var wg sync.WaitGroup
	for range 2 {
		m, err := postgres.New(newTestPool(t, 2), postgres.WithTable(table))
		if err != nil {
			t.Fatal(err)
		}
		wg.Go(func() {
			if err := m.Migrate(ctx); err != nil {
				t.Errorf("Migrate again: %v", err)
			}
		})
	}
	wg.Wait()
	if after := functionVersions(t, p, table); !maps.Equal(before, after) {
		t.Errorf("Migrate on a current schema rewrote functions: before %v, after %v", before, after)
	}

	// A function dropped by hand is put back.
	gcra := table + "_decide_gcra"
	if _, err := p.Exec(ctx, "DROP FUNCTION "+pgx.Identifier{gcra}.Sanitize()); err != nil {
		t.Fatal(err)
	}
	if err := s.Migrate(ctx); err != nil {
		t.Fatal(err)
	}
	after := functionVersions(t, p, table)
	if after[gcra] == "" {
		t.Errorf("Migrate did not put back %s, dropped by hand", gcra)
	}
	// A mark of another release (or none, for a schema applied by hand
	// from an older SchemaSQL) is migrated again.
	lease := pgx.Identifier{table + "_lease"}.Sanitize()
	if _, err := p.Exec(ctx, "COMMENT ON FUNCTION "+lease+"("+leaseArgs+") IS 'ratelimit schema older'"); err != nil {
		t.Fatal(err)
	}
	if err := s.Migrate(ctx); err != nil {
		t.Fatal(err)
	}
	again := functionVersions(t, p, table)
	for name, v := range after {
		if again[name] == v {
			t.Errorf("Migrate on a schema marked as another release's kept %s as it was", name)
		}
	}
	lim, err := ratelimit.New(s, algorithms.GCRA(10, time.Second, 5))
	if err != nil {
		t.Fatal(err)
	}
	if d, err := lim.Allow(ctx, "k"); err != nil || !d.Allowed {
		t.Errorf("a decision after the migrations: %v, %v", d.Allowed, err)
	}
}

// TestNoSchema: every call on a table Migrate never created fails with an
// error that says to run Migrate, names the table, wraps ErrNoSchema and
// still reaches PostgreSQL's own error (before: "relation does not exist"
// alone). So does a decision whose decide function was dropped.
func TestNoSchema(t *testing.T) {
	p := newTestPool(t, 4)
	s, table := migrateStore(t, p)
	ctx := context.Background()
	// PostgreSQL's error: the table does not exist (42P01), or the
	// function the call runs (42883).
	check := func(what string, err error) {
		t.Helper()
		var pe *pgconn.PgError
		switch {
		case err == nil:
			t.Errorf("%s on a table never migrated: no error", what)
		case !errors.Is(err, postgres.ErrNoSchema):
			t.Errorf("%s: error %q does not wrap postgres.ErrNoSchema", what, err)
		case !errors.As(err, &pe) || pe.Code != "42P01" && pe.Code != "42883":
			t.Errorf("%s: error %q does not wrap PostgreSQL's undefined table or function", what, err)
		case !strings.Contains(err.Error(), "run Migrate") || !strings.Contains(err.Error(), s.Table()):
			t.Errorf("%s: error %q does not name the table and say to run Migrate", what, err)
		}
	}
	lims := map[string]*ratelimit.Limiter{}
	for name, alg := range map[string]algorithms.Algorithm{
		"gcra": algorithms.GCRA(10, time.Second, 5),
		"all":  algorithms.All(algorithms.FixedWindow(10, time.Second), algorithms.GCRA(10, time.Second, 5)),
		"own":  ownCounter{},
	} {
		lim, err := ratelimit.New(s, alg, ratelimit.WithName("noschema"))
		if err != nil {
			t.Fatal(err)
		}
		lims[name] = lim
	}
	for name, lim := range lims {
		_, err := lim.Allow(ctx, "k")
		check(name+": Allow", err)
		_, err = lim.Peek(ctx, "k")
		check(name+": Peek", err)
		check(name+": Reset", lim.Reset(ctx, "k"))
	}
	_, err := s.DeleteExpired(ctx, 10)
	check("DeleteExpired", err)

	if err := s.Migrate(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := p.Exec(ctx, "DROP FUNCTION "+pgx.Identifier{table + "_decide_gcra"}.Sanitize()); err != nil {
		t.Fatal(err)
	}
	_, err = lims["gcra"].Peek(ctx, "k")
	check("gcra: Peek with its decide function dropped", err)
}

// ownCounter is a user's algorithm, which the store runs through Update:
// at most 3 units per key for an hour.
type ownCounter struct{}

func (ownCounter) Name() string    { return "own_counter" }
func (ownCounter) Validate() error { return nil }
func (ownCounter) MaxCost() int64  { return 3 }
func (ownCounter) String() string  { return "ownCounter" }
func (ownCounter) Decide(state []byte, req algorithms.Request) (algorithms.Step, error) {
	n := int64(len(state))
	d := algorithms.Decision{Limit: 3, Allowed: n+req.Cost <= 3, ResetAfter: int64(time.Hour / time.Microsecond)}
	if !d.Allowed || req.Peek {
		d.Remaining = 3 - n
		return algorithms.Step{Decision: d}, nil
	}
	d.Remaining = 3 - n - req.Cost
	return algorithms.Step{Decision: d, Next: make([]byte, n+req.Cost), TTL: d.ResetAfter}, nil
}

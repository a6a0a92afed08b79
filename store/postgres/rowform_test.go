package postgres_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/ratelimitkit/ratelimit/algorithms"
	"github.com/ratelimitkit/ratelimit/algorithms/forms"
	"github.com/ratelimitkit/ratelimit/internal/testserver"
	"github.com/ratelimitkit/ratelimit/store"
	"github.com/ratelimitkit/ratelimit/store/postgres"
)

// TestRowFormFallback checks the one-statement decision's two ways out to
// the decide function on a key that has a row: state that Update wrote (in
// the state column: the statement's WHERE clause skips the row) and a row
// form that is not installed (dropped as unused by another release's
// cleanup: the statement fails with undefined_function). Both decide
// exactly, through the decide function. It runs in a schema of its own, so
// that dropping the row form leaves other tests' functions alone.
func TestRowFormFallback(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	admin := newTestPool(t, 2)
	schema := fmt.Sprintf("rl_fallback_%d", time.Now().UnixNano()%1e9)
	if _, err := admin.Exec(ctx, "CREATE SCHEMA "+schema); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _, _ = admin.Exec(context.Background(), "DROP SCHEMA "+schema+" CASCADE") })
	cfg, err := pgxpool.ParseConfig(testserver.PostgresURL(t))
	if err != nil {
		t.Fatal(err)
	}
	cfg.MaxConns = 2
	cfg.ConnConfig.RuntimeParams["search_path"] = schema
	p, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(p.Close)
	s, err := postgres.New(p, postgres.WithServerClock(false))
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Migrate(ctx); err != nil {
		t.Fatal(err)
	}
	alg := algorithms.GCRA(10, time.Second, 4)
	now := time.Now().UnixMicro()
	decide := func(key string, want algorithms.Decision) {
		t.Helper()
		got, err := s.Decide(ctx, store.Key{Namespace: "fb", ID: key}, alg, algorithms.Request{Now: now, Cost: 1})
		if err != nil || got.Allowed != want.Allowed || got.Remaining != want.Remaining {
			t.Fatalf("Decide(%s) = %+v, %v; want allowed %v, remaining %d", key, got, err, want.Allowed, want.Remaining)
		}
	}

	// State written by Update: the decide function reads it.
	k := store.Key{Namespace: "fb", ID: "updated"}
	if err := s.Update(ctx, k, now, func(_ []byte, now int64) ([]byte, int64, error) {
		st, err := alg.Decide(nil, algorithms.Request{Now: now, Cost: 3})
		return st.Next, st.TTL, err
	}); err != nil {
		t.Fatal(err)
	}
	decide("updated", algorithms.Decision{Allowed: true, Remaining: 0})
	decide("updated", algorithms.Decision{Allowed: false, Remaining: 0})

	// The row form dropped: every decision still decides, the first
	// inserting the row, the next ones on it.
	row := forms.SQLRowFunction("gcra")
	var sig string
	if err := p.QueryRow(ctx, "SELECT oid::regprocedure::text FROM pg_proc WHERE proname = $1 AND pronamespace = $2::regnamespace", row, schema).Scan(&sig); err != nil {
		t.Fatal(err)
	}
	decide("dropped", algorithms.Decision{Allowed: true, Remaining: 3})
	if _, err := p.Exec(ctx, "DROP FUNCTION "+sig); err != nil {
		t.Fatal(err)
	}
	for i := 2; i >= 0; i-- {
		decide("dropped", algorithms.Decision{Allowed: true, Remaining: int64(i)})
	}
	decide("dropped", algorithms.Decision{Allowed: false, Remaining: 0})
	// Migrate puts it back.
	if err := s.Migrate(ctx); err != nil {
		t.Fatal(err)
	}
	var n int
	if err := p.QueryRow(ctx, "SELECT count(*) FROM pg_proc WHERE proname = $1", row).Scan(&n); err != nil || n == 0 {
		t.Fatalf("%s after Migrate: %d functions (%v)", row, n, err)
	}
}

package postgres_test

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/ratelimitkit/ratelimit/internal/testserver"
	"github.com/ratelimitkit/ratelimit/store/postgres"
)

// testPool is the *pgxpool.Pool most applications pass to the store, with a
// helper the tests use to inspect tables.
type testPool struct{ *pgxpool.Pool }

// Compile-time proof that every documented client satisfies DB.
var (
	_ postgres.DB = (*pgxpool.Pool)(nil)
	_ postgres.DB = (*pgx.Conn)(nil)
	_ postgres.DB = pgx.Tx(nil)
)

// newTestPool connects to RATELIMIT_POSTGRES_URL (skipping the test when it
// is unset, failing under CI) and closes the pool when the test ends.
func newTestPool(t testing.TB, size int) *testPool {
	t.Helper()
	return newTestPoolURL(t, testserver.PostgresURL(t), size)
}

func newTestPoolURL(t testing.TB, url string, size int) *testPool {
	t.Helper()
	cfg, err := pgxpool.ParseConfig(url)
	if err != nil {
		t.Fatalf("pgxpool.ParseConfig(%q): %v", url, err)
	}
	cfg.MaxConns = int32(size)
	cfg.ConnConfig.ConnectTimeout = 5 * time.Second
	pool, err := pgxpool.NewWithConfig(context.Background(), cfg)
	if err != nil {
		t.Fatalf("pgxpool.NewWithConfig: %v", err)
	}
	t.Cleanup(pool.Close)
	return &testPool{pool}
}

// Query returns every row of a query as values; the tests use it to inspect
// tables.
func (p *testPool) Query(ctx context.Context, sql string, args ...any) ([][]any, error) {
	rows, err := p.Pool.Query(ctx, sql, args...)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out [][]any
	for rows.Next() {
		v, err := rows.Values()
		if err != nil {
			return nil, err
		}
		out = append(out, v)
	}
	return out, rows.Err()
}

// errRow is a pgx.Row whose Scan fails with err.
type errRow struct{ err error }

func (r errRow) Scan(...any) error { return r.err }

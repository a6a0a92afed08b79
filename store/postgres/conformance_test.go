package postgres_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/ratelimitkit/ratelimit/algorithms/forms"
	"github.com/ratelimitkit/ratelimit/conformance"
	"github.com/ratelimitkit/ratelimit/internal/testserver"
	"github.com/ratelimitkit/ratelimit/store"
	"github.com/ratelimitkit/ratelimit/store/postgres"
)

var tableSeq atomic.Int64

// newTable returns a table name no other test uses; the table and its
// function are dropped when t ends.
func newTable(t testing.TB, p *testPool, prefix string) string {
	t.Helper()
	name := fmt.Sprintf("%s_%d_%d", prefix, time.Now().UnixNano()%1e9, tableSeq.Add(1))
	t.Cleanup(func() { dropTable(t, p, name) })
	return name
}

func dropTable(t testing.TB, p *testPool, name string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	table := pgx.Identifier{name}.Sanitize()
	if _, err := p.Exec(ctx, "DROP TABLE IF EXISTS "+table); err != nil {
		t.Errorf("drop table %s: %v", table, err)
	}
	for _, fn := range []string{pgx.Identifier{name + "_lease"}.Sanitize(), pgx.Identifier{name + "_decide_all"}.Sanitize()} {
		if _, err := p.Exec(ctx, "DROP FUNCTION IF EXISTS "+fn); err != nil {
			t.Errorf("drop function %s: %v", fn, err)
		}
	}
	for _, b := range forms.Builtins() {
		fn := pgx.Identifier{name + "_decide_" + b.Name}.Sanitize()
		if _, err := p.Exec(ctx, "DROP FUNCTION IF EXISTS "+fn); err != nil {
			t.Errorf("drop function %s: %v", fn, err)
		}
	}
}

// newStore creates a migrated store on a fresh table of p. The store is
// on p's *pgxpool.Pool, as a user's is, not on the testPool, whose Query
// (rows as values, for the tests) hides the pool's and so would make the
// store unable to Export.
func newStore(t testing.TB, p *testPool, opts ...postgres.Option) *postgres.Store {
	t.Helper()
	name := newTable(t, p, "rl_test")
	s, err := postgres.New(p.Pool, append([]postgres.Option{postgres.WithTable(name)}, opts...)...)
	if err != nil {
		t.Fatalf("postgres.New: %v", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := s.Migrate(ctx); err != nil {
		t.Fatalf("store.Migrate: %v", err)
	}
	return s
}

// expiries lists the rows of s's table with their expiry.
func expiries(p *testPool, s *postgres.Store) func(ctx context.Context) ([]conformance.Expiry, error) {
	return func(ctx context.Context) ([]conformance.Expiry, error) {
		rows, err := p.Query(ctx, "SELECT key, expires_at FROM "+s.Table()+" ORDER BY key")
		if err != nil {
			return nil, err
		}
		var list []conformance.Expiry
		for _, r := range rows {
			key, _ := r[0].([]byte)
			e := conformance.Expiry{Key: string(key)}
			if at, ok := r[1].(int64); ok {
				e.At = time.UnixMicro(at)
			} else {
				e.Never = true
			}
			list = append(list, e)
		}
		return list, nil
	}
}

// harness returns the conformance harness for s, a store on the limiter's
// clock, with a server-clock twin on the same table.
func harness(t *testing.T, p *testPool, s *postgres.Store) conformance.Harness {
	return conformance.Harness{
		Store:    s,
		Expiries: expiries(p, s),
		State:    state(p, s),
		ServerClock: func(t *testing.T) store.Store {
			// The same table (its generated name needs no quoting).
			sc, err := postgres.New(p.Pool, postgres.WithTable(strings.Trim(s.Table(), `"`)))
			if err != nil {
				t.Fatalf("postgres.New: %v", err)
			}
			return sc
		},
		DecidesAllBuiltins: true,
	}
}

// state reads a key's row of s's table as the Go form encodes its state:
// the bigint[] a SQL form wrote, or the bytes Update wrote.
func state(p *testPool, s *postgres.Store) func(ctx context.Context, key store.Key) ([]byte, int64, error) {
	return func(ctx context.Context, key store.Key) ([]byte, int64, error) {
		var (
			vals    []int64
			raw     []byte
			expires int64
		)
		err := p.QueryRow(ctx, "SELECT vals, state, expires_at FROM "+s.Table()+" WHERE key = $1",
			[]byte(key.String())).Scan(&vals, &raw, &expires)
		if errors.Is(err, pgx.ErrNoRows) {
			return nil, 0, nil
		}
		if err != nil {
			return nil, 0, err
		}
		if vals != nil {
			raw = fromVals(vals)
		}
		return raw, expires, nil
	}
}

// twin returns a factory of stores on s's table through a new pool.
func twin(s *postgres.Store, opts ...postgres.Option) func(t *testing.T) store.Store {
	return func(t *testing.T) store.Store {
		t2, err := postgres.New(newTestPool(t, 8).Pool, append([]postgres.Option{postgres.WithTable(strings.Trim(s.Table(), `"`))}, opts...)...)
		if err != nil {
			t.Fatalf("postgres.New: %v", err)
		}
		return t2
	}
}

func TestConformance(t *testing.T) {
	p := newTestPool(t, 32)
	conformance.Run(t, func(t *testing.T) conformance.Harness {
		s := newStore(t, p, postgres.WithServerClock(false))
		h := harness(t, p, s)
		h.Twin = twin(s, postgres.WithServerClock(false))
		h.Freeze = frozen
		return h
	})
}

// frozen is the conformance harness's Freeze: a store on a fresh table,
// through a pool of its own whose connections a testserver.Freezer
// freezes (the shared server cannot be stopped with SIGSTOP: other tests
// use it), so that the FaultHungStore group holds every call to its bound
// on connections that stay open and answer nothing, new ones included.
func frozen(t *testing.T) (store.Store, func()) {
	f := testserver.NewFreezer(t)
	cfg, err := pgxpool.ParseConfig(testserver.PostgresURL(t))
	if err != nil {
		t.Fatalf("pgxpool.ParseConfig: %v", err)
	}
	cfg.MaxConns = 8
	cfg.ConnConfig.DialFunc = f.Dial
	pool, err := pgxpool.NewWithConfig(context.Background(), cfg)
	if err != nil {
		t.Fatalf("pgxpool.NewWithConfig: %v", err)
	}
	// The table is made and dropped through a pool that never freezes;
	// the frozen pool closes first (cleanups run last first), which ends
	// its sessions and their locks before the drop.
	name := newTable(t, newTestPool(t, 2), "rl_frozen")
	t.Cleanup(pool.Close)
	s, err := postgres.New(pool, postgres.WithTable(name), postgres.WithServerClock(false))
	if err != nil {
		t.Fatalf("postgres.New: %v", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := s.Migrate(ctx); err != nil {
		t.Fatalf("store.Migrate: %v", err)
	}
	return s, f.Freeze
}

// TestConformanceUnlogged runs the suite on an UNLOGGED table.
func TestConformanceUnlogged(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: the logged table's run covers the same code")
	}
	p := newTestPool(t, 32)
	conformance.Run(t, func(t *testing.T) conformance.Harness {
		s := newStore(t, p, postgres.WithServerClock(false), postgres.WithUnlogged())
		h := harness(t, p, s)
		h.Twin = twin(s, postgres.WithServerClock(false), postgres.WithUnlogged())
		return h
	})
}

package postgres_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/ratelimitkit/ratelimit/internal/testserver"
	"github.com/ratelimitkit/ratelimit/store/postgres"
)

// testPool is a small connection pool over *pgx.Conn, used by these tests
// in place of *pgxpool.Pool: the SDK's go.mod does not require
// github.com/jackc/puddle/v2, which pgxpool imports, and this module's tests
// may not add it. It behaves like pgxpool where the store can tell: a
// connection is used by one caller at a time, returned after Scan, Commit or
// Rollback, and discarded when it is closed, busy or left in a transaction,
// so the pool recovers from dead connections by dialling new ones. The
// benchmarks in the bench module use a real *pgxpool.Pool.
type testPool struct {
	cfg  *pgx.ConnConfig
	sem  chan struct{} // one token per connection in use
	idle chan idleConn // connections ready for reuse

	mu   sync.Mutex
	open int // connections dialled and not yet closed
}

var _ postgres.DB = (*testPool)(nil)

// Compile-time proof that the other documented clients satisfy DB.
var (
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
	cfg, err := pgx.ParseConfig(url)
	if err != nil {
		t.Fatalf("pgx.ParseConfig(%q): %v", url, err)
	}
	cfg.ConnectTimeout = 5 * time.Second
	p := &testPool{cfg: cfg, sem: make(chan struct{}, size), idle: make(chan idleConn, size)}
	t.Cleanup(p.Close)
	return p
}

func (p *testPool) acquire(ctx context.Context) (*pgx.Conn, error) {
	select {
	case p.sem <- struct{}{}:
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	for {
		select {
		case ic := <-p.idle:
			// Like pgxpool, ping a connection that sat idle for a
			// second, so that one broken meanwhile is not used.
			if !ic.c.IsClosed() && (time.Since(ic.at) < time.Second || ic.c.Ping(ctx) == nil) {
				return ic.c, nil
			}
			p.closed(ic.c)
			continue
		default:
		}
		break
	}
	c, err := pgx.ConnectConfig(ctx, p.cfg)
	if err != nil {
		<-p.sem
		return nil, err
	}
	p.mu.Lock()
	p.open++
	p.mu.Unlock()
	return c, nil
}

func (p *testPool) release(c *pgx.Conn) {
	defer func() { <-p.sem }()
	if c.IsClosed() || c.PgConn().IsBusy() || c.PgConn().TxStatus() != 'I' {
		p.closed(c)
		return
	}
	select {
	case p.idle <- idleConn{c, time.Now()}:
	default:
		p.closed(c)
	}
}

func (p *testPool) closed(c *pgx.Conn) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	_ = c.Close(ctx)
	p.mu.Lock()
	p.open--
	p.mu.Unlock()
}

// Open reports how many connections the pool holds.
func (p *testPool) Open() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.open
}

// Close closes the idle connections. Connections in use are closed when
// they are released.
func (p *testPool) Close() {
	for {
		select {
		case ic := <-p.idle:
			p.closed(ic.c)
		default:
			return
		}
	}
}

func (p *testPool) Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error) {
	c, err := p.acquire(ctx)
	if err != nil {
		return pgconn.CommandTag{}, err
	}
	defer p.release(c)
	return c.Exec(ctx, sql, args...)
}

func (p *testPool) QueryRow(ctx context.Context, sql string, args ...any) pgx.Row {
	c, err := p.acquire(ctx)
	if err != nil {
		return errRow{err}
	}
	return &poolRow{row: c.QueryRow(ctx, sql, args...), release: func() { p.release(c) }}
}

// Query is not part of postgres.DB; the tests use it to inspect tables.
func (p *testPool) Query(ctx context.Context, sql string, args ...any) ([][]any, error) {
	c, err := p.acquire(ctx)
	if err != nil {
		return nil, err
	}
	defer p.release(c)
	rows, err := c.Query(ctx, sql, args...)
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

func (p *testPool) Begin(ctx context.Context) (pgx.Tx, error) {
	c, err := p.acquire(ctx)
	if err != nil {
		return nil, err
	}
	tx, err := c.Begin(ctx)
	if err != nil {
		p.release(c)
		return nil, err
	}
	pt := &poolTx{Tx: tx}
	pt.release = func() { pt.once.Do(func() { p.release(c) }) }
	return pt, nil
}

type idleConn struct {
	c  *pgx.Conn
	at time.Time
}

type errRow struct{ err error }

func (r errRow) Scan(...any) error { return r.err }

type poolRow struct {
	row     pgx.Row
	release func()
}

func (r *poolRow) Scan(dest ...any) error {
	defer r.release()
	return r.row.Scan(dest...)
}

type poolTx struct {
	pgx.Tx
	once    sync.Once
	release func()
}

func (t *poolTx) Commit(ctx context.Context) error {
	defer t.release()
	return t.Tx.Commit(ctx)
}

func (t *poolTx) Rollback(ctx context.Context) error {
	defer t.release()
	return t.Tx.Rollback(ctx)
}

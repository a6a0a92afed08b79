package postgres_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/url"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/ratelimitkit/ratelimit"
	"github.com/ratelimitkit/ratelimit/algorithms"
	"github.com/ratelimitkit/ratelimit/clock"
	"github.com/ratelimitkit/ratelimit/internal/testserver"
	"github.com/ratelimitkit/ratelimit/store"
	"github.com/ratelimitkit/ratelimit/store/postgres"
)

// The failure tests run against the real server: a decision's connection
// killed by the server, a statement timeout, a context deadline that passes
// while a row lock is held elsewhere, and the server unreachable and back
// again (through an in-process TCP proxy that can be cut). Each checks
// that the error comes back in time, prefixed and wrapping the backend's
// error, that the limiter's failure policy applies with the error still
// returned, that nothing half-done is stored, that the same pool recovers,
// and that no goroutine is left behind.

var failureStart = time.Date(2040, 1, 1, 0, 0, 0, 0, time.UTC)

// failureFixture is a store with a fail-closed and a fail-open limiter on
// the same keys (fixed window of 5 per hour on a fake clock).
type failureFixture struct {
	s            *postgres.Store
	closed, open *ratelimit.Limiter
}

func newFailureFixture(t *testing.T, p *testPool, store func(*postgres.Store) store.Store) failureFixture {
	t.Helper()
	s := newStore(t, p, postgres.WithServerClock(false))
	alg := algorithms.FixedWindow(5, time.Hour)
	fake := clock.NewFake(failureStart)
	return failureFixture{
		s:      s,
		closed: newLimiter(t, store(s), alg, ratelimit.WithClock(fake), ratelimit.WithName("f")),
		open:   newLimiter(t, store(s), alg, ratelimit.WithClock(fake), ratelimit.WithName("f"), ratelimit.WithFailurePolicy(ratelimit.FailOpen)),
	}
}

func asStore(s *postgres.Store) store.Store  { return s }
func asUpdate(s *postgres.Store) store.Store { return updateOnly{s} }

var bothPaths = []struct {
	name  string
	store func(*postgres.Store) store.Store
}{{"server", asStore}, {"update", asUpdate}}

// rowLock holds the row lock of key in s's table on a connection of its
// own, as a long transaction elsewhere would. release rolls it back.
func rowLock(t *testing.T, s *postgres.Store, key []byte) (release func()) {
	t.Helper()
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, testserver.PostgresURL(t))
	if err != nil {
		t.Fatal(err)
	}
	tx, err := conn.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	tag, err := tx.Exec(ctx, "SELECT 1 FROM "+s.Table()+" WHERE key = $1 FOR UPDATE", key)
	if err != nil || tag.RowsAffected() != 1 {
		t.Fatalf("locking the row: %v, %d rows", err, tag.RowsAffected())
	}
	var once sync.Once
	release = func() {
		once.Do(func() {
			_ = tx.Rollback(ctx)
			_ = conn.Close(ctx)
		})
	}
	t.Cleanup(release)
	return release
}

// waitingBackend returns the pid of the backend waiting for a row lock of
// s's table, waiting up to 5s for it to appear.
func waitingBackend(t *testing.T, admin *pgx.Conn, table string) int32 {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for time.Now().Before(deadline) {
		var pid int32
		// Only a statement on this test's table: on a shared server other
		// tests' backends wait for locks too (migrations, their own rows).
		err := admin.QueryRow(context.Background(), `SELECT pid FROM pg_stat_activity
			WHERE wait_event_type = 'Lock' AND pid <> pg_backend_pid() AND datname = current_database()
			AND strpos(query, $1) > 0
			ORDER BY query_start LIMIT 1`, table).Scan(&pid)
		if err == nil {
			return pid
		}
		time.Sleep(10 * time.Millisecond)
	}
	t.Fatal("no backend is waiting for the row lock")
	return 0
}

type result struct {
	d       ratelimit.Decision
	err     error
	elapsed time.Duration
}

func allowAsync(ctx context.Context, lim *ratelimit.Limiter, key string) <-chan result {
	ch := make(chan result, 1)
	go func() {
		start := time.Now()
		d, err := lim.Allow(ctx, key)
		ch <- result{d, err, time.Since(start)}
	}()
	return ch
}

func await(t *testing.T, ch <-chan result, within time.Duration) result {
	t.Helper()
	select {
	case r := <-ch:
		return r
	case <-time.After(within):
		t.Fatalf("lim.Allow did not return within %v", within)
		return result{}
	}
}

// checkFailed checks a failed decision: an error prefixed "postgres:",
// and the verdict the limiter's policy prescribes.
func checkFailed(t *testing.T, what string, r result, failOpen bool) {
	t.Helper()
	if r.err == nil {
		t.Errorf("%s: lim.Allow = %+v with no error, want an error", what, r.d)
		return
	}
	if !strings.HasPrefix(r.err.Error(), "postgres: ") {
		t.Errorf("%s: error %q does not start with \"postgres: \"", what, r.err)
	}
	if r.d.Allowed != failOpen {
		t.Errorf("%s: lim.Allow = %s with error %v, want %s by the failure policy", what, verdict(r.d.Allowed), r.err, verdict(failOpen))
	}
}

func verdict(b bool) string {
	if b {
		return "allowed"
	}
	return "denied"
}

// checkRemaining checks, through a fresh request, that the key has had
// exactly spent requests admitted.
func checkRemaining(t *testing.T, lim *ratelimit.Limiter, key string, spent int) {
	t.Helper()
	d, err := lim.Peek(context.Background(), key)
	if err != nil {
		t.Fatalf("lim.Peek(%q) after recovery: %v (the pool did not recover)", key, err)
	}
	if d.Remaining != 5-spent {
		t.Errorf("lim.Peek(%q) after recovery = remaining %d, want %d: a failed decision left state behind", key, d.Remaining, 5-spent)
	}
}

// noLeaks fails t if goroutines started during the test outlive it.
func noLeaks(t *testing.T) {
	t.Helper()
	before := runtime.NumGoroutine()
	t.Cleanup(func() {
		deadline := time.Now().Add(5 * time.Second)
		for runtime.NumGoroutine() > before && time.Now().Before(deadline) {
			time.Sleep(20 * time.Millisecond)
		}
		if n := runtime.NumGoroutine(); n > before {
			buf := make([]byte, 1<<16)
			t.Errorf("%d goroutines before the test, %d after:\n%s", before, n, buf[:runtime.Stack(buf, true)])
		}
	})
}

// TestFailureWhileLocked runs decisions while another transaction holds
// the key's row lock and fails them each way of the table: the error comes
// back in time, prefixed and wrapping the backend's error, with the
// limiter's failure policy applied; the failed decision is not applied,
// also after the lock is released (a decision whose deadline passed gave
// the server its deadline as lock_timeout); the same pool serves the next
// decision.
func TestFailureWhileLocked(t *testing.T) {
	faults := []struct {
		name string
		// pool is the pool the decisions run on.
		pool func(t *testing.T) *testPool
		// deadline is the decision's context deadline.
		deadline time.Duration
		// fail, unless nil, fails the decision that waits for the lock.
		fail func(t *testing.T, f failureFixture)
		// check checks the failed decision's error and time.
		check func(t *testing.T, r result)
	}{{
		// The server kills the decision's backend (pg_terminate_backend
		// from another connection).
		name:     "connection killed",
		pool:     func(t *testing.T) *testPool { return newTestPool(t, 4) },
		deadline: 10 * time.Second,
		fail: func(t *testing.T, f failureFixture) {
			admin, err := pgx.Connect(context.Background(), testserver.PostgresURL(t))
			if err != nil {
				t.Fatal(err)
			}
			defer admin.Close(context.Background())
			pid := waitingBackend(t, admin, strings.Trim(f.s.Table(), `"`))
			if _, err := admin.Exec(context.Background(), "SELECT pg_terminate_backend($1)", pid); err != nil {
				t.Fatal(err)
			}
		},
		check: func(t *testing.T, r result) {
			var pe *pgconn.PgError
			if errors.As(r.err, &pe) && pe.Code != "57P01" {
				t.Errorf("error %v has SQLSTATE %s, want 57P01 (admin shutdown)", r.err, pe.Code)
			}
		},
	}, {
		// The connections have a server statement_timeout of 200ms.
		name: "statement timeout",
		pool: func(t *testing.T) *testPool {
			u, err := url.Parse(testserver.PostgresURL(t))
			if err != nil {
				t.Fatal(err)
			}
			q := u.Query()
			q.Set("statement_timeout", "200")
			u.RawQuery = q.Encode()
			return newTestPoolURL(t, u.String(), 4)
		},
		deadline: 10 * time.Second,
		check: func(t *testing.T, r result) {
			var pe *pgconn.PgError
			if !errors.As(r.err, &pe) || pe.Code != "57014" {
				t.Errorf("error %v does not wrap a *pgconn.PgError with SQLSTATE 57014 (query_canceled)", r.err)
			}
			if r.elapsed > 2*time.Second {
				t.Errorf("lim.Allow returned after %v, want about the 200ms statement timeout", r.elapsed)
			}
		},
	}, {
		// The decision's context deadline passes.
		name:     "deadline",
		pool:     func(t *testing.T) *testPool { return newTestPool(t, 4) },
		deadline: 300 * time.Millisecond,
		check: func(t *testing.T, r result) {
			if !errors.Is(r.err, context.DeadlineExceeded) {
				t.Errorf("error %v does not wrap context.DeadlineExceeded", r.err)
			}
			if r.elapsed > 300*time.Millisecond+time.Second {
				t.Errorf("lim.Allow returned after %v, want about the 300ms deadline", r.elapsed)
			}
		},
	}}
	for _, fault := range faults {
		t.Run(fault.name, func(t *testing.T) {
			noLeaks(t)
			p := fault.pool(t)
			for _, path := range bothPaths {
				t.Run(path.name, func(t *testing.T) {
					f := newFailureFixture(t, p, path.store)
					allow(t, f.closed, "k", 1)
					release := rowLock(t, f.s, []byte(f.closed.Namespace()+":k"))
					for _, lim := range []*ratelimit.Limiter{f.closed, f.open} {
						ctx, cancel := context.WithTimeout(context.Background(), fault.deadline)
						ch := allowAsync(ctx, lim, "k")
						if fault.fail != nil {
							fault.fail(t, f)
						}
						r := await(t, ch, 5*time.Second)
						cancel()
						checkFailed(t, fault.name, r, lim == f.open)
						fault.check(t, r)
					}
					time.Sleep(200 * time.Millisecond) // let the server notice too
					release()
					time.Sleep(200 * time.Millisecond) // an abandoned decision would run now
					checkRemaining(t, f.closed, "k", 1)
					allow(t, f.closed, "k", 1)
					checkRemaining(t, f.closed, "k", 2)
				})
			}
		})
	}
}

// TestFailureServerGone puts a TCP proxy between the pool and the server
// and cuts it: as if the server stopped (connections reset, new ones
// refused) and then stalls it (the server hangs); then restores it. The
// same pool recovers.
func TestFailureServerGone(t *testing.T) {
	noLeaks(t)
	target := testserver.PostgresURL(t)
	u, err := url.Parse(target)
	if err != nil {
		t.Fatal(err)
	}
	px := startProxy(t, u.Host)
	u.Host = px.addr
	p := newTestPoolURL(t, u.String(), 4)
	direct := newTestPool(t, 2)
	for _, path := range bothPaths {
		t.Run(path.name, func(t *testing.T) {
			f := newFailureFixture(t, direct, path.store)
			// The same table, reached through the proxy.
			ps, err := postgres.New(p, postgres.WithTable(strings.Trim(f.s.Table(), `"`)), postgres.WithServerClock(false))
			if err != nil {
				t.Fatal(err)
			}
			fake := clock.NewFake(failureStart)
			alg := algorithms.FixedWindow(5, time.Hour)
			closed := newLimiter(t, path.store(ps), alg, ratelimit.WithClock(fake), ratelimit.WithName("f"))
			open := newLimiter(t, path.store(ps), alg, ratelimit.WithClock(fake), ratelimit.WithName("f"), ratelimit.WithFailurePolicy(ratelimit.FailOpen))
			allow(t, closed, "k", 1)

			// Stopped: connections are reset and new ones refused.
			px.cut()
			for _, lim := range []*ratelimit.Limiter{closed, open} {
				for i := 0; i < 3; i++ {
					ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
					r := await(t, allowAsync(ctx, lim, "k"), 5*time.Second)
					cancel()
					checkFailed(t, fmt.Sprintf("server gone, attempt %d", i), r, lim == open)
					if r.elapsed > 2*time.Second+500*time.Millisecond {
						t.Errorf("lim.Allow with the server gone returned after %v, past the 2s deadline", r.elapsed)
					}
				}
			}
			px.restore()
			checkRemaining(t, closed, "k", 1)
			allow(t, closed, "k", 1)

			// Hung: the connection stays open but nothing comes back.
			px.stall(true)
			for _, lim := range []*ratelimit.Limiter{closed, open} {
				const deadline = 500 * time.Millisecond
				ctx, cancel := context.WithTimeout(context.Background(), deadline)
				r := await(t, allowAsync(ctx, lim, "k"), 5*time.Second)
				cancel()
				checkFailed(t, "server hung", r, lim == open)
				if !errors.Is(r.err, context.DeadlineExceeded) {
					t.Errorf("server hung: error %v does not wrap context.DeadlineExceeded", r.err)
				}
				if r.elapsed > deadline+time.Second {
					t.Errorf("server hung: lim.Allow returned after %v, want about the %v deadline", r.elapsed, deadline)
				}
			}
			px.stall(false)
			px.cut() // drop the stalled connections, as a restarted server would
			px.restore()
			// A stalled decision reached the server and may have been
			// applied (an error means the outcome is unknown); it was
			// applied whole or not at all.
			d, err := closed.Peek(context.Background(), "k")
			if err != nil {
				t.Fatalf("lim.Peek after the server came back: %v (the pool did not recover)", err)
			}
			if d.Remaining != 3 && d.Remaining != 2 && d.Remaining != 1 {
				t.Errorf("after two stalled decisions, remaining %d, want 3, 2 or 1", d.Remaining)
			}
			if d := allow(t, closed, "k", 1); !d.Allowed {
				t.Errorf("lim.Allow after the server came back = denied, want allowed")
			}

			// Unreachable while the decision waits for a row lock held
			// elsewhere: the client cannot send a cancel request, so
			// only the server-side bound on the lock wait (the context's
			// deadline, passed with the decision) keeps the abandoned
			// decision from being applied once the lock is released.
			before, err := closed.Peek(context.Background(), "k")
			if err != nil {
				t.Fatal(err)
			}
			release := rowLock(t, f.s, []byte(closed.Namespace()+":k"))
			const deadline = 500 * time.Millisecond
			ctx, cancel := context.WithTimeout(context.Background(), deadline)
			ch := allowAsync(ctx, closed, "k")
			time.Sleep(150 * time.Millisecond) // the decision now waits for the lock
			px.cut()
			r := await(t, ch, 5*time.Second)
			cancel()
			checkFailed(t, "unreachable while locked", r, false)
			time.Sleep(deadline) // past the deadline: the server gave up the wait
			release()
			px.restore()
			time.Sleep(200 * time.Millisecond) // an abandoned decision would run now
			checkRemaining(t, closed, "k", 5-before.Remaining)
		})
	}
	p.Close()
	px.close()
}

// proxy is an in-process TCP proxy to the real server that a test can cut
// (close every connection and refuse new ones), stall (stop forwarding
// bytes) and restore.
type proxy struct {
	t      *testing.T
	target string
	addr   string

	mu      sync.Mutex
	ln      net.Listener
	conns   map[net.Conn]struct{}
	stalled bool
	resume  chan struct{} // closed when a stall ends
	wg      sync.WaitGroup
}

func startProxy(t *testing.T, target string) *proxy {
	t.Helper()
	px := &proxy{t: t, target: target, conns: map[net.Conn]struct{}{}, resume: make(chan struct{})}
	close(px.resume)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	px.addr = ln.Addr().String()
	px.serve(ln)
	t.Cleanup(px.close)
	return px
}

func (px *proxy) serve(ln net.Listener) {
	px.mu.Lock()
	px.ln = ln
	px.mu.Unlock()
	px.wg.Add(1)
	go func() {
		defer px.wg.Done()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			s, err := net.Dial("tcp", px.target)
			if err != nil {
				c.Close()
				continue
			}
			px.mu.Lock()
			px.conns[c], px.conns[s] = struct{}{}, struct{}{}
			px.mu.Unlock()
			px.wg.Add(2)
			go px.pipe(c, s)
			go px.pipe(s, c)
		}
	}()
}

func (px *proxy) pipe(dst, src net.Conn) {
	defer px.wg.Done()
	buf := make([]byte, 32<<10)
	for {
		n, err := src.Read(buf)
		if n > 0 {
			px.mu.Lock()
			resume := px.resume
			px.mu.Unlock()
			<-resume
			if _, werr := dst.Write(buf[:n]); werr != nil {
				break
			}
		}
		if err != nil {
			break
		}
	}
	if err := dst.Close(); err != nil && !errors.Is(err, net.ErrClosed) && !errors.Is(err, io.EOF) {
		px.t.Logf("proxy: %v", err)
	}
	src.Close()
	px.mu.Lock()
	delete(px.conns, dst)
	delete(px.conns, src)
	px.mu.Unlock()
}

// cut closes the listener and every connection.
func (px *proxy) cut() {
	px.mu.Lock()
	defer px.mu.Unlock()
	if px.ln != nil {
		px.ln.Close()
		px.ln = nil
	}
	for c := range px.conns {
		c.Close()
	}
	if px.stalled {
		px.stalled = false
		close(px.resume)
	}
}

// restore listens again on the same address.
func (px *proxy) restore() {
	var ln net.Listener
	var err error
	for i := 0; i < 50; i++ {
		if ln, err = net.Listen("tcp", px.addr); err == nil {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	if err != nil {
		px.t.Fatalf("proxy: listen again on %s: %v", px.addr, err)
	}
	px.serve(ln)
}

// stall stops (true) or resumes (false) forwarding bytes.
func (px *proxy) stall(on bool) {
	px.mu.Lock()
	defer px.mu.Unlock()
	if on == px.stalled {
		return
	}
	px.stalled = on
	if on {
		px.resume = make(chan struct{})
	} else {
		close(px.resume)
	}
}

// close cuts the proxy and waits for its goroutines.
func (px *proxy) close() {
	px.cut()
	px.wg.Wait()
}

package ratelimit_test

import (
	"context"
	"errors"
	"net"
	"reflect"
	"sync"
	"syscall"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/ratelimitkit/ratelimit"
	"github.com/ratelimitkit/ratelimit/algorithms"
	"github.com/ratelimitkit/ratelimit/clock"
	"github.com/ratelimitkit/ratelimit/internal/testserver"
	"github.com/ratelimitkit/ratelimit/store/memory"
	rlredis "github.com/ratelimitkit/ratelimit/store/redis"
)

// recorder is an Observer that keeps every event.
type recorder struct {
	mu     sync.Mutex
	events []ratelimit.Event
}

func (r *recorder) ObserveDecision(_ context.Context, e ratelimit.Event) {
	r.mu.Lock()
	r.events = append(r.events, e)
	r.mu.Unlock()
}

// last returns the latest event.
func (r *recorder) last(t *testing.T) ratelimit.Event {
	t.Helper()
	r.mu.Lock()
	defer r.mu.Unlock()
	if len(r.events) == 0 {
		t.Fatal("the observer saw no event")
	}
	return r.events[len(r.events)-1]
}

// privateRedis starts a redis-server of the test's own, which it may stop
// or freeze, and returns a store on it that uses the limiter's clock. With
// fast set, the client gives up at once on a refused connection instead of
// retrying (go-redis dials 5 times and retries commands 3 times by
// default).
func privateRedis(t *testing.T, fast bool) (*testserver.Redis, *rlredis.Store, *goredis.Client) {
	t.Helper()
	srv := testserver.StartRedis(t)
	opts := &goredis.Options{Addr: srv.Addr(), ContextTimeoutEnabled: true}
	if fast {
		opts.MaxRetries, opts.DialerRetries = -1, 1
	}
	c := goredis.NewClient(opts)
	t.Cleanup(func() { c.Close() })
	store, err := rlredis.New(c, rlredis.WithServerClock(false))
	if err != nil {
		t.Fatal(err)
	}
	return srv, store, c
}

// step is one call in an outage scenario and what it must return.
type step struct {
	what    string // what happens to the store before the call, for messages
	allowed bool
	source  ratelimit.Source
	errIs   []error // the error must wrap each; none means no error
	called  bool    // whether the call reached the store
}

func (s step) check(t *testing.T, i int, d ratelimit.Decision, err error, e ratelimit.Event) {
	t.Helper()
	if d.Allowed != s.allowed || d.Source != s.source {
		t.Errorf("call %d (%s): lim.Allow = allowed %v from %v, want allowed %v from %v (err %v)", i, s.what, d.Allowed, d.Source, s.allowed, s.source, err)
	}
	if len(s.errIs) == 0 && err != nil {
		t.Errorf("call %d (%s): lim.Allow error %v, want none", i, s.what, err)
	}
	for _, target := range s.errIs {
		if !errors.Is(err, target) {
			t.Errorf("call %d (%s): lim.Allow error %v, want one wrapping %v", i, s.what, err, target)
		}
	}
	if e.CalledStore != s.called || !reflect.DeepEqual(e.Decision, d) || !errors.Is(e.Err, err) || (err == nil) != (e.Err == nil) {
		t.Errorf("call %d (%s): observer saw %+v, want called store %v and the decision and error returned", i, s.what, e, s.called)
	}
}

// TestFrozenStore runs a limiter with a time budget, a circuit breaker and
// a fallback through a store that hangs (a frozen server) and comes back.
func TestFrozenStore(t *testing.T) {
	srv, store, client := privateRedis(t, false)
	fake := clock.NewFake(epoch)
	rec := &recorder{}
	// Long enough for a healthy server on a loaded machine, short enough
	// for the test.
	const budget = 300 * time.Millisecond
	lim, err := ratelimit.New(store, algorithms.GCRA(10, time.Second, 10),
		ratelimit.WithName("frozen"), ratelimit.WithClock(fake),
		ratelimit.WithStoreTimeout(budget),
		ratelimit.WithCircuitBreaker(3, 10*time.Second),
		ratelimit.WithFallback(memory.MustNew(), 2), // a burst of 5 per replica
		ratelimit.WithObserver(rec))
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	healthy := step{what: "healthy", allowed: true, source: ratelimit.SourceStore, called: true}
	timedOut := step{what: "frozen", allowed: true, source: ratelimit.SourceFallback, errIs: []error{context.DeadlineExceeded}, called: true}
	open := step{what: "frozen, breaker open", allowed: true, source: ratelimit.SourceFallback, errIs: []error{ratelimit.ErrCircuitOpen, context.DeadlineExceeded}}
	openDenied := open
	openDenied.allowed = false
	steps := []step{healthy, healthy, healthy, healthy}
	steps = append(steps, timedOut, timedOut, timedOut) // 3 failures open the breaker
	steps = append(steps, open, open)                   // the fallback's burst of 5 is spent
	steps = append(steps, openDenied, openDenied)
	for i, s := range steps {
		if i == 4 {
			srv.Freeze()
		}
		start := time.Now()
		d, err := lim.Allow(ctx, "k")
		elapsed := time.Since(start)
		s.check(t, i, d, err, rec.last(t))
		switch {
		case s.called && s.source == ratelimit.SourceFallback:
			if elapsed < budget || elapsed > budget+time.Second {
				t.Errorf("call %d (%s) took %v, want about the budget of %v", i, s.what, elapsed, budget)
			}
			if lat := rec.last(t).StoreLatency; lat < budget {
				t.Errorf("call %d (%s): observer saw a store latency of %v, want at least the budget %v", i, s.what, lat, budget)
			}
		case !s.called && elapsed > budget/2:
			t.Errorf("call %d (%s) took %v with the breaker open, want no wait", i, s.what, elapsed)
		}
		if !d.Allowed && d.RetryAfter <= 0 {
			t.Errorf("call %d (%s): denied with RetryAfter %v, want a wait", i, s.what, d.RetryAfter)
		}
	}

	// A caller whose context has ended gets the failure policy, not the
	// fallback.
	canceled, cancel := context.WithCancel(ctx)
	cancel()
	if d, err := lim.Allow(canceled, "k"); d.Source != ratelimit.SourceFailurePolicy || d.Allowed || !errors.Is(err, ratelimit.ErrCircuitOpen) {
		t.Errorf("lim.Allow with a canceled context, breaker open = %+v, %v; want the failure policy's denial with ErrCircuitOpen", d, err)
	}

	// The store is back, but the breaker stays open for its cool-down.
	srv.Thaw()
	d, err := lim.Allow(ctx, "k")
	openDenied.check(t, len(steps), d, err, rec.last(t))

	// After the cool-down one call probes the store, and it answers. (The
	// server must first be back to answering: a thawed process catches up
	// with what it received while frozen.)
	waitForPing(t, client)
	fake.Advance(10 * time.Second)
	for i := range 3 {
		d, err := lim.Allow(ctx, "k")
		healthy.check(t, len(steps)+1+i, d, err, rec.last(t))
	}
}

// waitForPing waits until the server answers a PING within a second.
func waitForPing(t *testing.T, c *goredis.Client) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		err := c.Ping(ctx).Err()
		cancel()
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("the thawed server does not answer: %v", err)
		}
	}
}

// TestStoppedStore checks the failure policies, without a fallback, on a
// store whose server is down (connections refused), and the recovery of
// the breaker when it comes back, empty.
func TestStoppedStore(t *testing.T) {
	for _, c := range []struct {
		policy  ratelimit.FailurePolicy
		allowed bool
	}{{ratelimit.FailClosed, false}, {ratelimit.FailOpen, true}} {
		srv, store, _ := privateRedis(t, true)
		fake := clock.NewFake(epoch)
		rec := &recorder{}
		lim, err := ratelimit.New(store, algorithms.FixedWindow(3, time.Minute),
			ratelimit.WithClock(fake), ratelimit.WithFailurePolicy(c.policy),
			ratelimit.WithStoreTimeout(time.Second), ratelimit.WithCircuitBreaker(2, time.Minute),
			ratelimit.WithObserver(rec))
		if err != nil {
			t.Fatal(err)
		}
		ctx := context.Background()
		var netErr *net.OpError
		healthy := step{what: "healthy", allowed: true, source: ratelimit.SourceStore, called: true}
		failing := step{what: "stopped", allowed: c.allowed, source: ratelimit.SourceFailurePolicy, errIs: []error{syscall.ECONNREFUSED}, called: true}
		open := step{what: "stopped, breaker open", allowed: c.allowed, source: ratelimit.SourceFailurePolicy, errIs: []error{ratelimit.ErrCircuitOpen, syscall.ECONNREFUSED}}
		steps := []step{healthy, failing, failing, open, open}
		for i, s := range steps {
			if i == 1 {
				srv.Stop()
			}
			d, err := lim.Allow(ctx, "k")
			s.check(t, i, d, err, rec.last(t))
			if s.source == ratelimit.SourceFailurePolicy && !errors.As(err, &netErr) {
				t.Errorf("policy %d call %d (%s): error %v does not reach the client's *net.OpError", c.policy, i, s.what, err)
			}
		}
		srv.Start()
		fake.Advance(time.Minute)
		for i := range 3 {
			d, err := lim.Allow(ctx, "k")
			healthy.check(t, len(steps)+i, d, err, rec.last(t))
		}
	}
}

// TestCallerContextIsNotAStoreFailure checks that requests whose own
// context ends while the store hangs neither open the breaker nor use the
// fallback: the caller gave up, the store was not proven dead.
func TestCallerContextIsNotAStoreFailure(t *testing.T) {
	srv, store, _ := privateRedis(t, false)
	rec := &recorder{}
	lim, err := ratelimit.New(store, algorithms.GCRA(10, time.Second, 10),
		ratelimit.WithCircuitBreaker(2, time.Hour), ratelimit.WithFallback(memory.MustNew(), 1),
		ratelimit.WithObserver(rec))
	if err != nil {
		t.Fatal(err)
	}
	srv.Freeze()
	for i := range 4 {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Millisecond)
		d, err := lim.Allow(ctx, "k")
		cancel()
		e := rec.last(t)
		if !errors.Is(err, context.DeadlineExceeded) || errors.Is(err, ratelimit.ErrCircuitOpen) || !e.CalledStore {
			t.Errorf("call %d with a 30ms context on a frozen store: error %v, called store %v; want the context's error from a store call", i, err, e.CalledStore)
		}
		if d.Source != ratelimit.SourceFailurePolicy || d.Allowed {
			t.Errorf("call %d: decision %+v, want the failure policy's denial", i, d)
		}
	}
}

// TestTierOutage: while a real store is down, a tier's requests are
// decided by the fallback with the tier's numbers divided by the replicas,
// before and after the circuit breaker opens.
func TestTierOutage(t *testing.T) {
	srv, store, _ := privateRedis(t, true)
	fake := clock.NewFake(epoch)
	lim, err := ratelimit.New(store, algorithms.FixedWindow(4, time.Minute),
		ratelimit.WithClock(fake), ratelimit.WithStoreTimeout(time.Second),
		ratelimit.WithCircuitBreaker(2, time.Minute), ratelimit.WithFallback(memory.MustNew(), 2))
	if err != nil {
		t.Fatal(err)
	}
	pro, err := lim.Tier(algorithms.FixedWindow(40, time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if d, err := pro.Allow(ctx, "k"); err != nil || !d.Allowed || d.Source != ratelimit.SourceStore || d.Limit != 40 {
		t.Fatalf("pro.Allow with the store up = %+v, %v; want admitted by the store, limit 40", d, err)
	}
	srv.Stop()
	admitted := 0
	for i := range 30 {
		d, err := pro.Allow(ctx, "k")
		if err == nil || d.Source != ratelimit.SourceFallback || d.Limit != 20 {
			t.Fatalf("call %d: pro.Allow with the store down = %+v, %v; want the fallback's decision with limit 20 (40 / 2 replicas) and the store's error", i, d, err)
		}
		if i >= 2 && !errors.Is(err, ratelimit.ErrCircuitOpen) {
			t.Errorf("call %d: error %v, want the breaker open", i, err)
		}
		if d.Allowed {
			admitted++
		}
	}
	if admitted != 20 {
		t.Errorf("the fallback admitted %d of pro's 30 requests, want 20 (40 / 2 replicas)", admitted)
	}
}

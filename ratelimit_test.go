package ratelimit_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/ratelimitkit/ratelimit"
	"github.com/ratelimitkit/ratelimit/algorithms"
	"github.com/ratelimitkit/ratelimit/clock"
	"github.com/ratelimitkit/ratelimit/store"
	"github.com/ratelimitkit/ratelimit/store/memory"
)

var epoch = time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)

func newLimiter(t *testing.T, alg algorithms.Algorithm, opts ...ratelimit.Option) (*ratelimit.Limiter, *clock.Fake) {
	t.Helper()
	c := clock.NewFake(epoch)
	lim, err := ratelimit.New(memory.MustNew(), alg, append([]ratelimit.Option{ratelimit.WithClock(c)}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	return lim, c
}

func TestNewRejectsBadInput(t *testing.T) {
	st := memory.MustNew()
	gcra := algorithms.GCRA(10, time.Second, 5)
	cases := []struct {
		name  string
		store store.Store
		alg   algorithms.Algorithm
		opts  []ratelimit.Option
		want  string
	}{
		{"nil store", nil, gcra, nil, "nil store"},
		{"nil algorithm", st, nil, nil, "nil algorithm"},
		{"zero limit", st, algorithms.GCRA(0, time.Second, 5), nil, "limit 0 must be positive"},
		{"cost above burst impossible to configure", st, algorithms.TokenBucket(10, time.Second, 0), nil, "burst 0 must be positive"},
		{"bad name", st, gcra, []ratelimit.Option{ratelimit.WithName("a:b")}, `limiter name "a:b"`},
		{"empty name", st, gcra, []ratelimit.Option{ratelimit.WithName("")}, "limiter name"},
		{"nil clock", st, gcra, []ratelimit.Option{ratelimit.WithClock(nil)}, "nil clock"},
		// Typed nils would panic on the first Allow.
		{"typed nil store", (*memory.Store)(nil), gcra, nil, "nil store"},
		{"typed nil clock", st, gcra, []ratelimit.Option{ratelimit.WithClock((*clock.Fake)(nil))}, "nil clock"},
		{"typed nil algorithm", st, (*nilAlgorithm)(nil), nil, "nil algorithm"},
		// A named limiter must not take over an unnamed one's namespace.
		{"derived name", st, gcra, []ratelimit.Option{ratelimit.WithName("p0123456789abcdef")}, "reserved"},
		// A clock the store would ignore.
		{"clock on a server-clock store", serverClockStore{st, true}, gcra, []ratelimit.Option{ratelimit.WithClock(clock.NewFake(epoch))}, "server's clock"},
		{"bad policy", st, gcra, []ratelimit.Option{ratelimit.WithFailurePolicy(7)}, "failure policy 7"},
	}
	for _, c := range cases {
		_, err := ratelimit.New(c.store, c.alg, c.opts...)
		if !errors.Is(err, ratelimit.ErrInvalidParams) || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: ratelimit.New error = %v, want ErrInvalidParams mentioning %q", c.name, err, c.want)
		}
	}
}

// nilAlgorithm is an algorithm whose methods panic on a nil receiver.
type nilAlgorithm struct{ name string }

func (a *nilAlgorithm) Name() string    { return a.name }
func (a *nilAlgorithm) Validate() error { return nil }
func (a *nilAlgorithm) MaxCost() int64  { return 1 }
func (a *nilAlgorithm) Decide([]byte, algorithms.Request) (algorithms.Step, error) {
	return algorithms.Step{}, nil
}

// serverClockStore is a memory store that reports a server clock as
// configured.
type serverClockStore struct {
	*memory.Store
	server bool
}

func (s serverClockStore) ServerClock() bool { return s.server }

// TestClockRule checks that a store on its own clock takes no limiter
// clock, and that one on the limiter's clock takes it.
func TestClockRule(t *testing.T) {
	alg := algorithms.GCRA(10, time.Second, 5)
	fake := clock.NewFake(epoch)
	if _, err := ratelimit.New(serverClockStore{memory.MustNew(), false}, alg, ratelimit.WithClock(fake)); err != nil {
		t.Errorf("ratelimit.New(store on the limiter's clock, WithClock) = %v, want no error", err)
	}
	if _, err := ratelimit.New(serverClockStore{memory.MustNew(), true}, alg); err != nil {
		t.Errorf("ratelimit.New(store on its server's clock, no WithClock) = %v, want no error", err)
	}
	// The system clock is what such a store expects beside it (for Wait).
	if _, err := ratelimit.New(serverClockStore{memory.MustNew(), true}, alg, ratelimit.WithClock(clock.System)); err != nil {
		t.Errorf("ratelimit.New(store on its server's clock, WithClock(clock.System)) = %v, want no error", err)
	}
}

func TestAllowRejectsBadInput(t *testing.T) {
	lim, c := newLimiter(t, algorithms.TokenBucket(10, time.Second, 10))
	ctx := context.Background()
	if _, err := lim.AllowN(ctx, "k", 12); !errors.Is(err, ratelimit.ErrInvalidCost) || !strings.Contains(err.Error(), "cost 12 outside 1..10") {
		t.Errorf("lim.AllowN(key, 12) with burst 10: error %v, want ErrInvalidCost naming both", err)
	}
	if _, err := lim.AllowN(ctx, "k", 0); !errors.Is(err, ratelimit.ErrInvalidCost) {
		t.Errorf("lim.AllowN(key, 0): error %v, want ErrInvalidCost", err)
	}
	if _, err := lim.Allow(ctx, ""); !errors.Is(err, ratelimit.ErrInvalidKey) {
		t.Errorf("lim.Allow(\"\"): error %v, want ErrInvalidKey", err)
	}
	if err := lim.Reset(ctx, strings.Repeat("x", store.MaxKeyLen+1)); !errors.Is(err, ratelimit.ErrInvalidKey) {
		t.Errorf("lim.Reset(oversized key): error %v, want ErrInvalidKey", err)
	}
	c.Set(time.Unix(-5, 0))
	if _, err := lim.Allow(ctx, "k"); !errors.Is(err, ratelimit.ErrInvalidTime) {
		t.Errorf("lim.Allow at a time before 1970: error %v, want ErrInvalidTime", err)
	}
	// Nothing was consumed by the rejected calls.
	c.Set(epoch)
	if d, err := lim.AllowN(ctx, "k", 10); err != nil || !d.Allowed {
		t.Errorf("lim.AllowN(key, 10) after rejected calls = %+v, %v; want allowed", d, err)
	}
}

// failingStore is a store whose backend is down: every call fails.
type failingStore struct{ err error }

func (s failingStore) Update(context.Context, store.Key, int64, store.UpdateFunc) error {
	return s.err
}
func (s failingStore) Delete(context.Context, store.Key) error { return s.err }

func TestFailurePolicy(t *testing.T) {
	down := errors.New("backend down")
	for _, c := range []struct {
		policy ratelimit.FailurePolicy
		want   bool
	}{{ratelimit.FailClosed, false}, {ratelimit.FailOpen, true}} {
		lim, err := ratelimit.New(failingStore{down}, algorithms.GCRA(1, time.Second, 3), ratelimit.WithFailurePolicy(c.policy))
		if err != nil {
			t.Fatal(err)
		}
		d, err := lim.Allow(context.Background(), "k")
		if !errors.Is(err, down) {
			t.Errorf("policy %d: lim.Allow error = %v, want the store's error", c.policy, err)
		}
		if d.Allowed != c.want || d.Limit != 3 {
			t.Errorf("policy %d: lim.Allow on a failing store = allowed %v limit %d, want allowed %v limit 3", c.policy, d.Allowed, d.Limit, c.want)
		}
	}
}

// waitFor runs lim.WaitN in a goroutine and returns its result channel.
func waitFor(ctx context.Context, lim *ratelimit.Limiter, key string, n int) <-chan error {
	done := make(chan error, 1)
	go func() {
		_, err := lim.WaitN(ctx, key, n)
		done <- err
	}()
	return done
}

// advanceWhenWaiting moves the fake clock by d once a goroutine waits on it.
func advanceWhenWaiting(t *testing.T, c *clock.Fake, d time.Duration) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for c.Waiters() == 0 {
		if time.Now().After(deadline) {
			t.Fatal("nothing waits on the clock")
		}
		time.Sleep(time.Millisecond)
	}
	c.Advance(d)
}

func TestWait(t *testing.T) {
	lim, c := newLimiter(t, algorithms.GCRA(10, time.Second, 1))
	ctx := context.Background()
	if _, err := lim.Wait(ctx, "k"); err != nil {
		t.Fatal(err)
	}
	done := waitFor(ctx, lim, "k", 1)
	advanceWhenWaiting(t, c, 100*time.Millisecond)
	if err := <-done; err != nil {
		t.Fatalf("lim.Wait(key) after the interval: %v", err)
	}
	// The second request was consumed: a third is denied now.
	if d, _ := lim.Peek(ctx, "k"); d.Allowed {
		t.Errorf("lim.Peek(key) after two waits = allowed, want denied")
	}
}

func TestWaitGivesUp(t *testing.T) {
	lim, c := newLimiter(t, algorithms.GCRA(1, time.Minute, 2))
	if _, err := lim.WaitN(context.Background(), "k", 3); !errors.Is(err, ratelimit.ErrInvalidCost) {
		t.Errorf("lim.WaitN(key, 3) with burst 2 = %v, want ErrInvalidCost at once", err)
	}
	if _, err := lim.WaitN(context.Background(), "k", 2); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithDeadline(context.Background(), time.Now().Add(time.Second))
	defer cancel()
	_, err := lim.Wait(ctx, "k")
	if err == nil || !strings.Contains(err.Error(), "would exceed context deadline") {
		t.Errorf("lim.Wait(key) needing 30s with a 1s deadline = %v, want an error that says it would exceed the deadline", err)
	}
	// As with x/time/rate, a wait that cannot meet the deadline is a
	// missed deadline.
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("lim.Wait(key) needing 30s with a 1s deadline = %v, want errors.Is(err, context.DeadlineExceeded)", err)
	}
	ctx2, cancel2 := context.WithCancel(context.Background())
	done := waitFor(ctx2, lim, "k", 1)
	for c.Waiters() == 0 {
		time.Sleep(time.Millisecond)
	}
	cancel2()
	if err := <-done; !errors.Is(err, context.Canceled) {
		t.Errorf("lim.Wait(key) canceled while waiting = %v, want context.Canceled", err)
	}
}

func TestWaitShapesLeakyBucket(t *testing.T) {
	lim, c := newLimiter(t, algorithms.LeakyBucket(4, time.Second, 4))
	ctx := context.Background()
	if d, err := lim.Wait(ctx, "k"); err != nil || d.Delay != 0 {
		t.Fatalf("first lim.Wait = %+v, %v; want no delay", d, err)
	}
	done := waitFor(ctx, lim, "k", 1)
	advanceWhenWaiting(t, c, 249*time.Millisecond)
	select {
	case err := <-done:
		t.Fatalf("second lim.Wait returned (%v) before its 250ms turn", err)
	case <-time.After(20 * time.Millisecond):
	}
	c.Advance(time.Millisecond)
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}

func TestNamespaces(t *testing.T) {
	store := memory.MustNew()
	a, _ := ratelimit.New(store, algorithms.GCRA(10, time.Second, 5))
	b, _ := ratelimit.New(store, algorithms.GCRA(20, time.Second, 5))
	c, _ := ratelimit.New(store, algorithms.GCRA(20, time.Second, 5), ratelimit.WithName("api"))
	d, _ := ratelimit.New(store, algorithms.TokenBucket(20, time.Second, 5), ratelimit.WithName("api"))
	if a.Namespace() == b.Namespace() {
		t.Errorf("unnamed limiters with different numbers share namespace %q", a.Namespace())
	}
	if c.Namespace() != "api:gcra" || d.Namespace() != "api:token_bucket" {
		t.Errorf("named namespaces = %q, %q; want api:gcra, api:token_bucket", c.Namespace(), d.Namespace())
	}
}

func FuzzKeys(f *testing.F) {
	f.Add("user-1")
	f.Add("{tag}}{")
	f.Add("\x00\xff")
	f.Add("")
	lim, err := ratelimit.New(memory.MustNew(), algorithms.FixedWindow(2, time.Second))
	if err != nil {
		f.Fatal(err)
	}
	f.Fuzz(func(t *testing.T, key string) {
		d, err := lim.Allow(context.Background(), key)
		valid := key != "" && len(key) <= store.MaxKeyLen
		if valid != (err == nil) {
			t.Fatalf("lim.Allow(%q) = %+v, %v", key, d, err)
		}
		if err != nil && !errors.Is(err, ratelimit.ErrInvalidKey) {
			t.Fatalf("lim.Allow(%q) error %v, want ErrInvalidKey", key, err)
		}
	})
}

func TestLimiterPolicy(t *testing.T) {
	lim, err := ratelimit.New(memory.MustNew(), algorithms.TokenBucket(100, time.Minute, 20), ratelimit.WithName("api"))
	if err != nil {
		t.Fatal(err)
	}
	p, ok := lim.Policy()
	want := algorithms.Policy{Algorithm: "token_bucket", Limit: 100, Period: time.Minute, Burst: 20, Quota: 20, Window: 12 * time.Second}
	if !ok || p != want {
		t.Errorf("Policy() = %+v, %v; want %+v, true", p, ok, want)
	}
	if lim.Name() != "api" {
		t.Errorf("Name() = %q, want %q", lim.Name(), "api")
	}
}

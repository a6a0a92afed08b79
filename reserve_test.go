package ratelimit_test

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ratelimitkit/ratelimit"
	"github.com/ratelimitkit/ratelimit/algorithms"
	"github.com/ratelimitkit/ratelimit/clock"
	"github.com/ratelimitkit/ratelimit/store"
	"github.com/ratelimitkit/ratelimit/store/memory"
)

// switchStore is a memory store whose backend can be taken down: while
// down, every call fails with errDown.
type switchStore struct {
	s    *memory.Store
	down atomic.Bool
}

var errDown = errors.New("backend down")

func (s *switchStore) Update(ctx context.Context, k store.Key, now int64, f store.UpdateFunc) error {
	if s.down.Load() {
		return errDown
	}
	return s.s.Update(ctx, k, now, f)
}

func (s *switchStore) Delete(ctx context.Context, k store.Key) error {
	if s.down.Load() {
		return errDown
	}
	return s.s.Delete(ctx, k)
}

func newSwitchStore(t *testing.T) *switchStore {
	t.Helper()
	m, err := memory.New()
	if err != nil {
		t.Fatal(err)
	}
	return &switchStore{s: m}
}

// newReserving returns a limiter of GCRA(10/s, burst 2) on store, on a
// fake clock.
func newReserving(t *testing.T, store store.Store, opts ...ratelimit.Option) (*ratelimit.Limiter, *clock.Fake) {
	t.Helper()
	clk := clock.NewFake(time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC))
	lim, err := ratelimit.New(store, algorithms.GCRA(10, time.Second, 2), append([]ratelimit.Option{ratelimit.WithClock(clk)}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	return lim, clk
}

func mustReserve(t *testing.T, lim *ratelimit.Limiter, key string, n int, maxDelay time.Duration) *ratelimit.Reservation {
	t.Helper()
	r, err := lim.Reserve(context.Background(), key, n, maxDelay)
	if err != nil {
		t.Fatalf("lim.Reserve(%q, %d, %v): %v", key, n, maxDelay, err)
	}
	return r
}

// TestReserveBadInput checks the errors of bad input and the zero
// answers of a nil Reservation.
func TestReserveBadInput(t *testing.T) {
	ctx := context.Background()
	lim, _ := newReserving(t, newSwitchStore(t))
	if _, err := lim.Reserve(ctx, "k", 1, -time.Second); !errors.Is(err, ratelimit.ErrInvalidParams) {
		t.Errorf("lim.Reserve(key, 1, -1s) error = %v, want ErrInvalidParams", err)
	}
	for _, n := range []int{0, 3} {
		if r, err := lim.Reserve(ctx, "k", n, time.Second); !errors.Is(err, ratelimit.ErrInvalidCost) || r != nil {
			t.Errorf("lim.Reserve(key, %d, 1s) = %v, %v; want nil, ErrInvalidCost", n, r, err)
		}
	}
	if _, err := lim.Reserve(ctx, "", 1, 0); err == nil {
		t.Error("lim.Reserve(\"\", 1, 0) = nil error, want the empty key refused")
	}
	var r *ratelimit.Reservation
	if r.OK() || r.Cancel(ctx) != nil || !r.TimeToAct().IsZero() || r.Decision().Allowed {
		t.Error("a nil *Reservation is OK, cancels with an error, or has a time to act")
	}
	var nilTier *ratelimit.Tier
	if _, err := nilTier.Reserve(ctx, "k", 1, 0); !errors.Is(err, ratelimit.ErrInvalidParams) {
		t.Errorf("nil Tier.Reserve error = %v, want ErrInvalidParams", err)
	}
}

// TestReserveChain checks how the options' links treat reservations and
// refunds.
func TestReserveChain(t *testing.T) {
	ctx := context.Background()

	t.Run("deny cache", func(t *testing.T) {
		// A reservation is not answered from a cached denial, and a
		// refund drops the denial, so the next request reaches the store.
		lim, _ := newReserving(t, newSwitchStore(t), ratelimit.WithDenyCache(100))
		r := mustReserve(t, lim, "k", 2, 0)
		if d, _ := lim.Allow(ctx, "k"); d.Allowed || d.Source != ratelimit.SourceStore {
			t.Fatalf("lim.Allow(key) on a spent burst = %v from %v, want denied by the store", d.Allowed, d.Source)
		}
		if d, _ := lim.Allow(ctx, "k"); d.Source != ratelimit.SourceDenyCache {
			t.Fatalf("second lim.Allow(key) from %v, want the deny cache", d.Source)
		}
		if ahead := mustReserve(t, lim, "k", 1, time.Second); !ahead.OK() || ahead.Decision().Source != ratelimit.SourceStore {
			t.Errorf("lim.Reserve(key, 1, 1s) with a cached denial = ok %v from %v, want ok from the store", ahead.OK(), ahead.Decision().Source)
		} else if err := ahead.Cancel(ctx); err != nil {
			t.Fatal(err)
		}
		if err := r.Cancel(ctx); err != nil {
			t.Fatal(err)
		}
		if d, _ := lim.Allow(ctx, "k"); !d.Allowed || d.Source != ratelimit.SourceStore {
			t.Errorf("lim.Allow(key) after Cancel = %v from %v, want allowed by the store (rule: a refund drops the cached denial)", d.Allowed, d.Source)
		}
	})

	t.Run("store failure", func(t *testing.T) {
		// Cancel returns the store's error; a reservation the failure
		// policy made gives nothing back.
		s := newSwitchStore(t)
		lim, _ := newReserving(t, s, ratelimit.WithFailurePolicy(ratelimit.FailOpen))
		r := mustReserve(t, lim, "k", 2, 0)
		s.down.Store(true)
		if err := r.Cancel(ctx); !errors.Is(err, errDown) {
			t.Errorf("Cancel with the store down = %v, want its error", err)
		}
		if err := r.Cancel(ctx); err != nil {
			t.Errorf("second Cancel = %v, want nil (a reservation cancels once)", err)
		}
		open, err := lim.Reserve(ctx, "k", 1, 0)
		if !errors.Is(err, errDown) || !open.OK() || open.Decision().Source != ratelimit.SourceFailurePolicy {
			t.Fatalf("lim.Reserve with the store down = %+v, %v; want the failure policy's admission and the error", open, err)
		}
		s.down.Store(false)
		if err := open.Cancel(ctx); err != nil {
			t.Fatal(err)
		}
		if d, _ := lim.Allow(ctx, "k"); d.Allowed {
			t.Error("lim.Allow(key) after cancelling the failure policy's reservation = allowed, want denied (rule: it took nothing, so gives nothing)")
		}
	})

	t.Run("shadow", func(t *testing.T) {
		lim, _ := newReserving(t, newSwitchStore(t), ratelimit.WithShadow())
		mustReserve(t, lim, "k", 2, 0)
		r := mustReserve(t, lim, "k", 2, 0) // denied, admitted by shadow mode
		if !r.OK() || !r.Decision().Shadowed {
			t.Fatalf("shadowed reservation: ok %v, shadowed %v", r.OK(), r.Decision().Shadowed)
		}
		if err := r.Cancel(ctx); err != nil {
			t.Fatal(err)
		}
		if d, _ := lim.Peek(ctx, "k"); d.Remaining != 0 {
			t.Errorf("after cancelling a shadowed reservation, remaining %d, want 0 (rule: it took nothing)", d.Remaining)
		}
	})

	t.Run("observer", func(t *testing.T) {
		var seen atomic.Int32
		lim, _ := newReserving(t, newSwitchStore(t), ratelimit.WithObserver(observerFunc(func(context.Context, ratelimit.Event) { seen.Add(1) })))
		r := mustReserve(t, lim, "k", 1, 0)
		if err := r.Cancel(ctx); err != nil {
			t.Fatal(err)
		}
		if n := seen.Load(); n != 1 {
			t.Errorf("observer told of %d decisions for a reservation and its Cancel, want 1", n)
		}
	})

	t.Run("own algorithm", func(t *testing.T) {
		// A user's algorithm is never sent a refund.
		clk := clock.NewFake(time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC))
		lim, err := ratelimit.New(newSwitchStore(t), countAll{}, ratelimit.WithClock(clk))
		if err != nil {
			t.Fatal(err)
		}
		r := mustReserve(t, lim, "k", 1, 0)
		if err := r.Cancel(ctx); err != nil {
			t.Fatal(err)
		}
		if d, _ := lim.Peek(ctx, "k"); d.Remaining != 1 {
			t.Errorf("after Cancel on a user's algorithm, remaining %d, want 1 (rule: no refund is sent)", d.Remaining)
		}
	})
}

// countAll is a user's algorithm that admits two requests in all, and
// would take a refund as a request: it never sees one.
type countAll struct{}

func (countAll) Name() string    { return "count_all" }
func (countAll) Validate() error { return nil }
func (countAll) MaxCost() int64  { return 1 }
func (countAll) Decide(state []byte, req algorithms.Request) (algorithms.Step, error) {
	used := int64(len(state))
	d := algorithms.Decision{Limit: 2, Allowed: used+req.Cost <= 2}
	if !d.Allowed {
		d.RetryAfter = 1
		return algorithms.Step{Decision: d}, nil
	}
	if req.Peek {
		d.Remaining = 2 - used
		return algorithms.Step{Decision: d}, nil
	}
	d.Remaining = 2 - used - req.Cost
	return algorithms.Step{Decision: d, Next: make([]byte, used+req.Cost), TTL: 1_000_000}, nil
}

// BenchmarkReserve measures a reservation and its Cancel on the memory
// store, beside BenchmarkAllow's decision: the Reservation is the one
// allocation a reservation adds.
func BenchmarkReserve(b *testing.B) {
	ctx := context.Background()
	m, err := memory.New()
	if err != nil {
		b.Fatal(err)
	}
	lim, err := ratelimit.New(m, algorithms.GCRA(1_000_000_000, time.Second, 1000))
	if err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	for b.Loop() {
		r, err := lim.Reserve(ctx, "k", 1, time.Second)
		if err != nil || !r.OK() {
			b.Fatal(r, err)
		}
		if err := r.Cancel(ctx); err != nil {
			b.Fatal(err)
		}
	}
}

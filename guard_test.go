package ratelimit_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/ratelimitkit/ratelimit"
	"github.com/ratelimitkit/ratelimit/algorithms"
	"github.com/ratelimitkit/ratelimit/clock"
	"github.com/ratelimitkit/ratelimit/store/memory"
)

// opaqueAlg is a user's algorithm that cannot be divided between replicas.
type opaqueAlg struct{ algorithms.Algorithm }

func TestNewRejectsBadGuardOptions(t *testing.T) {
	store := memory.MustNew()
	gcra := algorithms.GCRA(10, time.Second, 5)
	cases := []struct {
		name string
		alg  algorithms.Algorithm
		opt  ratelimit.Option
		want string
	}{
		{"negative budget", gcra, ratelimit.WithStoreTimeout(-time.Second), "store timeout -1s"},
		{"breaker of no failures", gcra, ratelimit.WithCircuitBreaker(0, time.Second), "circuit breaker failures 0"},
		{"breaker without cool-down", gcra, ratelimit.WithCircuitBreaker(3, 0), "cool-down 0s"},
		{"nil fallback store", gcra, ratelimit.WithFallback(nil, 1), "nil fallback store"},
		{"typed nil fallback store", gcra, ratelimit.WithFallback((*memory.Store)(nil), 1), "nil fallback store"},
		{"no replicas", gcra, ratelimit.WithFallback(memory.MustNew(), 0), "fallback replicas 0"},
		{"indivisible algorithm", opaqueAlg{gcra}, ratelimit.WithFallback(memory.MustNew(), 2), "gcra cannot be divided"},
		{"empty deny cache", gcra, ratelimit.WithDenyCache(0), "deny cache size 0"},
		{"nil observer", gcra, ratelimit.WithObserver(nil), "nil observer"},
		{"nil observer func", gcra, ratelimit.WithObserver(observerFunc(nil)), "nil observer"},
		{"typed nil observer", gcra, ratelimit.WithObserver((*recorder)(nil)), "nil observer"},
	}
	for _, c := range cases {
		_, err := ratelimit.New(store, c.alg, c.opt)
		if !errors.Is(err, ratelimit.ErrInvalidParams) || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: ratelimit.New error = %v, want ErrInvalidParams mentioning %q", c.name, err, c.want)
		}
	}
}

// TestDenyCacheDecidesAsTheStore runs the same random requests through a
// limiter with a deny cache and one without, on two memory stores, and
// requires the same answer every time: the cache admits nothing extra and
// denies nothing the store would admit. Its RetryAfter never promises more
// than the store's.
func TestDenyCacheDecidesAsTheStore(t *testing.T) {
	algs := []algorithms.Algorithm{
		algorithms.FixedWindow(5, time.Second),
		algorithms.SlidingLog(5, time.Second),
		algorithms.SlidingWindow(5, time.Second),
		algorithms.TokenBucket(5, time.Second, 4),
		algorithms.LeakyBucket(5, time.Second, 4),
		algorithms.GCRA(3, time.Second, 4),
	}
	ctx := context.Background()
	for _, alg := range algs {
		for seed := range uint64(20) {
			fake := clock.NewFake(epoch)
			plain, err := ratelimit.New(memory.MustNew(), alg, ratelimit.WithClock(fake))
			if err != nil {
				t.Fatal(err)
			}
			cached, err := ratelimit.New(memory.MustNew(), alg, ratelimit.WithClock(fake), ratelimit.WithDenyCache(100))
			if err != nil {
				t.Fatal(err)
			}
			rng := rand.New(rand.NewPCG(seed, 7))
			hits := 0
			for i := range 400 {
				fake.Advance(time.Duration(rng.Int64N(int64(150 * time.Millisecond))))
				key := fmt.Sprint("k", rng.IntN(2))
				cost := 1
				if rng.IntN(4) == 0 {
					cost = 1 + rng.IntN(int(alg.MaxCost()))
				}
				call := fmt.Sprintf("AllowN(%s, %d)", key, cost)
				var want, got ratelimit.Decision
				if rng.IntN(8) == 0 {
					call = fmt.Sprintf("Peek(%s)", key)
					want, _ = plain.Peek(ctx, key)
					got, _ = cached.Peek(ctx, key)
				} else {
					want, _ = plain.AllowN(ctx, key, cost)
					got, _ = cached.AllowN(ctx, key, cost)
				}
				if got.Source == ratelimit.SourceDenyCache {
					hits++
					if got.RetryAfter <= 0 || got.RetryAfter > want.RetryAfter {
						t.Errorf("%v seed %d step %d: %s from the deny cache: RetryAfter %v, want in (0, %v]", alg, seed, i, call, got.RetryAfter, want.RetryAfter)
					}
				}
				if got.Allowed != want.Allowed {
					t.Fatalf("%v seed %d step %d: %s with a deny cache = %+v, without = %+v", alg, seed, i, call, got, want)
				}
			}
			if hits == 0 {
				t.Errorf("%v seed %d: the deny cache answered nothing in 400 requests", alg, seed)
			}
		}
	}
}

func TestDenyCacheReset(t *testing.T) {
	lim, _ := newLimiter(t, algorithms.FixedWindow(1, time.Hour), ratelimit.WithDenyCache(10))
	ctx := context.Background()
	lim.Allow(ctx, "k")
	lim.Allow(ctx, "k")
	if d, _ := lim.Allow(ctx, "k"); d.Allowed || d.Source != ratelimit.SourceDenyCache {
		t.Fatalf("third lim.Allow on a limit of 1 = %+v, want denied by the deny cache", d)
	}
	if err := lim.Reset(ctx, "k"); err != nil {
		t.Fatal(err)
	}
	if d, _ := lim.Allow(ctx, "k"); !d.Allowed || d.Source != ratelimit.SourceStore {
		t.Errorf("lim.Allow after lim.Reset = %+v, want allowed by the store", d)
	}
}

func TestShadow(t *testing.T) {
	fake := clock.NewFake(epoch)
	store := memory.MustNew()
	rec := &recorder{}
	shadow, err := ratelimit.New(store, algorithms.GCRA(1, time.Second, 2), ratelimit.WithName("new-limit"),
		ratelimit.WithClock(fake), ratelimit.WithShadow(), ratelimit.WithObserver(rec))
	if err != nil {
		t.Fatal(err)
	}
	enforcing, _ := ratelimit.New(store, algorithms.GCRA(1, time.Second, 2), ratelimit.WithName("new-limit"), ratelimit.WithClock(fake))
	ctx := context.Background()
	for i, wantShadowed := range []bool{false, false, true, true} {
		d, err := shadow.Allow(ctx, "k")
		e := rec.last(t)
		if err != nil || !d.Allowed || d.Shadowed != wantShadowed || d.Source != ratelimit.SourceStore {
			t.Errorf("shadow lim.Allow #%d = %+v, %v; want allowed, shadowed %v, from the store", i, d, err, wantShadowed)
		}
		if wantShadowed && d.RetryAfter <= 0 {
			t.Errorf("shadow lim.Allow #%d = %+v, want the denial's RetryAfter", i, d)
		}
		if e.Allowed == wantShadowed || !reflect.DeepEqual(e.Decision, d) {
			t.Errorf("shadow lim.Allow #%d: observer saw allowed %v and %+v, want the limit's answer %v and the decision returned", i, e.Allowed, e.Decision, !wantShadowed)
		}
	}
	// The shadow limiter consumed what an enforcing one would have.
	if d, _ := enforcing.Peek(ctx, "k"); d.Allowed {
		t.Errorf("enforcing lim.Peek after the shadow limiter's burst = %+v, want denied", d)
	}
}

// TestShadowNeverDenies checks shadow mode over a failure policy that
// denies: a stopped store, failing closed.
func TestShadowNeverDenies(t *testing.T) {
	srv, store, _ := privateRedis(t, true)
	srv.Stop()
	lim, err := ratelimit.New(store, algorithms.GCRA(1, time.Second, 2), ratelimit.WithShadow())
	if err != nil {
		t.Fatal(err)
	}
	d, err := lim.Allow(context.Background(), "k")
	if err == nil || !d.Allowed || !d.Shadowed || d.Source != ratelimit.SourceFailurePolicy {
		t.Errorf("shadow lim.Allow on a stopped store failing closed = %+v, %v; want allowed, shadowed, from the failure policy, with the error", d, err)
	}
}

func TestObserver(t *testing.T) {
	rec := &recorder{}
	lim, _ := newLimiter(t, algorithms.FixedWindow(2, time.Hour), ratelimit.WithName("api"), ratelimit.WithObserver(rec))
	ctx := context.Background()
	lim.AllowN(ctx, "user-1", 2)
	lim.Peek(ctx, "user-1")
	lim.Allow(ctx, "")           // bad input: no event
	lim.AllowN(ctx, "user-1", 3) // bad input: no event
	want := []ratelimit.Event{
		{Limiter: "api", Algorithm: "fixed_window", Key: "user-1", Cost: 2, Allowed: true, CalledStore: true},
		{Limiter: "api", Algorithm: "fixed_window", Key: "user-1", Cost: 1, Peek: true, Allowed: false, CalledStore: true},
	}
	if len(rec.events) != len(want) {
		t.Fatalf("observer saw %d events, want %d: %+v", len(rec.events), len(want), rec.events)
	}
	for i, e := range rec.events {
		if e.StoreLatency <= 0 {
			t.Errorf("event %d: StoreLatency %v, want the store call's duration", i, e.StoreLatency)
		}
		if e.Decision.Source != ratelimit.SourceStore || e.Decision.Allowed != want[i].Allowed {
			t.Errorf("event %d: decision %+v, want allowed %v from the store", i, e.Decision, want[i].Allowed)
		}
		e.StoreLatency, e.Decision = 0, ratelimit.Decision{}
		if !reflect.DeepEqual(e, want[i]) {
			t.Errorf("event %d = %+v, want %+v", i, e, want[i])
		}
	}
}

func TestSourceString(t *testing.T) {
	for s, want := range map[ratelimit.Source]string{
		ratelimit.SourceNone: "none", ratelimit.SourceStore: "store", ratelimit.SourceFallback: "fallback",
		ratelimit.SourceDenyCache: "deny_cache", ratelimit.SourceFailurePolicy: "failure_policy", 99: "unknown",
	} {
		if s.String() != want {
			t.Errorf("Source(%d).String() = %q, want %q", s, s.String(), want)
		}
	}
}

// observerFunc adapts a function to a ratelimit.Observer.
type observerFunc func(ctx context.Context, e ratelimit.Event)

func (f observerFunc) ObserveDecision(ctx context.Context, e ratelimit.Event) { f(ctx, e) }

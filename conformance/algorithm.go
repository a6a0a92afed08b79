package conformance

import (
	"context"
	"fmt"
	"math/rand/v2"
	"reflect"
	"testing"
	"time"

	"github.com/ratelimitkit/ratelimit"
	"github.com/ratelimitkit/ratelimit/algorithms"
	"github.com/ratelimitkit/ratelimit/clock"
	"github.com/ratelimitkit/ratelimit/store"
	"github.com/ratelimitkit/ratelimit/store/memory"
)

// RunAlgorithm runs a user's own algorithm through a store: stores made by
// newHarness (one fresh harness per subtest, as for Run), each beside a
// memory store, the reference, on one fake clock. Call it from a test of
// your algorithm with each store you deploy it on:
//
//	func TestMyAlgorithm(t *testing.T) {
//		conformance.RunAlgorithm(t, myAlgorithm{limit: 5}, func(t *testing.T) conformance.Harness {
//			return conformance.Harness{Store: newMyStore(t)}
//		})
//	}
//
// Its groups:
//
//   - Differential: seeded random sequences of time steps (backwards too),
//     costs up to alg.MaxCost() and peeks, on a few keys; every decision the
//     store's limiter makes must equal the memory store's, field by field,
//     and neither may return an error. A step of alg that breaks the
//     contract the Limiter holds every algorithm to (a state written with a
//     TTL below 1 µs, new state on a peek, a decision inconsistent with
//     itself: see algorithms.Step) is such an error, named in the failure.
//   - Peek: peeks on a fresh key and on a used one consume nothing: the
//     requests after them decide as if they had not happened, and, where
//     the harness lists the backend's keys (Harness.Expiries), peeks on a
//     fresh key write nothing.
//   - Concurrency: 16 goroutines × 4 requests of cost 1 on one key at a
//     fixed time, on a new key and on one that exists, admit exactly as many
//     as the memory store admits for the same requests one after another
//     (for an algorithm that states a limit, that limit).
//
// The harness's store must use the time the limiter passes (see Harness).
func RunAlgorithm(t *testing.T, alg algorithms.Algorithm, newHarness func(t *testing.T) Harness) {
	t.Helper()
	if alg == nil || reflect.ValueOf(alg).Kind() == reflect.Pointer && reflect.ValueOf(alg).IsNil() {
		t.Fatal("conformance.RunAlgorithm: nil algorithm")
	}
	if err := alg.Validate(); err != nil {
		t.Fatalf("conformance.RunAlgorithm: %s.Validate() = %v", alg.Name(), err)
	}
	startWatchdog(t)
	watched := func(t *testing.T) Harness {
		h := newHarness(t)
		watch(t, h.Timeout)
		return h
	}
	for _, c := range []struct {
		name string
		run  func(*testing.T, algorithms.Algorithm, func(*testing.T) Harness)
	}{
		{"Differential", algDifferential},
		{"Peek", algPeek},
		{"Concurrency", algConcurrency},
	} {
		t.Run(c.name, func(t *testing.T) {
			watch(t, 0)
			c.run(t, alg, watched)
		})
	}
}

// pair is a user's algorithm on the store under test and on the memory
// store, on one fake clock.
type pair struct {
	t          *testing.T
	store, ref *ratelimit.Limiter
	clock      *clock.Fake
	start      time.Time
}

func newPair(t *testing.T, s store.Store, alg algorithms.Algorithm) *pair {
	t.Helper()
	c := clock.NewFake(epoch)
	p := &pair{t: t, clock: c, start: epoch}
	var err error
	for _, l := range []struct {
		lim **ratelimit.Limiter
		s   store.Store
	}{{&p.store, s}, {&p.ref, memory.MustNew()}} {
		if *l.lim, err = ratelimit.New(l.s, alg, ratelimit.WithClock(c), ratelimit.WithName("own")); err != nil {
			t.Fatalf("ratelimit.New(%s): %v", alg.Name(), err)
		}
	}
	return p
}

// ask makes one request (a peek, or cost n) on both limiters and fails the
// test when either returns an error or their decisions differ.
func (p *pair) ask(i int, key string, n int, peek bool) ratelimit.Decision {
	p.t.Helper()
	call, what := func(l *ratelimit.Limiter) (ratelimit.Decision, error) { return l.AllowN(context.Background(), key, n) }, fmt.Sprintf("AllowN(%q, %d)", key, n)
	if peek {
		call, what = func(l *ratelimit.Limiter) (ratelimit.Decision, error) { return l.Peek(context.Background(), key) }, fmt.Sprintf("Peek(%q)", key)
	}
	at := "t+" + p.clock.Now().Sub(p.start).String()
	want, err := call(p.ref)
	if err != nil {
		p.t.Fatalf("request %d, %s at %s on the memory store: %v", i, what, at, err)
	}
	got, err := call(p.store)
	if err != nil {
		p.t.Fatalf("request %d, %s at %s on the store: %v (the memory store decided %+v)", i, what, at, err, want)
	}
	if !reflect.DeepEqual(got, want) {
		p.t.Fatalf("request %d, %s at %s: the store decided %+v, the memory store %+v (rule: every store decides alike for a user's algorithm)", i, what, at, got, want)
	}
	return got
}

// algDifferential runs seeded random sequences on both stores.
func algDifferential(t *testing.T, alg algorithms.Algorithm, newHarness func(*testing.T) Harness) {
	steps := []time.Duration{0, 0, time.Microsecond, time.Millisecond, 10 * time.Millisecond, 100 * time.Millisecond,
		time.Second, 10 * time.Second, time.Minute, time.Hour, 24 * time.Hour, -time.Millisecond, -time.Second}
	maxCost := int(min(alg.MaxCost(), 1000))
	for seed := uint64(1); seed <= 4; seed++ {
		t.Run(fmt.Sprintf("seed-%d", seed), func(t *testing.T) {
			h := newHarness(t)
			p := newPair(t, h.Store, alg)
			r := rand.New(rand.NewPCG(seed, 0x72756e616c67))
			for i := range 300 {
				p.clock.Advance(steps[r.IntN(len(steps))])
				n := 1
				if r.IntN(3) == 0 {
					n = 1 + r.IntN(maxCost)
				}
				p.ask(i, fmt.Sprintf("k%d", r.IntN(3)), n, r.IntN(4) == 0)
			}
		})
	}
}

// algPeek checks that peeks consume nothing and, on a fresh key, write
// nothing.
func algPeek(t *testing.T, alg algorithms.Algorithm, newHarness func(*testing.T) Harness) {
	h := newHarness(t)
	p := newPair(t, h.Store, alg)
	for i := range 10 {
		p.ask(i, "fresh", 1, true)
	}
	if h.Expiries != nil {
		list, err := h.Expiries(context.Background())
		if err != nil {
			t.Fatalf("Expiries: %v", err)
		}
		if len(list) != 0 {
			t.Errorf("after only lim.Peek, the backend holds %d keys (first %q), want none (rule: a peek writes nothing)", len(list), list[0].Key)
		}
	}
	// On a used key: as many peeks as admissions between the requests,
	// which must still decide as the memory store's (which saw the same
	// peeks) and as the store's own requests without them would.
	bare := newPair(t, newHarness(t).Store, alg)
	for i := range 3 * int(min(alg.MaxCost(), 20)) {
		d := p.ask(i, "used", 1, false)
		for j := range 3 {
			p.ask(i*10+j, "used", 1, true)
		}
		if b := bare.ask(i, "used", 1, false); !reflect.DeepEqual(b, d) {
			t.Fatalf("request %d on a key also peeked 3 times between requests = %+v, without the peeks %+v (rule: a peek consumes nothing)", i, d, b)
		}
	}
}

// algConcurrency checks exact admission under concurrency: as many as the
// memory store admits one request after another at the same time.
func algConcurrency(t *testing.T, alg algorithms.Algorithm, newHarness func(*testing.T) Harness) {
	const workers, each = 16, 4
	for _, existing := range []bool{false, true} {
		name := "new-key"
		if existing {
			name = "existing-key"
		}
		t.Run(name, func(t *testing.T) {
			h := newHarness(t)
			p := newPair(t, h.Store, alg)
			want, admitted := 0, 0
			if existing {
				if d := p.ask(0, "c", 1, false); d.Allowed {
					want, admitted = 1, 1
				}
			}
			for range workers * each {
				d, err := p.ref.Allow(context.Background(), "c")
				if err != nil {
					t.Fatalf("memory store: lim.Allow: %v", err)
				}
				if d.Allowed {
					want++
				}
			}
			admitted += admitConcurrently(t, workers, each, "c", p.store.Allow)
			if admitted != want {
				t.Errorf("%d goroutines × %d lim.Allow(key) at a fixed time admitted %d, the memory store %d one after another (rule: the store's read-modify-write is atomic)",
					workers, each, admitted, want)
			}
		})
	}
}

package conformance

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ratelimitkit/ratelimit"
	"github.com/ratelimitkit/ratelimit/algorithms"
	"github.com/ratelimitkit/ratelimit/algorithms/forms"
	"github.com/ratelimitkit/ratelimit/store"
)

// The Composite group holds composites (algorithms.All) to their rule:
// admitted only if every limit admits, and then every limit consumes;
// otherwise none consumes, also under concurrency. It runs on both paths:
// a store's Decider (the composite server forms, one round trip) and its
// Update. A composite with a part that has no composite server form (a
// user's own algorithm) has no server path: the store answers
// ErrUnsupported and the limiter uses Update, which the group checks too.

// composites are the composites the group runs: two limits of different
// kinds, every kind with a generated form at once, and one with a sliding
// log (whose composite part is written by hand).
func composites() []algorithms.Algorithm {
	const s, m = time.Second, time.Minute
	return []algorithms.Algorithm{
		algorithms.All(algorithms.GCRA(10, s, 10), algorithms.FixedWindow(15, m)),
		algorithms.All(algorithms.FixedWindow(12, s), algorithms.SlidingWindow(20, m), algorithms.TokenBucket(10, s, 10),
			algorithms.LeakyBucket(10, s, 10), algorithms.GCRA(30, m, 10)),
		algorithms.All(algorithms.SlidingLog(10, s), algorithms.FixedWindow(15, m)),
	}
}

// compositeFamilies are Differential families of composites: each switches
// its parts' numbers mid-sequence under one name, as the single
// algorithms' families do.
func compositeFamilies() []family {
	const ms, s = time.Millisecond, time.Second
	two := func(a, b numbers) algorithms.Algorithm {
		return algorithms.All(algorithms.GCRA(a.limit, a.period, a.burst), algorithms.FixedWindow(b.limit, b.period))
	}
	five := func(n numbers) algorithms.Algorithm {
		return algorithms.All(algorithms.FixedWindow(n.limit, n.period), algorithms.SlidingWindow(2*n.limit, 3*n.period),
			algorithms.TokenBucket(n.limit, n.period, n.burst), algorithms.LeakyBucket(n.limit, 2*n.period, n.burst),
			algorithms.GCRA(n.limit, n.period, n.burst))
	}
	log := func(n numbers) algorithms.Algorithm {
		return algorithms.All(algorithms.SlidingLog(n.limit, n.period), algorithms.TokenBucket(n.limit, n.period, n.burst))
	}
	// reshape changes the parts under one limiter name: reordered, one
	// added, two removed, named, a sliding log among them, so that every
	// form keys each part's state by its name as the Go form does.
	reshape := []algorithms.Algorithm{
		algorithms.All(algorithms.GCRA(7, s, 5), algorithms.FixedWindow(11, 3*s)),
		algorithms.All(algorithms.FixedWindow(11, 3*s), algorithms.GCRA(7, s, 5)),
		algorithms.All(algorithms.GCRA(7, s, 5), algorithms.SlidingWindow(20, 2*s), algorithms.FixedWindow(11, 3*s)),
		algorithms.All(algorithms.SlidingWindow(20, 2*s)),
		algorithms.All(algorithms.Named("daily", algorithms.FixedWindow(13, 3*s)), algorithms.TokenBucket(5, s, 4), algorithms.GCRA(9, s, 3)),
		algorithms.All(algorithms.SlidingLog(9, 2*s), algorithms.GCRA(7, s, 5)),
	}
	// crowd is three composites of eight named parts each, 24 names in
	// all: the state carries the parts of the other two up to its 16
	// entries, and drops those past that.
	crowd := func(first string, n numbers) algorithms.Algorithm {
		var parts []algorithms.Algorithm
		for i := range algorithms.MaxParts {
			parts = append(parts, algorithms.Named(fmt.Sprintf("%s%d", first, i), algorithms.FixedWindow(n.limit+int64(i), n.period)))
		}
		return algorithms.All(parts...)
	}
	return []family{
		{"reshape", reshape, s},
		{"crowd", []algorithms.Algorithm{crowd("a", numbers{20, 3 * s, 0}), crowd("b", numbers{15, 2 * s, 0}), crowd("c", numbers{30, 5 * s, 0})}, s},
		{"gcra+fixed_window", []algorithms.Algorithm{two(numbers{7, s, 5}, numbers{11, 3 * s, 0}), two(numbers{3, 100 * ms, 7}, numbers{20, 3 * s, 0})}, s},
		{"five", []algorithms.Algorithm{five(numbers{7, s, 5}), five(numbers{1000, 3 * s, 11})}, s},
		{"sliding_log+token_bucket", []algorithms.Algorithm{log(numbers{7, s, 5}), log(numbers{3, 100 * ms, 4})}, s},
	}
}

// compositePaths are the two paths for a composite: the server path skips
// (without failing, whatever DecidesAllBuiltins says) when the store has
// no composite form for the composite.
var compositePaths = []path{
	{"server", func(t *testing.T, h Harness, s store.Store, alg algorithms.Algorithm) store.Store {
		t.Helper()
		dec, ok := s.(store.Decider)
		if !ok {
			t.Skip("store does not implement store.Decider")
		}
		key := store.Key{Namespace: "probe:" + alg.Name(), ID: "probe"}
		_, err := dec.Decide(context.Background(), key, alg, algorithms.Request{Now: epoch.UnixMicro(), Cost: 1, Peek: true})
		switch {
		case errors.Is(err, store.ErrUnsupported) && h.DecidesAllBuiltins && composable(alg):
			t.Fatalf("store.Decide(%v) = %v, but the harness sets DecidesAllBuiltins and every part has a composite server form", alg, err)
		case errors.Is(err, store.ErrUnsupported):
			t.Skipf("store has no server form for %v: %v", alg, err)
		case err != nil:
			t.Fatalf("store.Decide(%v) peek on a fresh key: %v", alg, err)
		}
		return s
	}},
	paths[1],
}

// composable reports whether every part of alg has a composite server form.
func composable(alg algorithms.Algorithm) bool {
	c, ok := alg.(algorithms.Composite)
	if !ok {
		return false
	}
	_, _, ok = forms.CompositeForm(c)
	return ok
}

func testComposite(t *testing.T, newHarness func(*testing.T) Harness) {
	for _, p := range compositePaths {
		if p.name == "server" && !storeHas(t).decider {
			continue
		}
		t.Run(p.name, func(t *testing.T) {
			t.Run("Boundaries", func(t *testing.T) {
				h := newHarness(t)
				testCompositeBoundaries(t, p.wrap(t, h, h.Store, composites()[0]))
			})
			for i, alg := range composites() {
				t.Run(fmt.Sprintf("Concurrency-%d", i), func(t *testing.T) {
					h := newHarness(t)
					testCompositeConcurrency(t, h, p.wrap(t, h, h.Store, alg), alg)
				})
			}
			for _, fam := range compositeFamilies() {
				t.Run("Differential-"+fam.name, func(t *testing.T) {
					h := newHarness(t)
					s := p.wrap(t, h, h.Store, fam.algs[0])
					for seed := uint64(1); seed <= 2; seed++ {
						runSequence(t, h, s, fam, seed, 150)
					}
				})
			}
			t.Run("Expiry", func(t *testing.T) {
				h := newHarness(t)
				alg := algorithms.All(algorithms.FixedWindow(5, time.Second), algorithms.FixedWindow(50, time.Hour))
				testCompositeExpiry(t, h, p.wrap(t, h, h.Store, alg), alg)
			})
			t.Run("Isolation", func(t *testing.T) {
				h := newHarness(t)
				alg := composites()[0]
				testCompositeIsolation(t, p.wrap(t, h, h.Store, alg), alg)
			})
			t.Run("Reshape", func(t *testing.T) {
				h := newHarness(t)
				testCompositeReshape(t, p.wrap(t, h, h.Store, composites()[0]))
			})
		})
	}
	t.Run("Invalid", func(t *testing.T) {
		testCompositeInvalid(t, newHarness(t).Store)
	})
}

// testCompositeBoundaries scripts GCRA(10/s, burst 10) and FixedWindow(15
// per minute): the bucket's burst, its refill, then the window's limit,
// each limit's figures reported, and a denial that consumes nothing.
func testCompositeBoundaries(t *testing.T, s store.Store) {
	f := newFixture(t, s, composites()[0])
	const key = "composite-boundaries"
	check := func(d ratelimit.Decision, allowed bool, remaining []int, retry time.Duration) {
		t.Helper()
		var got []int
		for _, l := range d.Limits {
			got = append(got, l.Remaining)
		}
		if d.Allowed != allowed || fmt.Sprint(got) != fmt.Sprint(remaining) || d.RetryAfter != retry {
			t.Fatalf("composite at %s = %s, limits' remaining %v, retry after %v; want %s, %v, %v (rule: all limits admit and consume, or none consumes)",
				f.at(), verdict(d.Allowed), got, d.RetryAfter, verdict(allowed), remaining, retry)
		}
		least := remaining[0]
		for _, r := range remaining {
			least = min(least, r)
		}
		if d.Remaining != least {
			t.Fatalf("composite at %s: Remaining %d, want the least of the limits' %d", f.at(), d.Remaining, least)
		}
	}
	for i := 1; i <= 10; i++ {
		check(f.allow(key, 1), true, []int{10 - i, 15 - i}, 0)
	}
	// The bucket is empty: denied, and the window is not charged.
	check(f.allow(key, 1), false, []int{0, 5}, 100*time.Millisecond)
	check(f.allow(key, 1), false, []int{0, 5}, 100*time.Millisecond)
	f.clock.Advance(time.Second) // the bucket refills
	for i := 1; i <= 5; i++ {
		check(f.allow(key, 1), true, []int{10 - i, 5 - i}, 0)
	}
	// The window is spent: denied until the minute ends, the bucket keeps
	// its 5.
	check(f.allow(key, 1), false, []int{5, 0}, 59*time.Second)
	check(f.allow(key, 3), false, []int{5, 0}, 59*time.Second)
	f.clock.Advance(59 * time.Second)
	check(f.allow(key, 3), true, []int{7, 12}, 0)
}

// testCompositeConcurrency runs many goroutines on one key at a fixed time:
// exactly the composite's limit is admitted, and afterwards each limit has
// consumed exactly the admitted requests, none of the denied ones.
func testCompositeConcurrency(t *testing.T, h Harness, s store.Store, alg algorithms.Algorithm) {
	for _, existing := range []bool{false, true} {
		name := "new-key"
		if existing {
			name = "existing-key"
		}
		t.Run(name, func(t *testing.T) {
			f := newFixture(t, s, alg)
			key := "composite-concurrent-" + name
			ctx := context.Background()
			fresh, err := f.lim.Peek(ctx, key)
			if err != nil {
				t.Fatalf("lim.Peek(%q): %v", key, err)
			}
			admitted := 0
			if existing {
				f.expect(key, 1, true)
				admitted++
			}
			const workers, each = 16, 4
			allows, _ := f.instances(h, s, alg)
			admitted += admitConcurrently(t, workers, each, key, allows...)
			if admitted != fresh.Remaining {
				t.Errorf("%d goroutines × %d lim.Allow(%q) at a fixed time admitted %d, want exactly %d (rule: the composite's decision is atomic)",
					workers, each, key, admitted, fresh.Remaining)
			}
			after, err := f.lim.Peek(ctx, key)
			if err != nil {
				t.Fatalf("lim.Peek(%q): %v", key, err)
			}
			if len(after.Limits) != len(fresh.Limits) {
				t.Fatalf("lim.Peek(%q) reports %d limits, want %d", key, len(after.Limits), len(fresh.Limits))
			}
			for i, l := range after.Limits {
				if want := fresh.Limits[i].Remaining - admitted; l.Remaining != want {
					t.Errorf("after %d admitted requests limit %d (%s) has %d remaining, want %d (rule: a denied request consumes from no limit)",
						admitted, i+1, alg.(algorithms.Composite).Parts()[i].Name(), l.Remaining, want)
				}
			}
		})
	}
}

// testCompositeExpiry checks that the composite's keys carry an expiry, at
// least the longest part's TTL.
func testCompositeExpiry(t *testing.T, h Harness, s store.Store, alg algorithms.Algorithm) {
	if h.Expiries == nil {
		t.Skip("harness has no Expiries: cannot list the backend's keys")
	}
	f := newFixture(t, s, alg)
	f.expect("composite-expiry", 1, true)
	list, err := h.Expiries(context.Background())
	if err != nil {
		t.Fatalf("Expiries: %v", err)
	}
	now := f.clock.Now()
	if h.RealTimeExpiry {
		now = time.Now()
	}
	found := false
	for _, e := range list {
		if !strings.Contains(e.Key, "composite-expiry") {
			continue
		}
		found = true
		switch {
		case e.Never:
			t.Errorf("backend key %q has no expiry (rule: every key written carries one)", e.Key)
		case e.At.Sub(now) < 59*time.Minute:
			t.Errorf("backend key %q expires in %v, before the hour-long limit's state (rule: the key lives as long as its longest part)", e.Key, e.At.Sub(now))
		}
	}
	if !found {
		t.Errorf("Expiries lists no key for composite-expiry after an admitted request")
	}
}

// testCompositeIsolation checks that a composite never shares state with a
// single algorithm of the same limiter name, that a composite of the same
// parts in another order does (its parts are keyed by name, not place),
// and that unnamed limiters of different composites never share state.
func testCompositeIsolation(t *testing.T, s store.Store, alg algorithms.Algorithm) {
	f := newFixture(t, s, alg, ratelimit.WithName("shared"))
	single := f.sibling(s, algorithms.GCRA(10, time.Second, 10), ratelimit.WithName("shared"))
	reordered := f.sibling(s, algorithms.All(algorithms.FixedWindow(15, time.Minute), algorithms.GCRA(10, time.Second, 10)), ratelimit.WithName("shared"))
	unnamed := f.sibling(s, alg)
	other := f.sibling(s, algorithms.All(algorithms.GCRA(10, time.Second, 10)))
	const key = "composite-isolation"
	f.exhaust(key, 10)
	if d := single.allow(key, 10); !d.Allowed {
		t.Errorf("a GCRA limiter named like an exhausted composite of a GCRA denied its first request (rule: a composite's keys never collide with a single algorithm's)")
	}
	if d := reordered.allow(key, 1); d.Allowed {
		t.Errorf("the same composite with its parts in another order, under the same name, admitted a request its exhausted GCRA part denies (rule: a composite keeps each part's state by its name, not its place)")
	}
	if a, b := unnamed.lim.Namespace(), f.sibling(s, algorithms.All(algorithms.FixedWindow(15, time.Minute), algorithms.GCRA(10, time.Second, 10))).lim.Namespace(); a != b {
		t.Errorf("unnamed limiters of one composite with its parts in two orders have namespaces %q and %q, want one (rule: the order of the parts never matters)", a, b)
	}
	if a, b := unnamed.lim.Namespace(), f.sibling(s, algorithms.All(algorithms.GCRA(10, time.Second, 10), algorithms.FixedWindow(16, time.Minute))).lim.Namespace(); a == b {
		t.Errorf("unnamed limiters of composites of other numbers share the namespace %q (rule: unnamed limiters of different policies never share state)", a)
	}
	unnamed.exhaust(key, 10)
	if d := other.allow(key, 10); !d.Allowed {
		t.Errorf("an unnamed composite of other parts denied its first request beside an exhausted unnamed composite (rule: unnamed limiters of different policies never share state)")
	}
}

// testCompositeReshape changes the parts of a composite under one limiter
// name, as a plan that gains a monthly limit does: a part added starts
// from no state while every other part keeps its count, parts may be
// reordered, a part removed is forgotten and the rest keep their counts,
// a part whose numbers change keeps its state, and the namespace is the
// limiter's name and "all" throughout.
func testCompositeReshape(t *testing.T, s store.Store) {
	const sec, min, day = time.Second, time.Minute, 24 * time.Hour
	gcra, window := algorithms.GCRA(10, sec, 10), algorithms.FixedWindow(15, min)
	monthly := algorithms.FixedWindow(100, 30*day)
	f := newFixture(t, s, algorithms.All(gcra, window), ratelimit.WithName("plan"))
	const key = "composite-reshape"
	remaining := func(l *fixture, what string, want ...int) {
		t.Helper()
		d, err := l.lim.Peek(context.Background(), key)
		if err != nil {
			t.Fatalf("%s: lim.Peek(%q): %v", what, key, err)
		}
		var got []int
		for _, p := range d.Limits {
			got = append(got, p.Remaining)
		}
		if fmt.Sprint(got) != fmt.Sprint(want) {
			t.Errorf("%s: the parts' remaining %v, want %v (rule: a composite keeps each part's state under its name when parts are added, removed or reordered)", what, got, want)
		}
		if ns := l.lim.Namespace(); ns != "plan:all" {
			t.Errorf("%s: namespace %q, want %q (rule: a composite's identity is its limiter's name)", what, ns, "plan:all")
		}
	}
	for range 4 {
		f.expect(key, 1, true)
	}
	remaining(f, "after 4 requests", 6, 11)
	added := f.sibling(s, algorithms.All(gcra, window, monthly), ratelimit.WithName("plan"))
	remaining(added, "a monthly part added", 6, 11, 100)
	added.expect(key, 1, true)
	remaining(added, "a monthly part added, after a request", 5, 10, 99)
	reordered := f.sibling(s, algorithms.All(monthly, window, gcra), ratelimit.WithName("plan"))
	remaining(reordered, "the parts reordered", 99, 10, 5)
	reordered.expect(key, 1, true)
	removed := f.sibling(s, algorithms.All(monthly, window), ratelimit.WithName("plan"))
	remaining(removed, "the GCRA part removed", 98, 9)
	removed.expect(key, 1, true)
	back := f.sibling(s, algorithms.All(gcra, window, monthly), ratelimit.WithName("plan"))
	// The removed part's state was carried, unread, by the writes without
	// it: put back, it has its count.
	remaining(back, "the GCRA part back after a write without it", 4, 8, 97)
	raised := f.sibling(s, algorithms.All(algorithms.GCRA(20, sec, 20), algorithms.FixedWindow(30, min), monthly), ratelimit.WithName("plan"))
	remaining(raised, "the numbers raised", 8, 23, 97) // the GCRA debt of 6 of 10 a second is 12 of 20
	// A tier (a plan) of other parts decides on the same state: its parts
	// find theirs by name.
	tier, err := f.lim.Tier(algorithms.All(monthly, algorithms.FixedWindow(30, min)))
	if err != nil {
		t.Fatalf("Tier of other parts: %v", err)
	}
	d, err := tier.Allow(context.Background(), key)
	if err != nil || !d.Allowed || len(d.Limits) != 2 || d.Limits[0].Remaining != 96 || d.Limits[1].Remaining != 22 {
		t.Errorf("a tier of a monthly part and the window raised: Allow = %+v, %v; want admitted, the parts' remaining 96 and 22", d, err)
	}
	// Two composites deciding on one key in turn (two releases during a
	// rolling deploy, two tiers) never erase each other's parts: the
	// GCRA's burst of 10 holds though every other write is a composite
	// without it.
	const two = "composite-reshape-two"
	a, b := f.sibling(s, algorithms.All(gcra, window), ratelimit.WithName("plan")), f.sibling(s, algorithms.All(monthly), ratelimit.WithName("plan"))
	for i := 1; i <= 10; i++ {
		a.expect(two, 1, true)
		b.expect(two, 1, true)
	}
	if d := a.allow(two, 1); d.Allowed {
		t.Errorf("the 11th request of a GCRA burst of 10 was admitted, every other request decided by a composite without the GCRA part (rule: a composite carries the state of parts it does not have)")
	}
	// The same at once, from many goroutines: each composite admits
	// exactly its limit, the GCRA's burst of 10 and the monthly 100.
	const both = "composite-reshape-concurrent"
	var wg sync.WaitGroup
	var byB int
	wg.Add(1)
	go func() { defer wg.Done(); byB = admitConcurrently(t, 8, 16, both, b.lim.Allow) }()
	byA := admitConcurrently(t, 8, 4, both, a.lim.Allow)
	wg.Wait()
	if byA != 10 || byB != 100 {
		t.Errorf("two composites on one key at once, at a fixed time: %d of 32 admitted by All(GCRA burst 10, ...) and %d of 128 by All(monthly 100), want exactly 10 and 100 (rule: each decision is atomic, and neither composite erases the other's parts)", byA, byB)
	}
}

// testCompositeInvalid checks that bad compositions and costs are errors.
func testCompositeInvalid(t *testing.T, s store.Store) {
	for _, alg := range []algorithms.Algorithm{
		algorithms.All(),
		algorithms.All(algorithms.GCRA(10, time.Second, 10), nil),
		algorithms.All(algorithms.All(algorithms.GCRA(10, time.Second, 10))),
		algorithms.All(algorithms.FixedWindow(-1, time.Second)),
	} {
		if _, err := ratelimit.New(s, alg); !errors.Is(err, ratelimit.ErrInvalidParams) {
			t.Errorf("ratelimit.New(%v) = %v, want an error wrapping ErrInvalidParams", alg, err)
		}
	}
	lim, err := ratelimit.New(s, composites()[0])
	if err != nil {
		t.Fatalf("ratelimit.New(%v): %v", composites()[0], err)
	}
	if _, err := lim.AllowN(context.Background(), "composite-cost", 11); !errors.Is(err, ratelimit.ErrInvalidCost) {
		t.Errorf("AllowN with cost 11 above the GCRA part's burst of 10 = %v, want ErrInvalidCost", err)
	}
}

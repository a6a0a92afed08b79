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
	"github.com/ratelimitkit/ratelimit/clock"
	"github.com/ratelimitkit/ratelimit/lease/leasewire"
	"github.com/ratelimitkit/ratelimit/store"
)

// Run runs the whole suite against stores made by newHarness, one fresh
// harness per subtest. Subtests are named Group/Path/algorithm, where Path
// is "server" for the store's Decider (or, in the Lease groups, its
// leasewire.Runner) and "update" for its Update. A store without a Decider or
// a leasewire.Runner (as the first harness shows) has no server paths: the
// groups leave them out, and one subtest, ServerPaths, skips saying why.
//
// A watchdog ends the run with a panic that names the subtest still
// running when no subtest has started or ended for Harness.Timeout
// (DefaultTimeout unless set), so a store that deadlocks is named at once
// instead of hanging until go test's -timeout.
func Run(t *testing.T, newHarness func(t *testing.T) Harness) {
	t.Helper()
	startWatchdog(t)
	watched := func(t *testing.T) Harness {
		h := newHarness(t)
		watch(t, h.Timeout)
		return h
	}
	probeStore(t, watched(t).Store)
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			watch(t, 0)
			c.run(t, watched)
		})
	}
}

type testCase struct {
	name string
	run  func(t *testing.T, newHarness func(*testing.T) Harness)
}

var cases = []testCase{
	{"Concurrency", testConcurrency},
	{"Boundaries", testBoundaries},
	{"Differential", testDifferential},
	{"DifferentialServerClock", testDifferentialServerClock},
	{"Expiry", testExpiry},
	{"StaleState", testStaleState},
	{"StaleReading", testStaleReading},
	{"Keys", testKeys},
	{"Cost", testCost},
	{"Peek", testPeek},
	{"Reset", testReset},
	{"Context", testContext},
	{"OwnAlgorithm", testOwnAlgorithm},
	{"Tiers", testTiers},
	{"Composite", testComposite},
	{"Reservation", testReservation},
	{"Export", testExport},
	{"LocalQuota", testLocalQuota},
	// The fault groups (faultgroups.go).
	{"FaultHungStore", testFaultHungStore},
	{"FaultBreaker", testFaultBreaker},
	{"FaultDoSlowReply", testFaultDoSlowReply},
	{"FaultDoPanic", testFaultDoPanic},
	{"FaultPolicy", testFaultPolicy},
}

// epoch is the fake clock's starting time: a multiple of every period the
// suite uses, so windows start there.
var epoch = time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)

// algorithm is one algorithm under test, with a limit small enough to
// exhaust quickly.
type algorithm struct {
	alg algorithms.Algorithm
	// limit is how many cost-1 requests a fresh key admits at one instant.
	limit int
	// maxTTL bounds the TTL any state of this algorithm carries.
	maxTTL time.Duration
}

// builtins returns every registered built-in algorithm (forms.Builtins)
// with 10 units per second and a burst of 10.
func builtins() []algorithm {
	var out []algorithm
	for _, b := range forms.Builtins() {
		alg := b.New(10, time.Second, 10)
		// Windows keep state for at most two periods, buckets for the
		// time to refill a whole burst.
		ttl := max(2*time.Second, time.Duration(alg.MaxCost())*time.Second/10)
		out = append(out, algorithm{alg, int(alg.MaxCost()), ttl})
	}
	return out
}

// paths are the two ways a limiter reaches a store.
type path struct {
	name string
	// wrap returns the store s as the path reaches it, for running alg.
	wrap func(t *testing.T, h Harness, s store.Store, alg algorithms.Algorithm) store.Store
}

var paths = []path{
	{"server", func(t *testing.T, h Harness, s store.Store, alg algorithms.Algorithm) store.Store {
		t.Helper()
		requireServerForm(t, h, s, alg)
		return s
	}},
	{"update", func(t *testing.T, h Harness, s store.Store, alg algorithms.Algorithm) store.Store {
		return updateOnly{s}
	}},
}

// capabilities holds, for each Run in progress (by its test's name), the
// optional interfaces its store implements, so that a group leaves out the
// subtests of one the store lacks instead of skipping them once per
// algorithm.
var capabilities sync.Map // string → storeCaps

// storeCaps says which optional interfaces a store implements.
type storeCaps struct{ decider, runner, exporter bool }

// probeStore records which optional interfaces s implements for the Run of
// t, and when it lacks Decider or leasewire.Runner (the server paths' way in)
// says so once, in a skipped subtest named ServerPaths.
func probeStore(t *testing.T, s store.Store) {
	t.Helper()
	var c storeCaps
	_, c.decider = s.(store.Decider)
	_, c.runner = s.(leasewire.Runner)
	_, c.exporter = s.(store.Exporter)
	capabilities.Store(t.Name(), c)
	t.Cleanup(func() { capabilities.Delete(t.Name()) })
	var missing []string
	if !c.decider {
		missing = append(missing, "store.Decider (the server path of every rate-limit group)")
	}
	if !c.runner {
		missing = append(missing, "lease.Runner (the server path of the Lease groups)")
	}
	if len(missing) > 0 {
		t.Run("ServerPaths", func(t *testing.T) {
			t.Skipf("%T does not implement %s: those groups run through Update alone (Group/update/...) and have no Group/server/... subtests; a store that can run code next to its data implements them (docs/writing-a-store.md)",
				s, strings.Join(missing, " or "))
		})
	}
}

// storeHas returns what the store under the Run that t belongs to
// implements; outside a Run, everything.
func storeHas(t *testing.T) storeCaps {
	name := t.Name()
	for {
		if v, ok := capabilities.Load(name); ok {
			return v.(storeCaps)
		}
		i := strings.LastIndexByte(name, '/')
		if i < 0 {
			return storeCaps{true, true, true}
		}
		name = name[:i]
	}
}

// requireServerForm skips the test when s is not a Decider or has no
// server form for alg, or fails it when the harness says s has one for
// every built-in: otherwise the server path would silently test Update.
func requireServerForm(t *testing.T, h Harness, s store.Store, alg algorithms.Algorithm) {
	t.Helper()
	dec, ok := s.(store.Decider)
	if !ok {
		t.Skip("store does not implement store.Decider")
	}
	key := store.Key{Namespace: "probe:" + alg.Name(), ID: "probe"}
	_, err := dec.Decide(context.Background(), key, alg, algorithms.Request{Now: epoch.UnixMicro(), Cost: 1, Peek: true})
	switch {
	case errors.Is(err, store.ErrUnsupported) && h.DecidesAllBuiltins:
		t.Fatalf("store.Decide(%v) = %v, but the harness sets DecidesAllBuiltins: the built-in algorithm %s has no server form, and a limiter would silently fall back to Update", alg, err, alg.Name())
	case errors.Is(err, store.ErrUnsupported):
		t.Skipf("store has no server form for %s: %v", alg.Name(), err)
	case err != nil:
		t.Fatalf("store.Decide(%v) peek on a fresh key: %v", alg, err)
	}
}

// updateOnly hides a store's Decider, so the limiter uses Update.
type updateOnly struct{ store.Store }

// forEach runs fn for every path and built-in algorithm, each on a fresh
// harness.
func forEach(t *testing.T, newHarness func(*testing.T) Harness, fn func(t *testing.T, h Harness, s store.Store, a algorithm)) {
	for _, p := range paths {
		if p.name == "server" && !storeHas(t).decider {
			continue
		}
		t.Run(p.name, func(t *testing.T) {
			for _, a := range builtins() {
				t.Run(a.alg.Name(), func(t *testing.T) {
					h := newHarness(t)
					fn(t, h, p.wrap(t, h, h.Store, a.alg), a)
				})
			}
		})
	}
}

// fixture is a limiter on a fake clock.
type fixture struct {
	t     *testing.T
	lim   *ratelimit.Limiter
	clock *clock.Fake
	start time.Time
}

func newFixture(t *testing.T, s store.Store, alg algorithms.Algorithm, opts ...ratelimit.Option) *fixture {
	t.Helper()
	watch(t, 0)
	c := clock.NewFake(epoch)
	lim, err := ratelimit.New(s, alg, append([]ratelimit.Option{ratelimit.WithClock(c)}, opts...)...)
	if err != nil {
		t.Fatalf("ratelimit.New(%v): %v", alg, err)
	}
	return &fixture{t: t, lim: lim, clock: c, start: epoch}
}

// sibling returns a fixture for another limiter on the same fake clock.
func (f *fixture) sibling(s store.Store, alg algorithms.Algorithm, opts ...ratelimit.Option) *fixture {
	f.t.Helper()
	lim, err := ratelimit.New(s, alg, append([]ratelimit.Option{ratelimit.WithClock(f.clock)}, opts...)...)
	if err != nil {
		f.t.Fatalf("ratelimit.New(%v): %v", alg, err)
	}
	return &fixture{t: f.t, lim: lim, clock: f.clock, start: f.start}
}

func (f *fixture) at() string { return "t+" + f.clock.Now().Sub(f.start).String() }

// allow calls AllowN and fails the test on an error.
func (f *fixture) allow(key string, n int) ratelimit.Decision {
	f.t.Helper()
	d, err := f.lim.AllowN(context.Background(), key, n)
	if err != nil {
		f.t.Fatalf("lim.AllowN(%q, %d) at %s: %v", key, n, f.at(), err)
	}
	return d
}

// expect calls AllowN and checks whether it was allowed.
func (f *fixture) expect(key string, n int, want bool) ratelimit.Decision {
	f.t.Helper()
	d := f.allow(key, n)
	if d.Allowed != want {
		f.t.Errorf("lim.AllowN(%q, %d) at %s = %s, want %s (remaining %d, retry after %v)",
			key, n, f.at(), verdict(d.Allowed), verdict(want), d.Remaining, d.RetryAfter)
	}
	return d
}

func verdict(allowed bool) string {
	if allowed {
		return "allowed"
	}
	return "denied"
}

// exhaust admits a.limit cost-1 requests for key and checks the next is
// denied.
func (f *fixture) exhaust(key string, limit int) {
	f.t.Helper()
	for i := 0; i < limit; i++ {
		f.expect(key, 1, true)
	}
	f.expect(key, 1, false)
}

// testConcurrency checks exact admission with many goroutines on one key,
// on a key that exists and on one that does not yet (the first-create
// race). The clock stands still, so exactly the limit must be admitted.
func testConcurrency(t *testing.T, newHarness func(*testing.T) Harness) {
	forEach(t, newHarness, func(t *testing.T, h Harness, s store.Store, a algorithm) {
		for _, existing := range []bool{false, true} {
			name := "new-key"
			if existing {
				name = "existing-key"
			}
			t.Run(name, func(t *testing.T) {
				f := newFixture(t, s, a.alg)
				key := "concurrent-" + name
				admitted := 0
				if existing {
					f.expect(key, 1, true)
					admitted++
				}
				const workers, each = 16, 4
				allows, where := f.instances(h, s, a.alg)
				admitted += admitConcurrently(t, workers, each, key, allows...)
				if admitted != a.limit {
					t.Errorf("%d goroutines × %d lim.Allow(%q) at a fixed time%s admitted %d, want exactly %d (rule: the store's read-modify-write is atomic, across instances too)",
						workers, each, key, where, admitted, a.limit)
				}
			})
		}
	})
}

// allowFunc is a limiter's (or a tier's) Allow.
type allowFunc = func(context.Context, string) (ratelimit.Decision, error)

// twinOf returns a second instance of the store under test (Harness.Twin)
// as the path that made s reaches it, or nil when the harness has none.
func twinOf(t *testing.T, h Harness, s store.Store) store.Store {
	t.Helper()
	if h.Twin == nil {
		return nil
	}
	tw := h.Twin(t)
	if _, ok := s.(updateOnly); ok {
		return updateOnly{tw}
	}
	return tw
}

// instances returns the Allow of f's limiter and, when the harness has a
// Twin, of a limiter with the same name and clock on the second instance,
// as two processes sharing the store would have; and a phrase for
// messages saying which ran.
func (f *fixture) instances(h Harness, s store.Store, alg algorithms.Algorithm, opts ...ratelimit.Option) ([]allowFunc, string) {
	f.t.Helper()
	allows := []allowFunc{f.lim.Allow}
	tw := twinOf(f.t, h, s)
	if tw == nil {
		return allows, " on one store instance (the harness has no Twin)"
	}
	return append(allows, f.sibling(tw, alg, opts...).lim.Allow), " on two store instances (Store and Twin, as two processes)"
}

// admitConcurrently calls allow(key) each times from each of workers
// goroutines, all started at once, and returns how many were admitted;
// errors fail the test. With several allows (limiters on separate store
// instances), worker w calls allow[w%len(allow)].
func admitConcurrently(t *testing.T, workers, each int, key string, allow ...allowFunc) int {
	t.Helper()
	var mu sync.Mutex
	var wg sync.WaitGroup
	var errs []error
	admitted := 0
	start := make(chan struct{})
	for w := range workers {
		wg.Add(1)
		allow := allow[w%len(allow)]
		go func() {
			defer wg.Done()
			<-start
			for range each {
				d, err := allow(context.Background(), key)
				mu.Lock()
				if err != nil {
					errs = append(errs, err)
				} else if d.Allowed {
					admitted++
				}
				mu.Unlock()
			}
		}()
	}
	close(start)
	wg.Wait()
	for _, err := range errs {
		t.Errorf("Allow(%q) from %d goroutines: %v", key, workers, err)
	}
	return admitted
}

// boundaryStep is one scripted request: advance the clock, then ask.
type boundaryStep struct {
	advance   time.Duration
	cost      int
	allowed   bool
	remaining int           // checked when allowed
	delay     time.Duration // checked when allowed
	retry     time.Duration // checked when denied
}

// boundaryCase is a scripted sequence and the rule it checks.
type boundaryCase struct {
	name  string
	rule  string
	alg   algorithms.Algorithm
	steps []boundaryStep
}

func boundaryCases() []boundaryCase {
	const ms, s = time.Millisecond, time.Second
	fill := func(n int, limit int) []boundaryStep {
		var steps []boundaryStep
		for i := 1; i <= n; i++ {
			steps = append(steps, boundaryStep{cost: 1, allowed: true, remaining: limit - i})
		}
		return steps
	}
	cat := func(parts ...[]boundaryStep) []boundaryStep {
		var all []boundaryStep
		for _, p := range parts {
			all = append(all, p...)
		}
		return all
	}
	return []boundaryCase{
		{"fixed_window/boundary-burst", "a fixed window resets at the boundary, so it admits the limit on each side of it",
			algorithms.FixedWindow(3, s), cat(
				[]boundaryStep{{advance: 900 * ms, cost: 1, allowed: true, remaining: 2}},
				[]boundaryStep{{cost: 2, allowed: true, remaining: 0}, {advance: 99 * ms, cost: 1, allowed: false, retry: ms}},
				[]boundaryStep{{advance: ms, cost: 3, allowed: true, remaining: 0}, {advance: 999 * ms, cost: 1, allowed: false, retry: ms}},
			)},
		{"sliding_log/exact-window", "a sliding log counts exactly the requests of the last period",
			algorithms.SlidingLog(3, s), []boundaryStep{
				{advance: 0, cost: 1, allowed: true, remaining: 2},
				{advance: 500 * ms, cost: 2, allowed: true, remaining: 0},
				{advance: 499 * ms, cost: 1, allowed: false, retry: ms},
				{advance: ms, cost: 1, allowed: true, remaining: 0},
				{advance: 499 * ms, cost: 2, allowed: false, retry: ms},
				{advance: ms, cost: 2, allowed: true, remaining: 0},
			}},
		{"sliding_log/same-microsecond", "two requests in the same microsecond are two log entries",
			algorithms.SlidingLog(2, s), []boundaryStep{
				{cost: 1, allowed: true, remaining: 1},
				{cost: 1, allowed: true, remaining: 0},
				{cost: 1, allowed: false, retry: s},
			}},
		{"sliding_window/weighted", "the previous window counts in proportion to its overlap with the last period",
			algorithms.SlidingWindow(10, s), []boundaryStep{
				{advance: 500 * ms, cost: 10, allowed: true, remaining: 0},
				{advance: 500 * ms, cost: 1, allowed: false, retry: time.Microsecond}, // floor(10 × 1.0) = 10
				{advance: 100 * ms, cost: 1, allowed: true, remaining: 0},             // floor(10 × 0.9) + 1 = 10
				{cost: 1, allowed: false, retry: time.Microsecond},
				{advance: 400 * ms, cost: 4, allowed: true, remaining: 0}, // floor(10 × 0.5) + 1 + 4 = 10
				{advance: 500 * ms, cost: 5, allowed: true, remaining: 0}, // new window: floor(5 × 1.0) + 5
				{cost: 6, allowed: false, retry: s + time.Microsecond},    // needs the next window
			}},
		{"token_bucket/refill", "a token bucket admits the burst at once, then refills limit per period",
			algorithms.TokenBucket(2, s, 4), cat(fill(4, 4), []boundaryStep{
				{cost: 1, allowed: false, retry: 500 * ms},
				{advance: 499 * ms, cost: 1, allowed: false, retry: ms},
				{advance: ms, cost: 1, allowed: true, remaining: 0},
				{advance: 5 * s, cost: 4, allowed: true, remaining: 0},
			})},
		{"token_bucket/uneven-rate", "the refill is exact when period/limit is not a whole number of microseconds",
			algorithms.TokenBucket(3, s, 1), []boundaryStep{
				{cost: 1, allowed: true, remaining: 0},
				{advance: 333333 * time.Microsecond, cost: 1, allowed: false, retry: time.Microsecond}, // 1/3 s is 333333.33 µs
				{advance: time.Microsecond, cost: 1, allowed: true, remaining: 0},
				{advance: 333332 * time.Microsecond, cost: 1, allowed: false, retry: 2 * time.Microsecond},
			}},
		{"leaky_bucket/shaping", "a leaky bucket admits up to its capacity and spaces requests one interval apart",
			algorithms.LeakyBucket(2, s, 3), []boundaryStep{
				{cost: 1, allowed: true, remaining: 2},
				{cost: 1, allowed: true, remaining: 1, delay: 500 * ms},
				{cost: 1, allowed: true, remaining: 0, delay: s},
				{cost: 1, allowed: false, retry: 500 * ms},
				{advance: 500 * ms, cost: 1, allowed: true, remaining: 0, delay: s},
			}},
		{"gcra/burst-then-rate", "GCRA admits the burst, then one request per interval",
			algorithms.GCRA(10, s, 2), []boundaryStep{
				{cost: 1, allowed: true, remaining: 1},
				{cost: 1, allowed: true, remaining: 0},
				{cost: 1, allowed: false, retry: 100 * ms},
				{advance: 99 * ms, cost: 1, allowed: false, retry: ms},
				{advance: ms, cost: 1, allowed: true, remaining: 0},
				{advance: 200 * ms, cost: 2, allowed: true, remaining: 0},
			}},
	}
}

// testBoundaries runs scripted sequences at window and refill edges.
func testBoundaries(t *testing.T, newHarness func(*testing.T) Harness) {
	for _, p := range paths {
		if p.name == "server" && !storeHas(t).decider {
			continue
		}
		t.Run(p.name, func(t *testing.T) {
			for _, bc := range boundaryCases() {
				t.Run(bc.name, func(t *testing.T) {
					h := newHarness(t)
					f := newFixture(t, p.wrap(t, h, h.Store, bc.alg), bc.alg)
					for i, st := range bc.steps {
						f.clock.Advance(st.advance)
						d := f.allow("boundary", st.cost)
						switch {
						case d.Allowed != st.allowed:
							t.Fatalf("step %d: lim.AllowN(key, %d) at %s = %s, want %s (remaining %d, retry after %v); rule: %s",
								i, st.cost, f.at(), verdict(d.Allowed), verdict(st.allowed), d.Remaining, d.RetryAfter, bc.rule)
						case st.allowed && d.Remaining != st.remaining:
							t.Fatalf("step %d: lim.AllowN(key, %d) at %s = allowed with remaining %d, want %d; rule: %s",
								i, st.cost, f.at(), d.Remaining, st.remaining, bc.rule)
						case st.allowed && d.Delay != st.delay:
							t.Fatalf("step %d: lim.AllowN(key, %d) at %s = allowed with delay %v, want %v; rule: %s",
								i, st.cost, f.at(), d.Delay, st.delay, bc.rule)
						case !st.allowed && d.RetryAfter != st.retry:
							t.Fatalf("step %d: lim.AllowN(key, %d) at %s = denied with retry after %v, want %v; rule: %s",
								i, st.cost, f.at(), d.RetryAfter, st.retry, bc.rule)
						}
					}
				})
			}
		})
	}
}

// testExpiry checks that every key the store writes carries an expiry no
// longer than the state needs, and that state expires.
func testExpiry(t *testing.T, newHarness func(*testing.T) Harness) {
	forEach(t, newHarness, func(t *testing.T, h Harness, s store.Store, a algorithm) {
		if h.Expiries == nil {
			t.Skip("harness has no Expiries: cannot list the backend's keys")
		}
		f := newFixture(t, s, a.alg)
		for i := 0; i < 20; i++ {
			key := fmt.Sprintf("expiry-%d", i)
			for j := 0; j <= i%3; j++ {
				f.allow(key, 1)
			}
			f.clock.Advance(3 * time.Millisecond)
		}
		ctx := context.Background()
		check := func(when string, expired bool) {
			t.Helper()
			list, err := h.Expiries(ctx)
			if err != nil {
				t.Fatalf("Expiries: %v", err)
			}
			if !expired && len(list) == 0 {
				t.Fatalf("%s: Expiries lists no keys after 20 keys were written", when)
			}
			now := f.clock.Now()
			// A second of allowance; a backend on the real clock may
			// also keep a key up to its TTL again (see RealTimeExpiry).
			most := a.maxTTL + time.Second
			if h.RealTimeExpiry {
				now = time.Now()
				most += a.maxTTL
			}
			for _, e := range list {
				switch {
				case e.Never:
					t.Errorf("%s: backend key %q has no expiry (rule: every key written carries one)", when, e.Key)
				case !expired && e.At.Sub(now) > most:
					t.Errorf("%s: backend key %q expires in %v, more than the state needs (%v, at most %v with allowances)", when, e.Key, e.At.Sub(now), a.maxTTL, most)
				case expired && e.At.After(now):
					t.Errorf("%s: backend key %q still expires in %v", when, e.Key, e.At.Sub(now))
				}
			}
		}
		check("after writes", false)
		if h.RealTimeExpiry {
			// The backend's TTLs run on the real clock; a short policy
			// shows them firing.
			short := newFixture(t, s, shortVersion(a.alg), ratelimit.WithName("short"))
			short.allow("short-lived", 1)
			time.Sleep(250 * time.Millisecond)
			list, err := h.Expiries(ctx)
			if err != nil {
				t.Fatalf("Expiries: %v", err)
			}
			for _, e := range list {
				if strings.Contains(e.Key, "short-lived") && !e.Never && e.At.After(time.Now()) {
					t.Errorf("backend key %q of a 100ms policy still expires in %v after 250ms", e.Key, time.Until(e.At))
				}
			}
			return
		}
		f.clock.Advance(a.maxTTL + time.Millisecond)
		f.allow("expiry-trigger", 1) // stores that judge expiry by request time see the new time
		f.clock.Advance(a.maxTTL + time.Millisecond)
		f.allow("expiry-trigger-2", 1)
		list, err := h.Expiries(ctx)
		if err != nil {
			t.Fatalf("Expiries: %v", err)
		}
		for _, e := range list {
			if e.Never {
				t.Errorf("backend key %q has no expiry", e.Key)
			} else if strings.Contains(e.Key, "expiry-") && !strings.Contains(e.Key, "trigger") && e.At.After(f.clock.Now()) {
				t.Errorf("backend key %q still expires in %v after its TTL passed", e.Key, e.At.Sub(f.clock.Now()))
			}
		}
	})
}

// shortVersion returns alg's kind with a 50ms period and a burst of 1, so
// that its state lives at most 100ms.
func shortVersion(alg algorithms.Algorithm) algorithms.Algorithm {
	return forms.BuiltinOf(alg).New(10, 50*time.Millisecond, 1)
}

// testStaleState checks that decisions stay right when the backend keeps
// state past its TTL: with the fake clock moved far ahead, real time has
// not passed, so a backend that expires by real time still holds the old
// state, and the algorithm must recognise it as stale. The built-ins carry
// their own timestamps and would decide right on expired state too; the
// "expired" subtest uses an algorithm whose state holds no time (a count
// that only its TTL ends), so it fails a store whose Update hands back
// state its TTL has passed.
func testStaleState(t *testing.T, newHarness func(*testing.T) Harness) {
	t.Run("expired", func(t *testing.T) {
		h := newHarness(t)
		a := ownAlgorithm{limit: 3}
		f := newFixture(t, h.Store, a, ratelimit.WithName("stale"))
		f.exhaust("stale", int(a.limit))
		f.clock.Advance(time.Hour) // the count's TTL: it has passed now
		d := f.expect("stale", 1, true)
		if d.Remaining != int(a.limit)-1 {
			t.Errorf("lim.Allow(key) of a count with a 1h TTL, 1h after it was written = remaining %d, want %d (rule: Update hands fn nil when the state's TTL has passed)",
				d.Remaining, a.limit-1)
		}
	})
	forEach(t, newHarness, func(t *testing.T, h Harness, s store.Store, a algorithm) {
		f := newFixture(t, s, a.alg)
		f.exhaust("stale", a.limit)
		f.clock.Advance(10 * a.maxTTL)
		d := f.expect("stale", 1, true)
		if d.Remaining != a.limit-1 {
			t.Errorf("lim.Allow(key) after %v idle = remaining %d, want %d (rule: correctness never depends on a TTL firing)",
				10*a.maxTTL, d.Remaining, a.limit-1)
		}
	})
}

// testKeys checks key isolation, odd keys and namespacing.
func testKeys(t *testing.T, newHarness func(*testing.T) Harness) {
	odd := []string{
		"{user}", "a}b{c", "}{", "{}", "with space", " ", "tab\tand\nnewline", "ünïcödé-キー-🔑",
		"\x00", "\x00\xff\xfe binary", "a:b", "a:", ":a", "*", "?", "%s", "'; DROP TABLE x; --",
		strings.Repeat("k", store.MaxKeyLen),
	}
	forEach(t, newHarness, func(t *testing.T, h Harness, s store.Store, a algorithm) {
		t.Run("odd-keys", func(t *testing.T) {
			f := newFixture(t, s, a.alg)
			for _, k := range odd {
				f.expect(k, a.limit, true)
			}
			for _, k := range odd {
				d := f.expect(k, 1, false)
				if d.Remaining != 0 {
					t.Errorf("lim.Allow(%q) after %d = remaining %d, want 0", k, a.limit, d.Remaining)
				}
			}
			f.expect("fresh", a.limit, true)
		})
		t.Run("invalid", func(t *testing.T) {
			f := newFixture(t, s, a.alg)
			for _, k := range []string{"", strings.Repeat("k", store.MaxKeyLen+1)} {
				if _, err := f.lim.Allow(context.Background(), k); !errors.Is(err, ratelimit.ErrInvalidKey) {
					t.Errorf("lim.Allow(key of %d bytes) error = %v, want ErrInvalidKey", len(k), err)
				}
			}
		})
		t.Run("isolation", func(t *testing.T) {
			f := newFixture(t, s, a.alg, ratelimit.WithName("one"))
			f.exhaust("shared-id", a.limit)
			f.expect("shared-id2", 1, true)
			other := newFixture(t, s, a.alg, ratelimit.WithName("two"))
			other.expect("shared-id", 1, true)
			same := newFixture(t, s, a.alg, ratelimit.WithName("one"))
			same.expect("shared-id", 1, false)
		})
	})
}

// testCost checks requests that cost more than one.
func testCost(t *testing.T, newHarness func(*testing.T) Harness) {
	forEach(t, newHarness, func(t *testing.T, h Harness, s store.Store, a algorithm) {
		f := newFixture(t, s, a.alg)
		d := f.expect("cost", 3, true)
		if d.Remaining != a.limit-3 {
			t.Errorf("lim.AllowN(key, 3) = remaining %d, want %d", d.Remaining, a.limit-3)
		}
		d = f.expect("cost", a.limit-2, false)
		if d.Remaining != a.limit-3 {
			t.Errorf("denied lim.AllowN(key, %d) = remaining %d, want %d (a denied request consumes nothing)", a.limit-2, d.Remaining, a.limit-3)
		}
		f.expect("cost", a.limit-3, true)
		f.expect("cost", 1, false)
		f.expect("whole", a.limit, true)
		for _, n := range []int{0, -1, a.limit + 1} {
			if _, err := f.lim.AllowN(context.Background(), "cost", n); !errors.Is(err, ratelimit.ErrInvalidCost) {
				t.Errorf("lim.AllowN(key, %d) error = %v, want ErrInvalidCost", n, err)
			}
		}
	})
}

// testPeek checks that Peek consumes nothing and writes nothing new.
func testPeek(t *testing.T, newHarness func(*testing.T) Harness) {
	forEach(t, newHarness, func(t *testing.T, h Harness, s store.Store, a algorithm) {
		f := newFixture(t, s, a.alg)
		for i := 0; i < a.limit*2; i++ {
			d, err := f.lim.Peek(context.Background(), "peek")
			if err != nil {
				t.Fatalf("lim.Peek(key): %v", err)
			}
			if !d.Allowed || d.Remaining != a.limit {
				t.Fatalf("lim.Peek(key) #%d on a fresh key = %s with remaining %d, want allowed with %d", i, verdict(d.Allowed), d.Remaining, a.limit)
			}
		}
		if h.Expiries != nil {
			list, err := h.Expiries(context.Background())
			if err != nil {
				t.Fatalf("Expiries: %v", err)
			}
			if len(list) != 0 {
				t.Errorf("after only lim.Peek, the backend holds %d keys (first %q), want none", len(list), list[0].Key)
			}
		}
		f.exhaust("peek", a.limit)
		d, err := f.lim.Peek(context.Background(), "peek")
		if err != nil {
			t.Fatalf("lim.Peek(key): %v", err)
		}
		if d.Allowed || d.Remaining != 0 || d.RetryAfter <= 0 {
			t.Errorf("lim.Peek(key) when exhausted = %s, remaining %d, retry after %v; want denied, 0, positive", verdict(d.Allowed), d.Remaining, d.RetryAfter)
		}
	})
}

// testReset checks that Reset forgets a key, and only that key; and, with
// a Twin, that another instance sees it within Harness.Staleness.
func testReset(t *testing.T, newHarness func(*testing.T) Harness) {
	forEach(t, newHarness, func(t *testing.T, h Harness, s store.Store, a algorithm) {
		f := newFixture(t, s, a.alg)
		f.exhaust("reset", a.limit)
		f.exhaust("kept", a.limit)
		if err := f.lim.Reset(context.Background(), "reset"); err != nil {
			t.Fatalf("lim.Reset(key): %v", err)
		}
		if err := f.lim.Reset(context.Background(), "never-used"); err != nil {
			t.Errorf("lim.Reset(missing key): %v, want nil", err)
		}
		d := f.expect("reset", 1, true)
		if d.Remaining != a.limit-1 {
			t.Errorf("lim.Allow(key) after Reset = remaining %d, want %d", d.Remaining, a.limit-1)
		}
		f.expect("kept", 1, false)
		// Another instance that denied the key from what it saw admits
		// once the store's staleness bound has passed on the clock.
		tw := twinOf(t, h, s)
		if tw == nil {
			return
		}
		g := f.sibling(tw, a.alg)
		f.exhaust("other", a.limit)
		g.expect("other", 1, false)
		if err := f.lim.Reset(context.Background(), "other"); err != nil {
			t.Fatalf("lim.Reset(key): %v", err)
		}
		f.clock.Advance(h.Staleness)
		if d := g.allow("other", 1); !d.Allowed {
			t.Errorf("the Twin's lim.Allow(key) %v after the Store's lim.Reset(key) (Harness.Staleness) = denied (retry after %v), want allowed: another instance's Reset must be seen within the store's documented bound", h.Staleness, d.RetryAfter)
		}
	})
}

// testContext checks that a store gives up when the context ends.
func testContext(t *testing.T, newHarness func(*testing.T) Harness) {
	h := newHarness(t)
	key := store.Key{Namespace: "ctx:gcra", ID: "ctx"}
	alg := algorithms.GCRA(1, time.Second, 1)
	now := epoch.UnixMicro()
	canceled, cancel := context.WithCancel(context.Background())
	cancel()
	expired, cancel2 := context.WithDeadline(context.Background(), time.Now().Add(-time.Second))
	defer cancel2()
	for _, c := range []struct {
		name string
		ctx  context.Context
		want error
	}{{"canceled", canceled, context.Canceled}, {"deadline", expired, context.DeadlineExceeded}} {
		t.Run(c.name, func(t *testing.T) {
			called := false
			err := h.Store.Update(c.ctx, key, now, func(cur []byte, now int64) ([]byte, int64, error) {
				called = true
				st, err := alg.Decide(cur, algorithms.Request{Now: now, Cost: 1})
				return st.Next, st.TTL, err
			})
			if !errors.Is(err, c.want) {
				t.Errorf("store.Update with a %s context = %v, want an error wrapping %v", c.name, err, c.want)
			}
			_ = called // a store may or may not call fn before noticing; it must not report success
			if err := h.Store.Delete(c.ctx, key); !errors.Is(err, c.want) {
				t.Errorf("store.Delete with a %s context = %v, want an error wrapping %v", c.name, err, c.want)
			}
			if dec, ok := h.Store.(store.Decider); ok {
				_, err := dec.Decide(c.ctx, key, alg, algorithms.Request{Now: now, Cost: 1})
				if !errors.Is(err, c.want) {
					t.Errorf("store.Decide with a %s context = %v, want an error wrapping %v", c.name, err, c.want)
				}
			}
		})
	}
	// Nothing was admitted by the failed calls.
	f := newFixture(t, h.Store, alg, ratelimit.WithName("ctx"))
	f.expect("ctx", 1, true)
}

// ownAlgorithm is a user's algorithm with no server-side form: at most
// limit requests ever, with the count as a decimal string.
type ownAlgorithm struct{ limit int64 }

func (a ownAlgorithm) Name() string    { return "own_counter" }
func (a ownAlgorithm) Validate() error { return nil }
func (a ownAlgorithm) MaxCost() int64  { return a.limit }
func (a ownAlgorithm) Decide(state []byte, req algorithms.Request) (algorithms.Step, error) {
	var n int64
	if state != nil {
		if _, err := fmt.Sscanf(string(state), "%d", &n); err != nil {
			return algorithms.Step{}, fmt.Errorf("%w: %q", algorithms.ErrCorruptState, state)
		}
	}
	d := algorithms.Decision{Limit: a.limit, Allowed: n+req.Cost <= a.limit, ResetAfter: int64(time.Hour / time.Microsecond)}
	if d.Allowed && !req.Peek {
		n += req.Cost
	}
	d.Remaining = a.limit - n
	if !d.Allowed {
		d.RetryAfter = d.ResetAfter // at most: the count lives an hour
	}
	if !d.Allowed || req.Peek {
		return algorithms.Step{Decision: d}, nil
	}
	return algorithms.Step{Decision: d, Next: fmt.Appendf(nil, "%d", n), TTL: d.ResetAfter}, nil
}

// testOwnAlgorithm checks that an algorithm without a server-side form runs
// on the store through Update, exactly, under concurrency.
func testOwnAlgorithm(t *testing.T, newHarness func(*testing.T) Harness) {
	h := newHarness(t)
	f := newFixture(t, h.Store, ownAlgorithm{limit: 25})
	allows, where := f.instances(h, h.Store, ownAlgorithm{limit: 25})
	admitted := admitConcurrently(t, 10, 5, "own", allows...)
	if admitted != 25 {
		t.Errorf("10 goroutines × 5 lim.Allow(key) with a user's algorithm of limit 25%s admitted %d, want 25", where, admitted)
	}
}

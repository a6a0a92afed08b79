package conformance

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ratelimitkit/ratelimit"
	"github.com/ratelimitkit/ratelimit/algorithms"
	"github.com/ratelimitkit/ratelimit/store"
)

// The StaleReading group holds a store to the rule for a request whose
// clock reading is older than the state it reads (several processes'
// clocks, or a request that read the clock and then waited for the key):
// it never gives back what it did not take, and the state it leaves
// expires no earlier than its latest time says. On the fake clock: a key
// spent at T, then one request read at T−δ (δ of 600 ms and 2 s), then
// the key asked at T and every 50 ms for 3 s must admit no more than the
// model, the Go form on a key that saw that request at T (the latest
// time it had seen); and the store's expiry for the key must be at least
// T plus the ResetAfter a peek at T reports. In real time: GCRA and the
// token bucket at 200/s with a burst of 5, 48 goroutines for one second,
// admit at most the burst plus the rate over the span.

// staleCase is one algorithm and how much of it is spent at T.
type staleCase struct {
	alg   algorithms.Algorithm
	spend int
}

// staleCases returns every built-in (10 per second, burst 10) spent to one
// below its limit and to its limit, and the figures issue 29 measured:
// GCRA(200/s, burst 50) spent, the token and leaky bucket (10/s, 20) and a
// composite of the token bucket with a sliding log, spent to one below.
func staleCases() []staleCase {
	const s = time.Second
	var out []staleCase
	for _, a := range builtins() {
		out = append(out, staleCase{a.alg, a.limit - 1}, staleCase{a.alg, a.limit})
	}
	return append(out,
		staleCase{algorithms.GCRA(200, s, 50), 50},
		staleCase{algorithms.TokenBucket(10, s, 20), 19},
		staleCase{algorithms.LeakyBucket(10, s, 20), 19},
		staleCase{algorithms.All(algorithms.TokenBucket(10, s, 20), algorithms.SlidingLog(1000, s)), 19},
	)
}

func testStaleReading(t *testing.T, newHarness func(*testing.T) Harness) {
	for _, p := range paths {
		if p.name == "server" && !storeHas(t).decider {
			continue
		}
		t.Run(p.name, func(t *testing.T) {
			for i, c := range staleCases() {
				for _, stale := range []time.Duration{600 * time.Millisecond, 2 * time.Second} {
					t.Run(fmt.Sprintf("%s-%d-spent-%d/%v", c.alg.Name(), i, c.spend, stale), func(t *testing.T) {
						h := newHarness(t)
						staleSequence(t, h, p.wrap(t, h, h.Store, c.alg), c, stale)
					})
				}
			}
			t.Run("contended", func(t *testing.T) {
				for _, alg := range []algorithms.Algorithm{algorithms.GCRA(200, time.Second, 5), algorithms.TokenBucket(200, time.Second, 5)} {
					t.Run(alg.Name(), func(t *testing.T) {
						h := newHarness(t)
						staleContended(t, p.wrap(t, h, h.Store, alg), alg, 200, 5)
					})
				}
			})
		})
	}
}

// staleSequence runs the fake-clock sequence of the group's doc comment.
func staleSequence(t *testing.T, h Harness, s store.Store, c staleCase, stale time.Duration) {
	ctx := context.Background()
	f := newFixture(t, s, c.alg, ratelimit.WithName("stale-reading"))
	const id = "stale-reading"
	f.clock.Advance(10*time.Second + 300*time.Millisecond) // mid-window: T−δ lies in the window before for 600 ms
	T := f.clock.Now()
	var model staleModel
	for range c.spend {
		f.allow(id, 1)
		model.do(t, c.alg, algorithms.Request{Now: T.UnixMicro(), Cost: 1})
	}
	f.clock.Set(T.Add(-stale))
	old := f.allow(id, 1)
	f.clock.Set(T)
	if old.Allowed {
		model.do(t, c.alg, algorithms.Request{Now: T.UnixMicro(), Cost: 1})
	}
	// The state's expiry covers its latest time, T.
	peek, err := f.lim.Peek(ctx, id)
	if err != nil {
		t.Fatalf("lim.Peek(%q) at %s: %v", id, f.at(), err)
	}
	if exp, ok := staleExpiry(t, h, f, id); ok && exp.Before(T.Add(peek.ResetAfter)) {
		t.Errorf("after %d admitted at T and one request read at T−%v (%s), the key expires at T%+v, before T+%v, when a peek at T says it is back to rest (rule: the state's expiry covers its latest time)",
			c.spend, stale, verdict(old.Allowed), exp.Sub(T), peek.ResetAfter)
	}
	total, bound := 0, 0
	for at := T; !at.After(T.Add(3 * time.Second)); at = at.Add(50 * time.Millisecond) {
		f.clock.Set(at)
		for n := 0; ; n++ {
			if n > 1000 {
				t.Fatalf("%v admitted more than 1000 requests for %q at %s", c.alg, id, f.at())
			}
			if !f.allow(id, 1).Allowed {
				break
			}
			total++
		}
		bound += model.admitAll(t, c.alg, at.UnixMicro())
		if total > bound {
			t.Fatalf("%v: after %d admitted at T and one request read at T−%v (%s), the key admits %d from T to T+%v; the model, that request taken at T, admits %d (rule: a reading older than the state never gives back what it did not take)",
				c.alg, c.spend, stale, verdict(old.Allowed), total, at.Sub(T), bound)
		}
	}
	if err := f.lim.Reset(ctx, id); err != nil {
		t.Fatalf("lim.Reset(%q): %v", id, err)
	}
}

// staleExpiry returns when the store's state for id expires on the
// limiter's clock: from Harness.State, or from Harness.Expiries on a
// backend that expires by the limiter's clock. It reports false, saying
// why once, when the harness offers neither.
func staleExpiry(t *testing.T, h Harness, f *fixture, id string) (time.Time, bool) {
	t.Helper()
	ctx := context.Background()
	if h.State != nil {
		st, exp, err := h.State(ctx, store.Key{Namespace: f.lim.Namespace(), ID: id})
		if err != nil {
			t.Fatalf("Harness.State(%q): %v", id, err)
		}
		return time.UnixMicro(exp), st != nil
	}
	if h.Expiries != nil && !h.RealTimeExpiry {
		list, err := h.Expiries(ctx)
		if err != nil {
			t.Fatalf("Expiries: %v", err)
		}
		for _, e := range list {
			if strings.Contains(e.Key, id) && !e.Never {
				return e.At, true
			}
		}
		return time.Time{}, false
	}
	t.Log("harness has neither State nor Expiries on the limiter's clock: the expiry is not checked")
	return time.Time{}, false
}

// staleModel is the Go form on one key, its state kept as a store keeps
// it (expiry now + TTL).
type staleModel struct {
	state   []byte
	expires int64
}

func (m *staleModel) do(t *testing.T, alg algorithms.Algorithm, req algorithms.Request) bool {
	t.Helper()
	var state []byte
	if m.state != nil && req.Now < m.expires {
		state = append([]byte(nil), m.state...)
	}
	st, err := alg.Decide(state, req)
	if err != nil {
		t.Fatalf("Go form %v: Decide(%+v): %v", alg, req, err)
	}
	if st.Next != nil {
		m.state, m.expires = append([]byte(nil), st.Next...), req.Now+st.TTL
	}
	return st.Decision.Allowed
}

func (m *staleModel) admitAll(t *testing.T, alg algorithms.Algorithm, now int64) int {
	t.Helper()
	n := 0
	for n <= 1000 && m.do(t, alg, algorithms.Request{Now: now, Cost: 1}) {
		n++
	}
	return n
}

// staleContended runs 48 goroutines on one key on the real clock for a
// second, where readings reach the store out of order (a goroutine reads
// the clock, then waits for the key), and checks the bucket's promise:
// at most burst + rate × span admitted.
func staleContended(t *testing.T, s store.Store, alg algorithms.Algorithm, rate, burst int64) {
	// 48 callers queue on one key: on a store whose Update is a row-locking
	// transaction, a loaded machine takes each caller past the default 1s
	// budget, which is not what this group checks (the promise is).
	lim, err := ratelimit.New(s, alg, ratelimit.WithName("stale-contended"), ratelimit.WithStoreTimeout(time.Minute))
	if err != nil {
		t.Fatalf("ratelimit.New(%v): %v", alg, err)
	}
	ctx := context.Background()
	const id = "stale-contended"
	var admitted, calls atomic.Int64
	var failed atomic.Value
	start := time.Now()
	stop := start.Add(time.Second)
	var wg sync.WaitGroup
	for range 48 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for time.Now().Before(stop) {
				d, err := lim.Allow(ctx, id)
				if err != nil {
					failed.CompareAndSwap(nil, err.Error())
					return
				}
				calls.Add(1)
				if d.Allowed {
					admitted.Add(1)
				}
			}
		}()
	}
	wg.Wait()
	span := time.Since(start)
	if msg := failed.Load(); msg != nil {
		t.Fatalf("lim.Allow(%q): %v", id, msg)
	}
	most := burst + int64(float64(rate)*span.Seconds())
	t.Logf("%v: 48 goroutines for %v: %d admitted of %d calls; at most %d", alg, span.Round(time.Millisecond), admitted.Load(), calls.Load(), most)
	if n := admitted.Load(); n > most {
		t.Errorf("%v: 48 goroutines for %v admitted %d of %d; at most %d = burst %d + %d/s × the span (rule: readings that reach the key out of order never give back)",
			alg, span, n, calls.Load(), most, burst, rate)
	}
	if err := lim.Reset(ctx, id); err != nil {
		t.Fatalf("lim.Reset(%q): %v", id, err)
	}
}

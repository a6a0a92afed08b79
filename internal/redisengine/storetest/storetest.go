// Package storetest holds the tests the Redis and Valkey stores share
// beyond the conformance suite, and the harness that runs the suite on
// them (Harness): keys without expiry after a concurrent load, the server
// clock, scripts lost by SCRIPT FLUSH, coalesced decisions against
// sequential ones, exact admission under concurrency (AdmitsExactly),
// failure and recovery against a private redis-server that the test stops
// and starts, and callers and exports bounded on one it freezes (Hung,
// ExportBounded).
package storetest

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"testing"
	"time"

	"github.com/ratelimitkit/ratelimit"
	"github.com/ratelimitkit/ratelimit/algorithms"
	"github.com/ratelimitkit/ratelimit/algorithms/forms"
	"github.com/ratelimitkit/ratelimit/clock"
	"github.com/ratelimitkit/ratelimit/conformance"
	"github.com/ratelimitkit/ratelimit/internal/redisengine"
	"github.com/ratelimitkit/ratelimit/store"
)

// Target is a store package under test, on one server (or cluster).
type Target struct {
	// NewStore returns a store with the given prefix and clock choice.
	NewStore func(t *testing.T, prefix string, serverClock bool) store.Store
	// Expiries lists the keys under prefix with their expiry.
	Expiries func(prefix string) func(ctx context.Context) ([]conformance.Expiry, error)
	// FlushScripts runs SCRIPT FLUSH on every node.
	FlushScripts func(ctx context.Context) error
	// Set writes a raw string value to key, with a PX of one minute.
	Set func(ctx context.Context, key, value string) error
	// State reads a key's state from a store NewStore returned, as
	// conformance.Harness.State does.
	State func(s store.Store) func(ctx context.Context, key store.Key) ([]byte, int64, error)
}

// Harness returns the conformance harness of a store of tg under prefix,
// the server clock off: expiries in real time, the state readable, every
// built-in algorithm decided by the server. Its ServerClock store is one
// of tg with the server clock on, and its Twin a store of twin(t) (a new
// client of the same server), both under the same prefix.
func Harness(t *testing.T, tg Target, prefix string, twin func(t testing.TB) Target) conformance.Harness {
	s := tg.NewStore(t, prefix, false)
	return conformance.Harness{
		Store:              s,
		Expiries:           tg.Expiries(prefix),
		RealTimeExpiry:     true,
		State:              tg.State(s),
		ServerClock:        func(t *testing.T) store.Store { return tg.NewStore(t, prefix, true) },
		DecidesAllBuiltins: true,
		Twin:               func(t *testing.T) store.Store { return twin(t).NewStore(t, prefix, false) },
	}
}

// Corrupt checks that state the scripts cannot read is an error wrapping
// ratelimit.ErrCorruptState, not a panic or a silent answer, and that a
// fail-open limiter does not admit on it.
func Corrupt(t *testing.T, tg Target, prefix string) {
	s := tg.NewStore(t, prefix, false)
	algs := append(Algorithms(), counter{limit: 5})
	for _, a := range algs {
		for _, val := range []string{"garbage", "1:2", "-1:-2:-3:-4", "99999999999999999999:1:1:1", "{}", ""} {
			lim, err := ratelimit.New(s, a, ratelimit.WithName("corrupt"), ratelimit.WithFailurePolicy(ratelimit.FailOpen))
			if err != nil {
				t.Fatal(err)
			}
			key := redisengine.StateKey(prefix, store.Key{Namespace: lim.Namespace(), ID: "k"})
			if _, ok := a.(forms.ServerForm); !ok {
				// Through Update only the expiry header is the store's to
				// read; the rest is the user's algorithm's business.
				if len(val) >= 8 {
					continue
				}
				key += redisengine.UpdateSuffix
			}
			checkCorrupt(t, tg, lim, key, val)
		}
	}
	// Through Update, a value whose expiry header is out of range (below 1
	// µs since the epoch or above 2^53) was not written by the store, and
	// must not read as missing state.
	lim, err := ratelimit.New(s, counter{limit: 5}, ratelimit.WithName("corrupt-expiry"), ratelimit.WithFailurePolicy(ratelimit.FailOpen))
	if err != nil {
		t.Fatal(err)
	}
	key := redisengine.StateKey(prefix, store.Key{Namespace: lim.Namespace(), ID: "k"}) + redisengine.UpdateSuffix
	for _, val := range []string{
		"\xff\xff\xff\xff\xff\xff\xff\xff",         // -1
		"\xff\xff\xff\xff\xff\xff\xff\xffxyz",      // -1, then state
		"\x00\x00\x00\x00\x00\x00\x00\x80\x01",     // math.MinInt64
		"\x00\x00\x00\x00\x00\x00\x00\x00\x01\x02", // 0
		"garbage!!",                        // about 2.4e18
		"\x01\x00\x00\x00\x00\x00\x20\x00", // 2^53 + 1
	} {
		checkCorrupt(t, tg, lim, key, val)
	}
}

// checkCorrupt writes val to key and checks that lim, which fails open,
// denies with ErrCorruptState.
func checkCorrupt(t *testing.T, tg Target, lim *ratelimit.Limiter, key, val string) {
	t.Helper()
	ctx := context.Background()
	if err := tg.Set(ctx, key, val); err != nil {
		t.Fatal(err)
	}
	d, err := lim.Allow(ctx, "k")
	if !errors.Is(err, ratelimit.ErrCorruptState) || d.Allowed {
		t.Errorf("%v: lim.Allow(k) on stored %q = allowed %v, %v; want denied with ErrCorruptState", lim.Algorithm(), val, d.Allowed, err)
	}
}

// Algorithms are the built-ins (forms.Builtins) with small limits: 10
// per second and a burst of 20, or 20 per second for the windows.
func Algorithms() []algorithms.Algorithm {
	var out []algorithms.Algorithm
	for _, b := range forms.Builtins() {
		limit := int64(10)
		if a := b.New(limit, time.Second, 20); a.MaxCost() != 20 {
			limit = 20 // a window: its limit is what a key may hold
		}
		out = append(out, b.New(limit, time.Second, 20))
	}
	return out
}

// counter is a user's algorithm without a Lua form, so it runs through
// Update: at most limit units per key, ever (for the TTL's life, 2s unless
// ttl says otherwise).
type counter struct {
	limit int64
	ttl   time.Duration
}

func (counter) Name() string     { return "own_counter" }
func (counter) Validate() error  { return nil }
func (c counter) MaxCost() int64 { return c.limit }
func (c counter) String() string { return fmt.Sprintf("counter(%d)", c.limit) }
func (c counter) Decide(state []byte, req algorithms.Request) (algorithms.Step, error) {
	n := int64(len(state))
	ttl := cmp.Or(c.ttl, 2*time.Second)
	d := algorithms.Decision{Limit: c.limit, Allowed: n+req.Cost <= c.limit, ResetAfter: int64(ttl / time.Microsecond)}
	if !d.Allowed {
		d.RetryAfter = d.ResetAfter // at most: the state is gone by then
	}
	if !d.Allowed || req.Peek {
		d.Remaining = c.limit - n
		return algorithms.Step{Decision: d}, nil
	}
	d.Remaining = c.limit - n - req.Cost
	next := make([]byte, n+req.Cost)
	return algorithms.Step{Decision: d, Next: next, TTL: d.ResetAfter}, nil
}

// NoKeyWithoutTTL runs a concurrent load on many keys with every algorithm
// (and one without a Lua form), with allows, peeks and resets, then scans
// the keyspace: no key may lack an expiry.
func NoKeyWithoutTTL(t *testing.T, tg Target, prefix string) {
	ctx := context.Background()
	s := tg.NewStore(t, prefix, true)
	algs := append(Algorithms(), counter{limit: 5})
	var lims []*ratelimit.Limiter
	for _, a := range algs {
		lim, err := ratelimit.New(s, a, ratelimit.WithName("ttl"))
		if err != nil {
			t.Fatalf("ratelimit.New(%v): %v", a, err)
		}
		lims = append(lims, lim)
	}
	const workers, calls, keys = 32, 150, 500
	var wg sync.WaitGroup
	var mu sync.Mutex
	var errs []error
	for w := 0; w < workers; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(uint64(w), 7))
			for i := 0; i < calls; i++ {
				lim := lims[rng.IntN(len(lims))]
				key := fmt.Sprintf("user-%d", rng.IntN(keys))
				var err error
				switch r := rng.IntN(20); {
				case r == 0:
					_, err = lim.Peek(ctx, key)
				case r == 1:
					err = lim.Reset(ctx, key)
				default:
					_, err = lim.AllowN(ctx, key, 1+rng.IntN(3))
				}
				if err != nil {
					mu.Lock()
					errs = append(errs, err)
					mu.Unlock()
				}
			}
		}()
	}
	wg.Wait()
	for i, err := range errs {
		if i < 5 {
			t.Errorf("load: %v", err)
		}
	}
	list, err := tg.Expiries(prefix)(ctx)
	if err != nil {
		t.Fatalf("scanning %s:*: %v", prefix, err)
	}
	if len(list) < 100 {
		t.Errorf("after %d×%d calls on %d keys the scan found only %d keys", workers, calls, keys, len(list))
	}
	for _, e := range list {
		if e.Never {
			t.Errorf("key %q has TTL -1 after a concurrent load (rule: every key written carries an expiry)", e.Key)
		}
	}
	t.Logf("%d keys scanned, none without an expiry", len(list))
}

// ServerClock checks that a store on the server's clock makes sane
// decisions and ignores the limiter's (fake) clock.
func ServerClock(t *testing.T, tg Target, prefix string) {
	ctx := context.Background()
	s := tg.NewStore(t, prefix, true)
	// A fake clock stuck in 2001: a store that used it would see no time
	// pass, and would give decades-long TTLs measured against real time.
	fake := clock.NewFake(time.Date(2001, 1, 1, 0, 0, 0, 0, time.UTC))
	// The limiter refuses a clock the store would ignore.
	if _, err := ratelimit.New(s, Algorithms()[0], ratelimit.WithClock(fake)); !errors.Is(err, ratelimit.ErrInvalidParams) {
		t.Fatalf("ratelimit.New(server-clock store, WithClock(fake)) error = %v, want ErrInvalidParams", err)
	}
	// Hide the store's ServerClocker to pass the fake clock anyway, and
	// check that the store does ignore it.
	hidden := struct {
		store.Store
		store.Decider
	}{s, s.(store.Decider)}
	for _, a := range Algorithms() {
		t.Run(a.Name(), func(t *testing.T) {
			lim, err := ratelimit.New(hidden, a, ratelimit.WithClock(fake))
			if err != nil {
				t.Fatal(err)
			}
			key := "server-clock"
			// Start early in a second (the server runs on this machine's
			// clock), so that a window does not change under the checks
			// below.
			if us := time.Now().UnixMicro() % 1e6; us > 300_000 {
				time.Sleep(time.Duration(1e6-us) * time.Microsecond)
			}
			// The whole burst in one request, so that the next follows it
			// within one round trip: the buckets refill a unit every
			// 100ms of the server's (real) clock, which 20 round trips on
			// a loaded machine can take.
			d, err := lim.AllowN(ctx, key, 20)
			if err != nil {
				t.Fatalf("lim.AllowN(%q, 20): %v", key, err)
			}
			if !d.Allowed {
				t.Fatalf("lim.AllowN(%q, 20) = denied, want allowed (limit 20)", key)
			}
			if d.ResetAfter > 2*time.Second+time.Millisecond || d.Delay > 2*time.Second {
				t.Fatalf("lim.AllowN(%q, 20) = reset after %v, delay %v: not sane for a 1s policy", key, d.ResetAfter, d.Delay)
			}
			d, err = lim.Allow(ctx, key)
			if err != nil {
				t.Fatal(err)
			}
			if d.Allowed || d.RetryAfter <= 0 || d.RetryAfter > 2*time.Second {
				t.Fatalf("lim.Allow(%q) after 20 = %v, retry after %v; want denied with 0 < retry ≤ 2s", key, d.Allowed, d.RetryAfter)
			}
			// Moving the fake clock changes nothing: the server's clock
			// decides.
			fake.Advance(time.Hour)
			if d, err := lim.Allow(ctx, key); err != nil || d.Allowed {
				t.Fatalf("lim.Allow(%q) after the fake clock moved 1h = %v, %v; want denied (the server clock has not moved)", key, d.Allowed, err)
			}
			// Real time passing does.
			time.Sleep(d.RetryAfter + 20*time.Millisecond)
			if d, err := lim.Allow(ctx, key); err != nil || !d.Allowed {
				t.Fatalf("lim.Allow(%q) after waiting its retry-after %v = %v, %v; want allowed", key, d.RetryAfter, d.Allowed, err)
			}
			list, err := tg.Expiries(prefix)(ctx)
			if err != nil {
				t.Fatal(err)
			}
			for _, e := range list {
				if e.Never || time.Until(e.At) > 2*time.Second+100*time.Millisecond {
					t.Errorf("key %q expires at %v (never: %v); want within 2s of the server's now", e.Key, e.At, e.Never)
				}
			}
		})
	}
}

// ScriptFlush checks that decisions go on, with their state, after the
// server forgets its scripts.
func ScriptFlush(t *testing.T, tg Target, prefix string) {
	ctx := context.Background()
	s := tg.NewStore(t, prefix, false)
	fake := clock.NewFake(time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC))
	for _, a := range Algorithms() {
		lim, err := ratelimit.New(s, a, ratelimit.WithClock(fake))
		if err != nil {
			t.Fatal(err)
		}
		for i := 0; i < 3; i++ {
			if i > 0 {
				if err := tg.FlushScripts(ctx); err != nil {
					t.Fatalf("SCRIPT FLUSH: %v", err)
				}
			}
			d, err := lim.AllowN(ctx, "flush", 5)
			if err != nil {
				t.Fatalf("%v: lim.AllowN(key, 5) after SCRIPT FLUSH: %v", a, err)
			}
			if !d.Allowed || d.Remaining != 20-5*(i+1) {
				t.Fatalf("%v: lim.AllowN(key, 5) #%d after SCRIPT FLUSH = %v with remaining %d, want allowed with %d", a, i, d.Allowed, d.Remaining, 20-5*(i+1))
			}
		}
	}
}

// Unsupported checks that an algorithm without a Lua form gets
// ErrUnsupported from Decide.
func Unsupported(t *testing.T, tg Target, prefix string) {
	s := tg.NewStore(t, prefix, true)
	dec, ok := s.(store.Decider)
	if !ok {
		t.Fatal("store does not implement store.Decider")
	}
	_, err := dec.Decide(context.Background(), store.Key{Namespace: "x:own_counter", ID: "k"}, counter{limit: 1}, algorithms.Request{Now: 1, Cost: 1})
	if !errors.Is(err, store.ErrUnsupported) {
		t.Errorf("Decide with an algorithm without a Lua form = %v, want ErrUnsupported", err)
	}
}

// LimiterClockSlack checks that on the limiter's clock a key outlives its
// state's TTL by at least that TTL of real time, so a limiter clock that
// runs slower than real time (here a fake clock that does not move) keeps
// its state: an exhausted key stays denied after 1.4 TTLs of real time, on
// the scripts' path and on Update's. (With the old fixed slack of 100ms,
// keys vanished after 1.1 TTLs.)
func LimiterClockSlack(t *testing.T, tg Target, prefix string) {
	ctx := context.Background()
	s := tg.NewStore(t, prefix, false)
	fake := clock.NewFake(time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC))
	const ttl = time.Second
	algs := []algorithms.Algorithm{algorithms.FixedWindow(5, ttl), algorithms.GCRA(10, ttl*10/5, 5), counter{limit: 5, ttl: ttl}}
	lims := make([]*ratelimit.Limiter, len(algs))
	for i, a := range algs {
		lim, err := ratelimit.New(s, a, ratelimit.WithClock(fake))
		if err != nil {
			t.Fatal(err)
		}
		if d, err := lim.AllowN(ctx, "k", 5); err != nil || !d.Allowed {
			t.Fatalf("%v: lim.AllowN(k, 5) = %v, %v; want allowed", a, d.Allowed, err)
		}
		lims[i] = lim
	}
	time.Sleep(ttl * 14 / 10) // real time passes; the limiter's clock does not
	for i, lim := range lims {
		if d, err := lim.Allow(ctx, "k"); err != nil || d.Allowed {
			t.Errorf("%v: lim.Allow(k) after %v of real time on a frozen limiter clock = %v, %v; want denied (the server dropped live state)", algs[i], ttl*14/10, d.Allowed, err)
		}
	}
}

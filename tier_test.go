package ratelimit_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/ratelimitkit/ratelimit"
	"github.com/ratelimitkit/ratelimit/algorithms"
	"github.com/ratelimitkit/ratelimit/algorithms/forms"
	"github.com/ratelimitkit/ratelimit/clock"
	"github.com/ratelimitkit/ratelimit/store"
	"github.com/ratelimitkit/ratelimit/store/memory"
)

// namedGCRA is a user's algorithm that borrows GCRA's name: a tier of it
// on a GCRA limiter would read GCRA's state as its own.
type namedGCRA struct{ algorithms.Algorithm }

func (namedGCRA) Name() string { return "gcra" }

// quota is a user's algorithm whose Validate fails, with an error of its
// own, when its quota is not positive.
type quota struct {
	nilAlgorithm
	n int64
}

func (q *quota) Validate() error {
	if q.n < 1 {
		return fmt.Errorf("quota %d must be positive", q.n)
	}
	return nil
}

func TestTierRefusesOtherAlgorithms(t *testing.T) {
	lim, _ := newLimiter(t, algorithms.GCRA(10, time.Minute, 10))
	var typedNil *nilAlgorithm
	for _, c := range []struct {
		name string
		alg  algorithms.Algorithm
		says string
	}{
		{"nil", nil, "nil tier algorithm"},
		{"typed nil", typedNil, "nil tier algorithm"},
		{"other algorithm", algorithms.SlidingLog(100, time.Minute), "sliding_log"},
		{"same numbers, other algorithm", algorithms.TokenBucket(10, time.Minute, 10), "token_bucket"},
		{"a user's algorithm named gcra", namedGCRA{algorithms.GCRA(100, time.Minute, 100)}, "namedGCRA"},
		{"zero limit", algorithms.GCRA(0, time.Minute, 10), "limit 0"},
		{"negative period", algorithms.GCRA(10, -time.Minute, 10), "period"},
		{"zero burst", algorithms.GCRA(10, time.Minute, 0), "burst 0"},
		{"overflowing", algorithms.GCRA(1<<50, time.Minute, 1<<50), "too large"},
	} {
		tr, err := lim.Tier(c.alg)
		if !errors.Is(err, ratelimit.ErrInvalidParams) || !strings.Contains(err.Error(), c.says) || tr != nil {
			t.Errorf("%s: lim.Tier(%v) = %v, %v; want nil and an error wrapping ErrInvalidParams that says %q", c.name, c.alg, tr, err, c.says)
		}
	}
	user, err := ratelimit.New(memory.MustNew(), &quota{nilAlgorithm{"mine"}, 1})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := user.Tier(&quota{nilAlgorithm{"mine"}, 0}); !errors.Is(err, ratelimit.ErrInvalidParams) || !strings.Contains(err.Error(), "quota 0 must be positive") {
		t.Errorf("user.Tier(an algorithm whose Validate fails) = %v, want an error wrapping ErrInvalidParams and Validate's", err)
	}
	if _, err := user.Tier(&nilAlgorithm{"mine"}); !errors.Is(err, ratelimit.ErrInvalidParams) {
		t.Errorf("user.Tier(another Go type of the same name) = %v, want an error wrapping ErrInvalidParams", err)
	}
	if _, err := user.Tier(&quota{nilAlgorithm{"mine"}, 5}); err != nil {
		t.Errorf("user.Tier(same Go type and name) = %v, want a tier", err)
	}
}

func TestZeroTier(t *testing.T) {
	ctx := context.Background()
	for name, tr := range map[string]*ratelimit.Tier{"nil": nil, "zero": {}} {
		calls := map[string]func() error{
			"Allow":  func() error { _, err := tr.Allow(ctx, "k"); return err },
			"AllowN": func() error { _, err := tr.AllowN(ctx, "k", 1); return err },
			"Peek":   func() error { _, err := tr.Peek(ctx, "k"); return err },
			"Wait":   func() error { _, err := tr.Wait(ctx, "k"); return err },
		}
		for method, call := range calls {
			if err := call(); !errors.Is(err, ratelimit.ErrInvalidParams) {
				t.Errorf("%s Tier: %s = %v, want an error wrapping ErrInvalidParams", name, method, err)
			}
		}
		if tr.Limiter() != nil || tr.Algorithm() != nil {
			t.Errorf("%s Tier: Limiter, Algorithm = %v, %v; want nil", name, tr.Limiter(), tr.Algorithm())
		}
		if _, ok := tr.Policy(); ok {
			t.Errorf("%s Tier: Policy reports numbers", name)
		}
	}
}

// TestTierNumbers checks that a tier's numbers, not the limiter's, reach
// the decision, the cost check and Policy, on the limiter's keys.
func TestTierNumbers(t *testing.T) {
	lim, _ := newLimiter(t, algorithms.FixedWindow(10, time.Minute), ratelimit.WithName("api"))
	pro, err := lim.Tier(algorithms.FixedWindow(100, time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if _, err := lim.AllowN(ctx, "k", 20); !errors.Is(err, ratelimit.ErrInvalidCost) {
		t.Errorf("lim.AllowN(k, 20) = %v, want ErrInvalidCost (the limiter's limit is 10)", err)
	}
	d, err := pro.AllowN(ctx, "k", 20)
	if err != nil || !d.Allowed || d.Limit != 100 || d.Remaining != 80 {
		t.Errorf("pro.AllowN(k, 20) = %+v, %v; want allowed, limit 100, remaining 80", d, err)
	}
	if _, err := pro.AllowN(ctx, "k", 101); !errors.Is(err, ratelimit.ErrInvalidCost) || !strings.Contains(err.Error(), "outside 1..100") {
		t.Errorf("pro.AllowN(k, 101) = %v, want ErrInvalidCost naming 1..100", err)
	}
	// The same key under the limiter's own numbers: 20 of 10 spent.
	if d, err := lim.Peek(ctx, "k"); err != nil || d.Allowed || d.Limit != 10 || d.Remaining != 0 {
		t.Errorf("lim.Peek(k) after pro spent 20 = %+v, %v; want denied, limit 10, remaining 0", d, err)
	}
	if p, ok := pro.Policy(); !ok || p.Quota != 100 || p.Window != time.Minute {
		t.Errorf("pro.Policy() = %+v, %v; want quota 100 per minute", p, ok)
	}
	if pro.Limiter() != lim || pro.Algorithm().MaxCost() != 100 {
		t.Errorf("pro.Limiter(), pro.Algorithm() = %p, %v; want %p and the tier's algorithm", pro.Limiter(), pro.Algorithm(), lim)
	}
	if err := lim.Reset(ctx, "k"); err != nil {
		t.Fatal(err)
	}
	if d, _ := pro.Peek(ctx, "k"); d.Remaining != 100 {
		t.Errorf("pro.Peek(k) after lim.Reset(k): remaining %d, want 100 (one state per key, whatever the tier)", d.Remaining)
	}
}

// TestTierMethods checks that a Tier has the Limiter's deciding methods,
// with the same signatures, and its accessors, and nothing else: what
// acts on a key's state whatever its numbers (Reset) or on the limiter as
// a whole is the Limiter's alone, so the two types cannot drift apart.
func TestTierMethods(t *testing.T) {
	deciding := []string{"Allow", "AllowN", "Peek", "Reserve", "Wait", "WaitN", "Policy", "Algorithm"}
	want := append(deciding, "Limiter")
	tier, lim := reflect.TypeFor[*ratelimit.Tier](), reflect.TypeFor[*ratelimit.Limiter]()
	var got []string
	for m := range tier.Methods() {
		got = append(got, m.Name)
	}
	slices.Sort(got)
	slices.Sort(want)
	if !slices.Equal(got, want) {
		t.Errorf("*Tier's methods = %v, want %v", got, want)
	}
	for _, name := range deciding {
		tm, _ := tier.MethodByName(name)
		lm, ok := lim.MethodByName(name)
		if !ok {
			t.Errorf("Tier.%s has no Limiter.%s", name, name)
			continue
		}
		// Compare without the receiver, the first input of each.
		ti, li := tm.Type, lm.Type
		same := ti.NumIn() == li.NumIn() && ti.NumOut() == li.NumOut()
		for i := 1; same && i < ti.NumIn(); i++ {
			same = ti.In(i) == li.In(i)
		}
		for i := 0; same && i < ti.NumOut(); i++ {
			same = ti.Out(i) == li.Out(i)
		}
		if !same {
			t.Errorf("Tier.%s is %v, Limiter.%s is %v; want the same signature", name, ti, name, li)
		}
	}
}

// TestTierWait checks Wait at a tier: it waits by the tier's numbers.
func TestTierWait(t *testing.T) {
	lim, c := newLimiter(t, algorithms.GCRA(1, time.Second, 1))
	fast, err := lim.Tier(algorithms.GCRA(10, time.Second, 2))
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if _, err := fast.WaitN(ctx, "k", 2); err != nil {
		t.Fatalf("fast.WaitN(k, 2) on a fresh key: %v", err)
	}
	done := make(chan error, 1)
	go func() { _, err := fast.Wait(ctx, "k"); done <- err }()
	advanceWhenWaiting(t, c, 100*time.Millisecond)
	if err := <-done; err != nil {
		t.Errorf("fast.Wait(k) after 100ms = %v, want admitted", err)
	}
}

// TestTierFailures checks that the failure policy and the fallback decide
// with the tier's numbers: the fallback with the tier's share.
func TestTierFailures(t *testing.T) {
	down := errors.New("backend down")
	ctx := context.Background()
	lim, err := ratelimit.New(failingStore{down}, algorithms.GCRA(10, time.Minute, 10))
	if err != nil {
		t.Fatal(err)
	}
	pro, err := lim.Tier(algorithms.GCRA(100, time.Minute, 100))
	if err != nil {
		t.Fatal(err)
	}
	if d, err := pro.Allow(ctx, "k"); !errors.Is(err, down) || d.Allowed || d.Limit != 100 || d.Source != ratelimit.SourceFailurePolicy {
		t.Errorf("pro.Allow on a failing store, fail closed = %+v, %v; want denied with limit 100 by the failure policy, and the store's error", d, err)
	}
	for _, breaker := range []bool{false, true} {
		opts := []ratelimit.Option{ratelimit.WithFallback(memory.MustNew(), 4)}
		if breaker {
			opts = append(opts, ratelimit.WithCircuitBreaker(1, time.Hour))
		}
		fake := clock.NewFake(epoch)
		lim, err := ratelimit.New(failingStore{down}, algorithms.GCRA(10, time.Minute, 10), append(opts, ratelimit.WithClock(fake))...)
		if err != nil {
			t.Fatal(err)
		}
		pro, err := lim.Tier(algorithms.GCRA(100, time.Minute, 100))
		if err != nil {
			t.Fatal(err)
		}
		admitted := 0
		for range 40 {
			d, err := pro.Allow(ctx, "k")
			if err == nil || d.Source != ratelimit.SourceFallback || d.Limit != 25 {
				t.Fatalf("breaker %v: pro.Allow on a failing store = %+v, %v; want the fallback's decision, limit 25 (100 / 4 replicas), with the error", breaker, d, err)
			}
			if d.Allowed {
				admitted++
			}
		}
		if admitted != 25 {
			t.Errorf("breaker %v: pro's fallback admitted %d of 40, want 25 (100 / 4 replicas)", breaker, admitted)
		}
		// The limiter's own numbers share the fallback's state for k:
		// 25 spent of its share of 10 / 4 = 2.
		if d, _ := lim.Allow(ctx, "k"); d.Allowed || d.Limit != 2 {
			t.Errorf("breaker %v: lim.Allow(k) from the fallback after pro spent 25 = %+v, want denied with limit 2", breaker, d)
		}
		if _, err := pro.AllowN(ctx, "k2", 26); err == nil {
			t.Errorf("breaker %v: pro.AllowN(k2, 26), above the fallback's share, succeeded without an error", breaker)
		} else if d, _ := pro.AllowN(ctx, "k2", 26); d.Allowed {
			t.Errorf("breaker %v: pro.AllowN(k2, 26) above the fallback's share of 25 = admitted, want denied", breaker)
		}
	}
	var user store.Store = memory.MustNew()
	own, err := ratelimit.New(user, &nilAlgorithm{name: "mine"}, ratelimit.WithFallback(memory.MustNew(), 1))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := own.Tier(&nilAlgorithm{name: "mine"}); err != nil {
		t.Errorf("own.Tier(same user algorithm) with a fallback of 1 replica = %v, want a tier (one replica divides nothing)", err)
	}
}

// TestTierDenyCache checks the deny cache with keys that change tier at
// random. With numbers under which a state never needs to outlive the
// expiry the numbers that wrote it gave it (windows of one period, buckets
// of one rate: see docs/tiers.md), a limiter with the cache decides
// exactly as one without: a denial under small numbers never denies the
// key at larger ones. With any numbers, it decides as the one without
// until the cache denies a key whose state the store has let expire
// early (the case docs/tiers.md describes), and never otherwise.
func TestTierDenyCache(t *testing.T) {
	ctx := context.Background()
	for _, b := range forms.Builtins() {
		window := b.New(1, time.Second, 5).MaxCost() == 1 // the burst is ignored
		exact := [][3]int64{{5, 1, 2}, {5, 1, 4}, {5, 1, 15}}
		if window {
			exact = [][3]int64{{3, 1, 0}, {5, 1, 0}, {20, 1, 0}}
		}
		any := [][3]int64{{3, 1, 3}, {5, 1, 4}, {20, 1, 15}, {5, 2, 5}, {2, 3, 2}}
		for _, c := range []struct {
			name  string
			nums  [][3]int64
			exact bool
		}{{"same-period-and-rate", exact, true}, {"any", any, false}} {
			for seed := range uint64(10) {
				checkDenyCacheTiers(t, ctx, b, c.nums, c.exact, seed)
			}
		}
	}
}

func checkDenyCacheTiers(t *testing.T, ctx context.Context, b *forms.Builtin, nums [][3]int64, exact bool, seed uint64) {
	t.Helper()
	fake := clock.NewFake(epoch)
	plain, err := ratelimit.New(memory.MustNew(), b.New(5, time.Second, 4), ratelimit.WithClock(fake))
	if err != nil {
		t.Fatal(err)
	}
	cached, err := ratelimit.New(memory.MustNew(), b.New(5, time.Second, 4), ratelimit.WithClock(fake), ratelimit.WithDenyCache(100))
	if err != nil {
		t.Fatal(err)
	}
	var plainTiers, cachedTiers []*ratelimit.Tier
	for _, n := range nums {
		newAlg := func() algorithms.Algorithm { return b.New(n[0], time.Duration(n[1])*time.Second, n[2]) }
		pt, err := plain.Tier(newAlg())
		if err != nil {
			t.Fatal(err)
		}
		// Each tier of the cached limiter is made twice, and the two are
		// used at random, so that equal numbers are recognised as such,
		// not only the same *Tier.
		ct, err := cached.Tier(newAlg())
		if err != nil {
			t.Fatal(err)
		}
		ct2, err := cached.Tier(newAlg())
		if err != nil {
			t.Fatal(err)
		}
		plainTiers, cachedTiers = append(plainTiers, pt, pt), append(cachedTiers, ct, ct2)
	}
	rng := rand.New(rand.NewPCG(seed, 11))
	hits := 0
	for i := range 400 {
		fake.Advance(time.Duration(rng.Int64N(int64(120 * time.Millisecond))))
		j := rng.IntN(len(plainTiers))
		key := fmt.Sprint("k", rng.IntN(2))
		want, err := plainTiers[j].Allow(ctx, key)
		if err != nil {
			t.Fatal(err)
		}
		got, err := cachedTiers[j].Allow(ctx, key)
		if err != nil {
			t.Fatal(err)
		}
		if got.Source == ratelimit.SourceDenyCache {
			hits++
		}
		if got.Allowed == want.Allowed {
			continue
		}
		if !exact && !got.Allowed && got.Source == ratelimit.SourceDenyCache {
			// A key moved to numbers under which its state outlives
			// what the old numbers kept: the cache denies until the
			// new numbers' RetryAfter, the store forgot the state
			// sooner. The two limiters' states differ from here on.
			break
		}
		t.Fatalf("%s seed %d step %d: tier %v Allow(%s) with a deny cache = %+v, without = %+v", b.Name, seed, i, nums[j/2], key, got, want)
	}
	if hits == 0 {
		t.Errorf("%s seed %d: the deny cache answered nothing in 400 requests", b.Name, seed)
	}
}

// TestTierDenyCacheUpgrade is the case TestTierDenyCache draws at random,
// spelled out: a key denied on the free plan, and so in the deny cache,
// moves to the paid plan and is admitted by the store.
func TestTierDenyCacheUpgrade(t *testing.T) {
	lim, _ := newLimiter(t, algorithms.TokenBucket(10, time.Minute, 10), ratelimit.WithDenyCache(10))
	pro, err := lim.Tier(algorithms.TokenBucket(1000, time.Minute, 1000))
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	for range 10 {
		lim.Allow(ctx, "u")
	}
	if d, _ := lim.Allow(ctx, "u"); d.Allowed || d.Source != ratelimit.SourceStore {
		t.Fatalf("free: 11th Allow = %+v, want denied by the store", d)
	}
	if d, _ := lim.Allow(ctx, "u"); d.Allowed || d.Source != ratelimit.SourceDenyCache {
		t.Fatalf("free: 12th Allow = %+v, want denied by the deny cache", d)
	}
	if d, _ := pro.Allow(ctx, "u"); !d.Allowed || d.Source != ratelimit.SourceStore || d.Remaining != 989 {
		t.Errorf("pro.Allow(u) after the free plan's denial = %+v, want admitted by the store with 989 remaining", d)
	}
	// A tier made apart with the free plan's numbers shares its denials.
	free, err := lim.Tier(algorithms.TokenBucket(10, time.Minute, 10))
	if err != nil {
		t.Fatal(err)
	}
	for range 11 {
		lim.Allow(ctx, "v")
	}
	if d, _ := free.Allow(ctx, "v"); d.Allowed || d.Source != ratelimit.SourceDenyCache {
		t.Errorf("free.Allow(v) after lim.Allow(v)'s denial = %+v, want denied by the deny cache", d)
	}
}

// TestTierObserverAndShadow checks that the observer and shadow mode see
// the tier's numbers.
func TestTierObserverAndShadow(t *testing.T) {
	rec := &recorder{}
	lim, _ := newLimiter(t, algorithms.SlidingWindow(2, time.Minute), ratelimit.WithShadow(), ratelimit.WithObserver(rec))
	pro, err := lim.Tier(algorithms.SlidingWindow(3, time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	for i := range 4 {
		d, err := pro.Allow(ctx, "k")
		e := rec.last(t)
		if err != nil || !d.Allowed || d.Shadowed != (i == 3) || d.Limit != 3 || e.Allowed != (i < 3) || !reflect.DeepEqual(e.Decision, d) {
			t.Errorf("call %d: shadowed pro.Allow = %+v, %v, observer saw %+v; want allowed, limit 3, shadowed only the 4th", i, d, err, e)
		}
	}
}

// A limiter whose numbers depend on the caller's plan: one limiter, and a
// tier for each plan, made once. A user who upgrades keeps what they have
// spent, and gets the new plan's numbers at once.
func ExampleLimiter_Tier() {
	fake := clock.NewFake(time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC))
	lim, err := ratelimit.New(memory.MustNew(), algorithms.TokenBucket(3, time.Minute, 3),
		ratelimit.WithName("api"), ratelimit.WithClock(fake))
	if err != nil {
		panic(err)
	}
	plans := map[string]*ratelimit.Tier{}
	for plan, alg := range map[string]algorithms.Algorithm{
		"free": lim.Algorithm(),
		"pro":  algorithms.TokenBucket(100, time.Minute, 10),
	} {
		if plans[plan], err = lim.Tier(alg); err != nil {
			panic(err)
		}
	}
	ctx := context.Background()
	for _, plan := range []string{"free", "free", "free", "free", "pro"} {
		d, err := plans[plan].Allow(ctx, "user-42")
		if err != nil {
			panic(err)
		}
		fmt.Printf("%-4s allowed=%v remaining=%d limit=%d\n", plan, d.Allowed, d.Remaining, d.Limit)
	}
	// Output:
	// free allowed=true remaining=2 limit=3
	// free allowed=true remaining=1 limit=3
	// free allowed=true remaining=0 limit=3
	// free allowed=false remaining=0 limit=3
	// pro  allowed=true remaining=6 limit=10
}

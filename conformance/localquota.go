package conformance

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/ratelimitkit/ratelimit"
	"github.com/ratelimitkit/ratelimit/algorithms"
	"github.com/ratelimitkit/ratelimit/algorithms/forms"
	"github.com/ratelimitkit/ratelimit/clock"
	"github.com/ratelimitkit/ratelimit/store"
)

// The LocalQuota group: limiters with ratelimit.WithLocalQuota, several on
// one store as processes would be, on one fake clock. It holds them to the
// bounds docs/scaling.md ("Local quota") states: no over-admission in any
// fixed window across all of them; a share never spent once its window
// (fixed window) or its lifetime (the others) is over; for the others,
// at most what the stated bound allows over any span; and for the fixed
// window, under-admission within its bound.

// The numbers the group runs each built-in algorithm with.
const (
	quotaLimit    = 100
	quotaShare    = 8 // the most a share holds (a quarter of the burst is 25)
	quotaHolders  = 4 // limiters on one store, as processes
	quotaLifetime = 200 * time.Millisecond
)

// newQuotaLimiter makes the subject limiter with local quota (shares of at
// most quotaShare units living lifetime) and opts.
func newQuotaLimiter(t *testing.T, s store.Store, alg algorithms.Algorithm, lifetime time.Duration, opts ...ratelimit.Option) limiter {
	t.Helper()
	lim, err := subjects.quotaLimiter(s, alg, quotaShare, lifetime, opts...)
	if err != nil {
		t.Fatalf("ratelimit.New(%v) with WithLocalQuota(%d, %v): %v", alg, quotaShare, lifetime, err)
	}
	if cl, ok := lim.(closer); ok {
		t.Cleanup(func() { cl.Close(context.Background()) }) // ends its idle give-backs
	}
	return lim
}

// quotaCase is one algorithm the group runs, with its lifetime: a fixed
// window's shares get a lifetime longer than the window, so that only the
// window can end them.
func quotaCase(a algorithm) (alg algorithms.Algorithm, lifetime time.Duration, fixed bool) {
	alg = forms.BuiltinOf(a.alg).New(quotaLimit, time.Second, quotaLimit)
	fixed = alg.Name() == algorithms.FixedWindow(1, time.Second).Name()
	lifetime = quotaLifetime
	if fixed {
		lifetime = 10 * time.Second
	}
	return alg, lifetime, fixed
}

func testLocalQuota(t *testing.T, newHarness func(*testing.T) Harness) {
	forEach(t, newHarness, func(t *testing.T, h Harness, s store.Store, a algorithm) {
		alg, lifetime, fixed := quotaCase(a)
		t.Run("shares-expire", func(t *testing.T) { quotaSharesExpire(t, s, alg, lifetime, fixed) })
		t.Run("four-holders", func(t *testing.T) { quotaFourHolders(t, s, alg, lifetime, fixed) })
		t.Run("gives-back", func(t *testing.T) { quotaGivesBack(t, s, alg, lifetime) })
	})
}

// closer is a limiter that can close (ratelimit.Limiter.Close).
type closer interface {
	Close(ctx context.Context) error
}

// quotaGivesBack checks that a limiter with local quota gives its unspent
// units back to the store when it closes: four requests at one instant
// take shares of 1, 2 and 4 units, which leaves 3 counted and unspent; a
// limiter without local quota then sees 93 remaining of 100, and 96 once
// the holder has closed (93 still for the sliding log, which gives nothing
// back until the units leave its period).
func quotaGivesBack(t *testing.T, s store.Store, alg algorithms.Algorithm, lifetime time.Duration) {
	ctx := context.Background()
	c := clock.NewFake(epoch)
	a := newQuotaLimiter(t, s, alg, lifetime, ratelimit.WithClock(c))
	plain, err := subjects.limiter(s, alg, ratelimit.WithClock(c))
	if err != nil {
		t.Fatal(err)
	}
	const key = "quota-giveback"
	for i := range 4 {
		if d, err := a.Allow(ctx, key); err != nil || !d.Allowed {
			t.Fatalf("Allow #%d on a fresh key = %s, %v; want allowed", i+1, verdict(d.Allowed), err)
		}
	}
	remaining := func() int {
		t.Helper()
		d, err := plain.Peek(ctx, key)
		if err != nil {
			t.Fatalf("Peek: %v", err)
		}
		return d.Remaining
	}
	if got := remaining(); got != quotaLimit-7 {
		t.Fatalf("Peek after four requests through shares of 1, 2 and 4 = %d remaining, want %d", got, quotaLimit-7)
	}
	cl, ok := a.(closer)
	if !ok {
		t.Fatalf("rule: a limiter with local quota gives back its unspent units when it closes: %T has no Close", a)
	}
	if err := cl.Close(ctx); err != nil {
		t.Fatalf("Close: %v", err)
	}
	want := quotaLimit - 4
	if alg.Name() == algorithms.SlidingLog(1, time.Second).Name() {
		want = quotaLimit - 7
	}
	if got := remaining(); got != want {
		t.Errorf("rule: a limiter with local quota gives back its unspent units when it closes: %d remaining after Close, want %d", got, want)
	}
}

// quotaSharesExpire checks that a share is not spent once its window (a
// fixed window) or its lifetime is over: holder A takes shares, time
// passes beyond them, holder B spends all the store has, and A must then
// be denied.
func quotaSharesExpire(t *testing.T, s store.Store, alg algorithms.Algorithm, lifetime time.Duration, fixed bool) {
	ctx := context.Background()
	c := clock.NewFake(epoch)
	a := newQuotaLimiter(t, s, alg, lifetime, ratelimit.WithClock(c))
	b := newQuotaLimiter(t, s, alg, lifetime, ratelimit.WithClock(c))
	const key = "quota-expire"
	// Enough requests at one instant for A's shares to grow, and a
	// number no share size divides: it holds some units of its last one.
	for i := 0; i < 3*quotaShare+1; i++ {
		if d, err := a.Allow(ctx, key); err != nil || !d.Allowed {
			t.Fatalf("A.Allow #%d on a fresh key = %s, %v; want allowed", i, verdict(d.Allowed), err)
		}
	}
	pass := lifetime + time.Microsecond
	if fixed {
		pass = time.Second // the next window, within the lifetime
	}
	c.Advance(pass)
	admitted := 0
	for ; admitted <= 2*quotaLimit; admitted++ {
		d, err := b.Allow(ctx, key)
		if err != nil {
			t.Fatalf("B.Allow: %v", err)
		}
		if !d.Allowed {
			break
		}
	}
	if admitted > 2*quotaLimit {
		t.Fatalf("B admitted more than %d requests at one instant, limit %d", 2*quotaLimit, quotaLimit)
	}
	d, err := a.Allow(ctx, key)
	if err != nil {
		t.Fatalf("A.Allow: %v", err)
	}
	if d.Allowed {
		what := fmt.Sprintf("its lifetime (%v)", lifetime)
		if fixed {
			what = "its window"
		}
		t.Errorf("rule: a share is not spent once %s is over: A admitted a request %v after taking shares, after B spent all the store had (%d); want denied", what, pass, admitted)
	}
}

// quotaFourHolders runs four holders on one key, each asking more than
// the limit allows, on a clock that steps 10ms, and checks what all of
// them admitted against the stated bounds.
func quotaFourHolders(t *testing.T, s store.Store, alg algorithms.Algorithm, lifetime time.Duration, fixed bool) {
	ctx := context.Background()
	c := clock.NewFake(epoch)
	var holders []limiter
	for range quotaHolders {
		holders = append(holders, newQuotaLimiter(t, s, alg, lifetime, ratelimit.WithClock(c)))
	}
	const (
		key   = "quota-four"
		step  = 10 * time.Millisecond
		steps = 300 // three seconds, three windows
		each  = 1   // requests per holder per step: 400/s against 100/s
	)
	var times []int64 // µs since epoch of each admission, in order
	for i := range steps {
		for j := range each * quotaHolders {
			d, err := holders[j%quotaHolders].Allow(ctx, key)
			if err != nil {
				t.Fatalf("holder %d: Allow at step %d: %v", j%quotaHolders, i, err)
			}
			if d.Allowed {
				times = append(times, int64(c.Now().Sub(epoch)/time.Microsecond))
			}
		}
		c.Advance(step)
	}
	pol := alg.(algorithms.PolicyStater).Policy()
	period := int64(pol.Period / time.Microsecond)
	switch pol.Algorithm {
	case "fixed_window", "sliding_window":
		extra := int64(0)
		if !fixed {
			extra = quotaHolders * quotaShare
		}
		perWindow := map[int64]int64{}
		for _, at := range times {
			perWindow[at/period]++
		}
		for w := int64(0); w < int64(steps)*int64(step/time.Microsecond)/period; w++ {
			n := perWindow[w]
			if n > quotaLimit+extra {
				t.Errorf("rule: %d holders with shares of at most %d admit at most %d in a window (the limit + %d): window %d admitted %d", quotaHolders, quotaShare, quotaLimit+extra, extra, w, n)
			}
			if low := int64(quotaLimit - quotaHolders*(quotaShare-1)); fixed && n < low {
				t.Errorf("rule: under-admission is at most N·(S−1) = %d per window: window %d admitted %d of %d, with demand %d", quotaHolders*(quotaShare-1), w, n, quotaLimit, 4*quotaLimit)
			}
		}
	case "sliding_log":
		// Any period: at most the limit + N·S.
		for i, j := 0, 0; j < len(times); j++ {
			for times[j]-times[i] >= period {
				i++
			}
			if n := j - i + 1; n > quotaLimit+quotaHolders*quotaShare {
				t.Fatalf("rule: %d holders with shares of at most %d admit at most the limit + N·S = %d in any period: %d within %v from t+%v", quotaHolders, quotaShare, quotaLimit+quotaHolders*quotaShare, n, time.Duration(times[j]-times[i])*time.Microsecond, time.Duration(times[i])*time.Microsecond)
			}
		}
	default:
		// The buckets: over any span T, at most B + r·(T + lifetime),
		// and one more for rounding.
		checkBucketBound(t, times, pol, lifetime)
	}
}

// checkBucketBound checks that admissions at times (µs, in order) keep, over
// every span [times[i], times[j]], j−i+1 ≤ burst + rate·(span + lifetime) + 1.
func checkBucketBound(t *testing.T, times []int64, pol algorithms.Policy, lifetime time.Duration) {
	t.Helper()
	if !slices.IsSorted(times) {
		t.Fatal("admission times out of order")
	}
	rate := float64(pol.Limit) / float64(pol.Period/time.Microsecond) // per µs
	life := float64(lifetime / time.Microsecond)
	// max over i ≤ j of (j − i + 1) − rate·(t_j − t_i): keep the least
	// i − rate·t_i seen.
	least, worst := 0.0, 0.0
	wi, wj := 0, 0
	li := 0
	for j, at := range times {
		if v := float64(j) - rate*float64(at); j == 0 || v < least {
			least, li = v, j
		}
		if v := float64(j) - rate*float64(at) - least + 1; v > worst {
			worst, wi, wj = v, li, j
		}
	}
	if bound := float64(pol.Burst) + rate*life + 1; worst > bound {
		span := time.Duration(times[wj]-times[wi]) * time.Microsecond
		t.Errorf("rule: with shares of lifetime L, a bucket admits at most B + r·(T + L) (+1 for rounding) over any span T: %d admitted within %v from t+%v, which exceeds B + r·T by %.1f, more than r·L + 1 = %.1f",
			wj-wi+1, span, time.Duration(times[wi])*time.Microsecond, worst-float64(pol.Burst), rate*life+1)
	}
}

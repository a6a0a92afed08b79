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
// at most what the stated bound allows over any span; for the fixed
// window, under-admission within its bound; no unit the store counted for
// a share ever dropped (it is spent or given back); and reservations and
// their cancels keeping the promises they keep without local quota. What
// it needs to know of an algorithm it reads from the algorithm's facts
// (algorithms.Facts), never from its name.

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
	fixed = factsOf(alg).WindowBound
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
		t.Run("never-drops", func(t *testing.T) { quotaNeverDrops(t, s, a) })
		t.Run("reservations", func(t *testing.T) { quotaReservations(t, s, a) })
		t.Run("tops-up", func(t *testing.T) { quotaTopsUp(t, s, a) })
	})
}

// factsOf returns alg's facts: the zero Facts when it states none.
func factsOf(alg algorithms.Algorithm) algorithms.Facts {
	if s, ok := alg.(algorithms.FactStater); ok {
		return s.Facts()
	}
	return algorithms.Facts{}
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
	if !factsOf(alg).Refunds {
		want = quotaLimit - 7 // (the sliding log)
	}
	if got := remaining(); got != want {
		t.Errorf("rule: a limiter with local quota gives back its unspent units when it closes: %d remaining after Close, want %d", got, want)
	}
}

// quotaSharesExpire checks that a share is not spent once its window (an
// algorithm that counts in windows) or its lifetime is over: holder A
// takes shares, time passes beyond them, holder B spends all the store
// has, and A must then be denied (a bucket's give-back keeps what refilled
// meanwhile, here more than A held).
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
	// Past the lifetime; for an algorithm that counts in windows, into
	// the next window (within the lifetime of a fixed window's share):
	// within its window a share's unspent units go back exactly, and the
	// store may then admit them again.
	pass := lifetime + time.Microsecond
	if factsOf(alg).Window > 0 {
		pass = time.Second
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
		if factsOf(alg).Window > 0 {
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
	switch f := factsOf(alg); {
	case f.Window > 0:
		// Per window: at most the limit when units are bound to their
		// window, the limit + N·S otherwise.
		extra := int64(0)
		if !f.WindowBound {
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
	case !f.Refills:
		// Any period: at most the limit + N·S (the sliding log).
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

// quotaNeverDrops checks that no unit the store counted for a share is
// dropped, for each algorithm whose refunds give anything back (the sliding
// log keeps what it counted until it leaves its period), at 100 an hour so
// that the time the test moves refills nothing: a holder takes shares of 1,
// 2, 4 and 8 for 8 requests (7 units left), then a request whose clock
// reading is older than its share spends from it, and one after the share's
// lifetime (within its window) takes a new one; once the holder has closed,
// a limiter without local quota sees 100 remaining less exactly what was
// admitted.
func quotaNeverDrops(t *testing.T, s store.Store, a algorithm) {
	alg := forms.BuiltinOf(a.alg).New(quotaLimit, time.Hour, quotaLimit)
	if !factsOf(alg).Refunds {
		t.Skipf("%s gives nothing back (algorithms.Facts.Refunds): what it counted stays counted until it leaves its period", alg.Name())
	}
	ctx := context.Background()
	start := epoch.Add(time.Second)
	c := clock.NewFake(start)
	holder := newQuotaLimiter(t, s, alg, quotaLifetime, ratelimit.WithClock(c))
	plain, err := subjects.limiter(s, alg, ratelimit.WithClock(c))
	if err != nil {
		t.Fatal(err)
	}
	const key = "quota-never-drops"
	admitted := 0
	allow := func(what string) {
		t.Helper()
		d, err := holder.Allow(ctx, key)
		if err != nil || !d.Allowed {
			t.Fatalf("Allow (%s) = %s, %v; want allowed", what, verdict(d.Allowed), err)
		}
		admitted++
	}
	for admitted < 8 {
		allow("taking shares of 1, 2, 4 and 8")
	}
	c.Set(start.Add(-time.Millisecond)) // a reading older than the share
	allow("a reading older than the share")
	c.Set(start.Add(quotaLifetime + time.Millisecond)) // the share's lifetime is over
	allow("after the share's lifetime")
	cl, ok := holder.(closer)
	if !ok {
		t.Fatalf("rule: a limiter with local quota gives back its unspent units when it closes: %T has no Close", holder)
	}
	if err := cl.Close(ctx); err != nil {
		t.Fatalf("Close: %v", err)
	}
	d, err := plain.Peek(ctx, key)
	if err != nil {
		t.Fatalf("Peek: %v", err)
	}
	// A bucket that refills as of now keeps what could have refilled
	// while the share held its units, rounded up: here one unit.
	kept := 0
	if f := factsOf(alg); f.Refills && !f.Queue {
		kept = 1
	}
	if d.Remaining < quotaLimit-admitted-kept || d.Remaining > quotaLimit-admitted {
		t.Errorf("rule: no unit the store counted for a share is dropped (spent, or given back; a bucket keeps what could have refilled meanwhile, %d here): %d admitted (shares of 1, 2, 4, 8; a request with a reading older than the last share; one after its lifetime), then Close: %d remaining, want %d", kept, admitted, d.Remaining, quotaLimit-admitted)
	}
}

// quotaTopsUp checks that a share holding less than a request's cost is
// not lost: quotaHolders limiters in turn ask AllowN(5) on one key, on a
// clock that stands still, until the store has nothing left, and together
// they admit at least the limit less N·(S−1) (what the shares may hold
// unspent at the end) and never more than the limit. (A share replaced
// with its leftover given back loses it on a sliding log, which cannot
// take units back, and on a queue: 3 units of every share of 8: 270–275 of
// 400 admitted where at least 372 must be.)
func quotaTopsUp(t *testing.T, s store.Store, a algorithm) {
	const limit = 4 * quotaLimit // many shares of quotaShare each
	alg := forms.BuiltinOf(a.alg).New(limit, time.Hour, limit)
	ctx := context.Background()
	c := clock.NewFake(epoch.Add(time.Second))
	type allowerN interface {
		AllowN(ctx context.Context, key string, n int) (ratelimit.Decision, error)
	}
	var holders []allowerN
	for range quotaHolders {
		lim, ok := newQuotaLimiter(t, s, alg, time.Minute, ratelimit.WithClock(c)).(allowerN)
		if !ok {
			t.Skip("the limiter has no AllowN")
		}
		holders = append(holders, lim)
	}
	const key, cost = "quota-tops-up", 5
	admitted := 0
	for round := 0; round < 2*limit/cost/quotaHolders; round++ {
		for _, h := range holders {
			d, err := h.AllowN(ctx, key, cost)
			if err != nil {
				t.Fatalf("AllowN(%d): %v", cost, err)
			}
			if d.Allowed {
				admitted += cost
			}
		}
	}
	least := limit - quotaHolders*(quotaShare-1)
	if admitted < least || admitted > limit {
		t.Errorf("rule: a share holding less than a request's cost is topped up, not lost (docs/scaling.md, \"Local quota\": under-admission at most N·(S−1)): %d limiters asking AllowN(%d) in turn on a still clock admitted %d of %d, want %d to %d", quotaHolders, cost, admitted, limit, least, limit)
	}
}

// reserver is a limiter that makes reservations (ratelimit.Limiter.Reserve).
type reserver interface {
	Reserve(ctx context.Context, key string, n int, maxDelay time.Duration) (*ratelimit.Reservation, error)
}

// quotaReservations checks that reservations and their cancels keep, under
// local quota, the promises they keep without it: the store books each
// reservation, so that on a drained bucket (Facts.Debt) those that may act
// within a span are at most what refills in it, however many are booked;
// and a cancel gives back rather than takes, so that reserve-then-cancel
// pairs leave the whole limit to a window algorithm.
func quotaReservations(t *testing.T, s store.Store, a algorithm) {
	ctx := context.Background()
	alg := forms.BuiltinOf(a.alg).New(quotaLimit, time.Second, quotaLimit/5)
	f := factsOf(alg)
	c := clock.NewFake(epoch.Add(time.Second))
	lim := newQuotaLimiter(t, s, alg, quotaLifetime, ratelimit.WithClock(c))
	r, ok := lim.(reserver)
	if !ok {
		t.Skipf("%T makes no reservations", lim)
	}
	switch {
	case f.Debt:
		const key = "quota-reserve-debt"
		for i := 0; ; i++ {
			d, err := lim.Allow(ctx, key)
			if err != nil {
				t.Fatal(err)
			}
			if !d.Allowed {
				break
			}
			if i > 2*quotaLimit {
				t.Fatalf("a burst of %d admitted more than %d at one instant", f.Burst, 2*quotaLimit)
			}
		}
		const span = 300 * time.Millisecond
		from := c.Now()
		booked, acting := 0, 0
		for c.Now().Sub(from) < span {
			res, err := r.Reserve(ctx, key, 1, 5*time.Second)
			if err != nil {
				t.Fatalf("Reserve: %v", err)
			}
			if res.OK() {
				booked++
				if res.TimeToAct().Sub(from) <= span {
					acting++
				}
			}
			c.Advance(time.Millisecond)
		}
		most := int(float64(f.Limit)*span.Seconds()) + 1 // r·T + 1
		if acting > most {
			t.Errorf("rule: under local quota the store books reservations: drained, then a Reserve(1, 5s) every ms for %v: %d booked, %d of them act within the span; want at most r·T + 1 = %d", span, booked, acting, most)
		}
	case f.Window > 0:
		const key = "quota-reserve-cancel"
		limit := int(f.Limit)
		for i := range limit/2 + 1 {
			res, err := r.Reserve(ctx, key, 1, time.Second)
			if err != nil || !res.OK() {
				t.Fatalf("pair %d: Reserve(1, 1s) = ok %v, %v; want admitted", i+1, res.OK(), err)
			}
			if err := res.Cancel(ctx); err != nil {
				t.Fatalf("pair %d: Cancel: %v", i+1, err)
			}
		}
		if d, err := lim.Peek(ctx, key); err != nil || d.Remaining != limit {
			t.Errorf("rule: under local quota a cancel gives back: after %d reserve-then-cancel pairs, Peek = %d remaining, %v; want %d", limit/2+1, d.Remaining, err, limit)
		}
		if cl, ok := lim.(closer); ok {
			if err := cl.Close(ctx); err != nil {
				t.Fatalf("Close: %v", err)
			}
		}
		plain, err := subjects.limiter(s, alg, ratelimit.WithClock(c))
		if err != nil {
			t.Fatal(err)
		}
		if d, err := plain.Peek(ctx, key); err != nil || d.Remaining != limit {
			t.Errorf("rule: under local quota a cancel gives back: after %d reserve-then-cancel pairs and Close, a limiter without local quota sees %d remaining, %v; want %d", limit/2+1, d.Remaining, err, limit)
		}
	default:
		t.Skipf("%s neither reserves into the future nor gives back within a window", alg.Name())
	}
}

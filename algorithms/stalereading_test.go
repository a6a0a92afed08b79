package algorithms_test

import (
	"bytes"
	"fmt"
	"testing"
	"time"

	"github.com/ratelimitkit/ratelimit/algorithms"
)

// keyed is one key as a store keeps it for the pure Decide calls of these
// tests: the state and when it expires (the request's now + its TTL, as
// every store sets it). State whose expiry has passed is no state.
type keyed struct {
	state   []byte
	expires int64
}

func (k *keyed) at(now int64) []byte {
	if k.state == nil || now >= k.expires {
		return nil
	}
	return clone(k.state)
}

// do applies req as a store would: Decide on the live state, then the
// next state with expiry req.Now + TTL.
func (k *keyed) do(t testing.TB, alg algorithms.Algorithm, req algorithms.Request) algorithms.Decision {
	t.Helper()
	st, err := alg.Decide(k.at(req.Now), req)
	if err != nil {
		t.Fatalf("%v: Decide(%+v): %v", alg, req, err)
	}
	if st.Next != nil {
		k.state, k.expires = clone(st.Next), req.Now+st.TTL
	}
	return st.Decision
}

// admitAll admits cost-1 requests at now until one is denied, and returns
// how many were admitted.
func (k *keyed) admitAll(t testing.TB, alg algorithms.Algorithm, now int64) int {
	t.Helper()
	n := 0
	for ; n < 1000; n++ {
		if !k.do(t, alg, algorithms.Request{Now: now, Cost: 1}).Allowed {
			return n
		}
	}
	t.Fatalf("%v admitted 1000 requests at one instant", alg)
	return n
}

// TestStaleReadingNumbers holds the figures issue 29 measured: a request
// whose reading is older than the state (a waiter that read the clock,
// then queued on the key's lock) must not give back what the requests in
// between spent. The burst is spent at T; a request at T−δ follows; then
// the key, asked at T and until the burst is back, must admit what a key
// that saw no stale request admits, never more.
func TestStaleReadingNumbers(t *testing.T) {
	const s, ms = time.Second, time.Millisecond
	for _, c := range []struct {
		alg   algorithms.Algorithm
		spend int
		stale time.Duration
		was   string // what the unfixed code did
	}{
		{algorithms.GCRA(200, s, 50), 50, 600 * ms, "20 units of the burst of 50 given back"},
		{algorithms.GCRA(200, s, 50), 50, 2 * s, "the whole burst of 50 given back"},
		{algorithms.TokenBucket(10, s, 20), 19, 2 * s, "expired 2s early: a full bucket, +20"},
		{algorithms.LeakyBucket(10, s, 20), 19, 2 * s, "expired 2s early: an empty queue, +20"},
		{algorithms.All(algorithms.TokenBucket(10, s, 20), algorithms.SlidingLog(1000, s)), 19, 2 * s, "the bucket's part expired 2s early, +20"},
		{algorithms.TokenBucket(10, s, 20), 19, 600 * ms, "expired 600ms early"},
		{algorithms.GCRA(10, s, 20), 19, 2 * s, ""},
		{algorithms.FixedWindow(20, s), 19, 600 * ms, ""},
		{algorithms.SlidingWindow(20, s), 19, 600 * ms, ""},
		{algorithms.SlidingLog(20, s), 19, 600 * ms, ""},
	} {
		t.Run(fmt.Sprintf("%v/%v", c.alg, c.stale), func(t *testing.T) {
			T := int64(1_800_000_000_500_000)
			var got, want keyed
			for range c.spend {
				got.do(t, c.alg, algorithms.Request{Now: T, Cost: 1})
				want.do(t, c.alg, algorithms.Request{Now: T, Cost: 1})
			}
			old := got.do(t, c.alg, algorithms.Request{Now: T - c.stale.Microseconds(), Cost: 1})
			if old.Allowed {
				// The model: the same request, served as of the state's
				// latest time.
				want.do(t, c.alg, algorithms.Request{Now: T, Cost: 1})
			}
			total, bound := 0, 0
			for at := T; at <= T+3*s.Microseconds(); at += 50 * ms.Microseconds() {
				g, w := got.admitAll(t, c.alg, at), want.admitAll(t, c.alg, at)
				total, bound = total+g, bound+w
				if total > bound {
					t.Fatalf("after %d spent at T and one request at T−%v (%s), the key admits %d from T to T+%v; a key that saw the request at T admits %d (rule: a reading older than the state never gives back; unfixed: %s)",
						c.spend, c.stale, verdict(old.Allowed), total, time.Duration(at-T)*time.Microsecond, bound, c.was)
				}
			}
		})
	}
}

func verdict(allowed bool) string {
	if allowed {
		return "admitted"
	}
	return "denied"
}

// TestStaleReadingInvariants draws, for every built-in and two
// composites, a state at T (k units spent, a reservation or not), then one
// request whose reading is older by up to 3 s (cost, peek, reservation,
// refund of a reservation made at T) and checks the rules a reading older
// than the state keeps: the state it leaves never holds less consumption
// than before at any later time, judged with each state's expiry as a
// store sets it (so a TTL too short to cover the state's latest time
// fails), except a refund's own cost; and the TTL is long enough that the
// state, when it expires, is equivalent to no state.
func TestStaleReadingInvariants(t *testing.T) {
	const s = time.Second
	algs := append(every(10, s, 8),
		algorithms.All(algorithms.TokenBucket(10, s, 8), algorithms.SlidingLog(100, s)),
		algorithms.All(algorithms.GCRA(7, s, 5), algorithms.FixedWindow(30, 3*s), algorithms.LeakyBucket(10, s, 8)),
		algorithms.GCRA(1000, 3*s, 11), algorithms.TokenBucket(1000, 3*s, 11))
	T := int64(1_800_000_000_300_000)
	for _, alg := range algs {
		for spend := int64(0); spend <= alg.MaxCost(); spend += max(alg.MaxCost()/3, 1) {
			for _, stale := range []int64{1, 1_000, 100_000, 600_000, 999_999, 1_000_000, 2_000_000, 3_000_000} {
				for kind := range 5 {
					name := fmt.Sprintf("%v/spent-%d/stale-%dus/kind-%d", alg, spend, stale, kind)
					var before keyed
					var act int64
					if spend > 0 {
						before.do(t, alg, algorithms.Request{Now: T - 1, Cost: spend})
					}
					// A reservation at T that the refund (kind 4) gives back.
					r := before.do(t, alg, algorithms.Request{Now: T, Cost: 1, MaxDelay: 2_000_000})
					if r.Allowed {
						act = T + minDelay(r)
					}
					req := algorithms.Request{Now: T - stale, Cost: 1}
					switch kind {
					case 1:
						req.Cost = alg.MaxCost()
					case 2:
						req.Peek = true
					case 3:
						req.MaxDelay = 1_500_000
					case 4:
						if !r.Allowed {
							continue
						}
						req.Refund, req.Act = true, act
					}
					after := before
					after.state = clone(before.state)
					st, err := alg.Decide(after.at(req.Now), req)
					if err != nil {
						t.Fatalf("%s: Decide(%+v): %v", name, req, err)
					}
					if st.Next != nil {
						after.state, after.expires = clone(st.Next), req.Now+st.TTL
						// The TTL: at expiry the state is no state.
						e := after.expires
						peek := algorithms.Request{Now: e, Cost: 1, Peek: true}
						a, _ := alg.Decide(clone(st.Next), peek)
						b, _ := alg.Decide(nil, peek)
						if a.Decision.Remaining != b.Decision.Remaining || a.Decision.ResetAfter != b.Decision.ResetAfter {
							t.Fatalf("%s: %+v wrote TTL %d (expiry T+%dus), where the state still reads remaining %d, reset after %d, not a fresh key's %d, %d (rule: the TTL covers the state's latest time)",
								name, req, st.TTL, e-T, a.Decision.Remaining, a.Decision.ResetAfter, b.Decision.Remaining, b.Decision.ResetAfter)
						}
					}
					slack := int64(0)
					if req.Refund {
						slack = req.Cost
					}
					for at := T; at <= T+4_000_000; at += 37_000 {
						peek := algorithms.Request{Now: at, Cost: 1, Peek: true}
						a, err1 := alg.Decide(after.at(at), peek)
						b, err2 := alg.Decide(before.at(at), peek)
						if err1 != nil || err2 != nil {
							t.Fatalf("%s: peek at T+%dus: %v, %v", name, at-T, err1, err2)
						}
						if a.Decision.Remaining > b.Decision.Remaining+slack {
							t.Fatalf("%s: after %+v (%s), a peek at T+%dus reads remaining %d, before it %d (rule: a reading older than the state never gives back what it did not take)",
								name, req, verdict(st.Decision.Allowed), at-T, a.Decision.Remaining, b.Decision.Remaining)
						}
					}
				}
			}
		}
	}
}

// TestGCRARetryAfterAcrossNumbers is what GCRA's old cap was for: after
// numbers change to a shorter refill (the TAT written under the old ones
// lies far ahead, even beyond the state's bound, where it is read as
// capped), a denied request retried when its RetryAfter says is admitted,
// and not a microsecond before; and the denial writes nothing, so nothing
// is handed back.
func TestGCRARetryAfterAcrossNumbers(t *testing.T) {
	const T = int64(1_800_000_000_000_000)
	for _, c := range []struct{ from, to algorithms.Algorithm }{
		{algorithms.GCRA(10, time.Hour, 10), algorithms.GCRA(10, time.Minute, 10)},
		{algorithms.GCRA(1, 24*time.Hour, 7), algorithms.GCRA(1000, 3*time.Second, 11)},
		// A TAT hours ahead is beyond the bound of a rate this fast.
		{algorithms.GCRA(1, time.Hour, 10), algorithms.GCRA(algorithms.MaxExact/1024, time.Microsecond, 3)},
	} {
		var k keyed
		for range c.from.MaxCost() {
			k.do(t, c.from, algorithms.Request{Now: T, Cost: 1})
		}
		now := T + 90_000_000
		before := clone(k.state)
		d := k.do(t, c.to, algorithms.Request{Now: now, Cost: 1})
		if d.Allowed || d.RetryAfter <= 0 {
			t.Fatalf("%v then %v: %s, retry after %d; want denied", c.from, c.to, verdict(d.Allowed), d.RetryAfter)
		}
		if !bytes.Equal(k.state, before) {
			t.Fatalf("%v then %v: a denial wrote state", c.from, c.to)
		}
		if early := k.do(t, c.to, algorithms.Request{Now: now + d.RetryAfter - 1, Cost: 1}); early.Allowed {
			t.Fatalf("%v then %v: admitted a microsecond before its RetryAfter %d", c.from, c.to, d.RetryAfter)
		}
		if late := k.do(t, c.to, algorithms.Request{Now: now + d.RetryAfter, Cost: 1}); !late.Allowed {
			t.Fatalf("%v then %v: denied when its RetryAfter %d had passed (rule: a RetryAfter holds after a change of numbers)", c.from, c.to, d.RetryAfter)
		}
	}
}

package algorithms_test

import (
	"math/rand/v2"
	"testing"
	"time"

	"github.com/ratelimitkit/ratelimit/algorithms"
)

// TestRefundInvariants runs random sequences of requests, reservations and
// refunds of earlier reservations on every built-in, clocks stepping back
// included, and checks what a refund may do: it is admitted, it never
// gives back more than its cost, it never leaves more room than a fresh
// key, and a refund that gives nothing writes nothing. Reservations that
// the algorithm admits with a delay are served no later than MaxDelay.
func TestRefundInvariants(t *testing.T) {
	for seed := uint64(1); seed <= 30; seed++ {
		rng := rand.New(rand.NewPCG(seed, 7))
		limit, burst := 1+rng.Int64N(9), 1+rng.Int64N(9)
		period := time.Duration(1+rng.Int64N(5000)) * time.Millisecond
		all := append(every(limit, period, burst), algorithms.All(algorithms.GCRA(limit, period, burst), algorithms.FixedWindow(limit+2, 3*period)))
		for _, alg := range all {
			type held struct{ cost, act int64 }
			var state []byte
			var holds []held
			now := int64(1_800_000_000_000_000)
			for i := 0; i < 400; i++ {
				now += rng.Int64N(period.Microseconds()/3+2) - period.Microseconds()/20
				cost := 1 + rng.Int64N(alg.MaxCost())
				req := algorithms.Request{Now: now, Cost: cost}
				refund := len(holds) > 0 && rng.IntN(4) == 0
				if refund {
					k := rng.IntN(len(holds))
					req = algorithms.Request{Now: now, Cost: holds[k].cost, Refund: true, Act: holds[k].act}
					holds = append(holds[:k], holds[k+1:]...)
				} else if rng.IntN(2) == 0 {
					req.MaxDelay = rng.Int64N(3 * period.Microseconds())
				}
				before, err := alg.Decide(clone(state), algorithms.Request{Now: now, Cost: 1, Peek: true})
				if err != nil {
					t.Fatal(err)
				}
				st, err := alg.Decide(clone(state), req)
				if err != nil {
					t.Fatalf("%v step %d: Decide(%+v): %v", alg, i, req, err)
				}
				d := st.Decision
				switch {
				case refund:
					if !d.Allowed && alg.Name() != "sliding_log" && !isComposite(alg) {
						t.Fatalf("%v step %d: refund %+v denied", alg, i, req)
					}
					if d.Remaining > d.Limit || d.Remaining > before.Decision.Remaining+req.Cost {
						t.Fatalf("%v step %d: refund of %d: remaining %d from %d, limit %d (rule: gives back at most its cost, never above a fresh key)",
							alg, i, req.Cost, d.Remaining, before.Decision.Remaining, d.Limit)
					}
					if alg.Name() == "sliding_log" && st.Next != nil {
						t.Fatalf("%v step %d: refund wrote state (rule: the log gives nothing back)", alg, i)
					}
				case d.Allowed:
					if d.Delay > max(req.MaxDelay, 0) && alg.Name() != "leaky_bucket" && !isComposite(alg) {
						t.Fatalf("%v step %d: %+v admitted with delay %d above its max delay", alg, i, req, d.Delay)
					}
					holds = append(holds, held{req.Cost, now + minDelay(d)})
				}
				if st.Next != nil {
					state = clone(st.Next)
				}
			}
		}
	}
}

func isComposite(alg algorithms.Algorithm) bool {
	_, ok := alg.(algorithms.Composite)
	return ok
}

// minDelay is the delay a refund's Act is measured from: a composite's
// earliest part's (as ratelimit.Reservation does).
func minDelay(d algorithms.Decision) int64 {
	m := d.Delay
	for _, p := range d.Parts {
		m = min(m, p.Delay)
	}
	return m
}

func clone(b []byte) []byte {
	if b == nil {
		return nil
	}
	return append([]byte(nil), b...)
}

// TestReserveHonoursMaxDelay checks that the token bucket and GCRA book as
// far ahead as MaxDelay says, as golang.org/x/time/rate's ReserveN does:
// at 10/s with a burst of 1, reservations at one instant with a 2 s
// MaxDelay are admitted with delays 0, 100 ms, …, 2 s (21 of them; the
// 22nd would wait 2.1 s and is denied). Issue 29 measured 3 of 20 when
// the reach stopped at two bursts.
func TestReserveHonoursMaxDelay(t *testing.T) {
	const T = int64(1_800_000_000_000_000)
	for _, alg := range []algorithms.Algorithm{algorithms.TokenBucket(10, time.Second, 1), algorithms.GCRA(10, time.Second, 1)} {
		var k keyed
		for i := int64(0); i < 22; i++ {
			d := k.do(t, alg, algorithms.Request{Now: T, Cost: 1, MaxDelay: 2_000_000})
			want := i <= 20
			if d.Allowed != want || want && d.Delay != i*100_000 {
				t.Fatalf("%v: reservation %d of cost 1 at one instant, MaxDelay 2s = %s, delay %v; want %s, delay %v (as x/time/rate's ReserveN)",
					alg, i+1, verdict(d.Allowed), time.Duration(d.Delay)*time.Microsecond, verdict(want), time.Duration(i*100_000)*time.Microsecond)
			}
		}
		// A refund of the last one gives it back exactly.
		d := k.do(t, alg, algorithms.Request{Now: T, Cost: 1, Refund: true, Act: T + 2_000_000})
		if !d.Allowed {
			t.Fatalf("%v: refund denied", alg)
		}
		if d := k.do(t, alg, algorithms.Request{Now: T, Cost: 1, MaxDelay: 2_000_000}); !d.Allowed || d.Delay != 2_000_000 {
			t.Fatalf("%v: after the last reservation was given back, the next = %s, delay %v; want admitted, delay 2s", alg, verdict(d.Allowed), time.Duration(d.Delay)*time.Microsecond)
		}
	}
}

// TestReserveStateBounded books as far as a reservation may (MaxDelay of
// MaxPeriod, the most Limiter.Reserve passes, and far beyond it) at numbers
// at the parameter checks' bounds, and checks that every state written
// decodes again: every field stays at most MaxExact.
func TestReserveStateBounded(t *testing.T) {
	const bigN = algorithms.MaxExact / 1024
	T := int64(algorithms.MaxExact/2 - 1) // the latest time a Limiter passes
	for _, n := range []struct {
		limit  int64
		period time.Duration
		burst  int64
	}{{1, algorithms.MaxPeriod, 7}, {999983, algorithms.MaxPeriod, 7}, {bigN, time.Microsecond, bigN}, {bigN, algorithms.MaxPeriod, 1}, {1, 1 << 48 * time.Microsecond, 8}, {10, time.Second, 1}} {
		for _, alg := range []algorithms.Algorithm{algorithms.TokenBucket(n.limit, n.period, n.burst), algorithms.GCRA(n.limit, n.period, n.burst)} {
			if alg.Validate() != nil {
				continue
			}
			for _, md := range []int64{int64(algorithms.MaxPeriod / time.Microsecond), algorithms.MaxExact} {
				var k keyed
				for i := 0; i < 200; i++ {
					d := k.do(t, alg, algorithms.Request{Now: T, Cost: alg.MaxCost(), MaxDelay: md})
					if !d.Allowed {
						break
					}
					if d.Delay > md || d.Delay > int64(algorithms.MaxPeriod/time.Microsecond)+int64(n.period/time.Microsecond)*n.burst {
						t.Fatalf("%v: delay %d beyond MaxDelay %d or MaxPeriod", alg, d.Delay, md)
					}
				}
				if _, err := alg.Decide(k.at(T), algorithms.Request{Now: T, Cost: 1, Peek: true}); err != nil {
					t.Fatalf("%v: after booking with MaxDelay %d: %v (rule: every field of the state stays at most MaxExact)", alg, md, err)
				}
			}
		}
	}
}

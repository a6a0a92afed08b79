package algorithms_test

import (
	"bytes"
	"errors"
	"math/rand/v2"
	"reflect"
	"testing"
	"time"

	"github.com/ratelimitkit/ratelimit/algorithms"
)

func TestInvalidParams(t *testing.T) {
	const s = time.Second
	cases := []struct {
		name string
		alg  algorithms.Algorithm
	}{
		{"zero limit", algorithms.FixedWindow(0, s)},
		{"negative limit", algorithms.SlidingLog(-1, s)},
		{"zero period", algorithms.SlidingWindow(10, 0)},
		{"negative period", algorithms.GCRA(10, -s, 1)},
		{"sub-microsecond period", algorithms.TokenBucket(10, s+time.Nanosecond, 1)},
		{"period above the maximum", algorithms.FixedWindow(10, algorithms.MaxPeriod+time.Microsecond)},
		{"zero burst", algorithms.TokenBucket(10, s, 0)},
		{"negative capacity", algorithms.LeakyBucket(10, s, -5)},
		{"huge limit", algorithms.FixedWindow(1<<62, s)},
		{"overflowing burst × period", algorithms.GCRA(999983, 24*time.Hour, 999983)},
	}
	for _, c := range cases {
		err := c.alg.Validate()
		if !errors.Is(err, algorithms.ErrInvalidParams) {
			t.Errorf("%s: %v.Validate() = %v, want ErrInvalidParams", c.name, c.alg, err)
		}
	}
	valid := []algorithms.Algorithm{
		algorithms.FixedWindow(1, time.Microsecond),
		algorithms.GCRA(1_000_000, 24*time.Hour, 1_000_000), // reduces by gcd
		algorithms.TokenBucket(7, 24*time.Hour, 7),
		algorithms.LeakyBucket(1, algorithms.MaxPeriod, 1),
	}
	for _, alg := range valid {
		if err := alg.Validate(); err != nil {
			t.Errorf("%v.Validate() = %v, want nil", alg, err)
		}
	}
}

// every returns one instance of each built-in algorithm with the given
// numbers.
func every(limit int64, period time.Duration, burst int64) []algorithms.Algorithm {
	return []algorithms.Algorithm{
		algorithms.FixedWindow(limit, period),
		algorithms.SlidingLog(limit, period),
		algorithms.SlidingWindow(limit, period),
		algorithms.TokenBucket(limit, period, burst),
		algorithms.LeakyBucket(limit, period, burst),
		algorithms.GCRA(limit, period, burst),
	}
}

func TestCorruptState(t *testing.T) {
	for _, alg := range every(5, time.Second, 5) {
		for _, state := range [][]byte{{1}, make([]byte, 7), make([]byte, 33)} {
			_, err := alg.Decide(state, algorithms.Request{Now: 1, Cost: 1})
			if !errors.Is(err, algorithms.ErrCorruptState) {
				t.Errorf("%v.Decide(%d bytes) = %v, want ErrCorruptState", alg, len(state), err)
			}
		}
	}
}

// TestTokenBucketIsGCRA checks that the token bucket and GCRA, two
// bookkeepings of one policy, make identical decisions.
func TestTokenBucketIsGCRA(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 11))
	for trial := 0; trial < 50; trial++ {
		limit := 1 + rng.Int64N(50)
		period := time.Duration(1+rng.Int64N(2_000_000)) * time.Microsecond
		burst := 1 + rng.Int64N(20)
		tb, g := algorithms.TokenBucket(limit, period, burst), algorithms.GCRA(limit, period, burst)
		var tbState, gState []byte
		now := int64(1_700_000_000_000_000)
		for i := 0; i < 300; i++ {
			now += rng.Int64N(int64(period/time.Microsecond)/limit*2 + 1)
			req := algorithms.Request{Now: now, Cost: 1 + rng.Int64N(burst), Peek: rng.IntN(10) == 0}
			a, err := tb.Decide(tbState, req)
			if err != nil {
				t.Fatal(err)
			}
			b, err := g.Decide(gState, req)
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(a.Decision, b.Decision) {
				t.Fatalf("trial %d step %d %v vs %v with %+v: token bucket %+v, GCRA %+v", trial, i, tb, g, req, a.Decision, b.Decision)
			}
			if a.Next != nil {
				tbState = a.Next
			}
			if b.Next != nil {
				gState = b.Next
			}
		}
	}
}

// step runs one request against the state held in *state.
func step(t testing.TB, alg algorithms.Algorithm, state *[]byte, req algorithms.Request) algorithms.Decision {
	t.Helper()
	st, err := alg.Decide(*state, req)
	if err != nil {
		t.Fatalf("%v.Decide(%+v): %v", alg, req, err)
	}
	if st.Next != nil {
		if req.Peek {
			t.Fatalf("%v.Decide(%+v) with Peek returned state to store", alg, req)
		}
		if st.TTL < 1 {
			t.Fatalf("%v.Decide(%+v) returned state with TTL %d µs", alg, req, st.TTL)
		}
		*state = append([]byte(nil), st.Next...)
	}
	return st.Decision
}

// checkInvariants runs a random request sequence and checks the properties
// every algorithm keeps:
//   - a decision's numbers are in range;
//   - Peek changes nothing;
//   - the window algorithms never admit more than the limit in a period
//     (the fixed window within one aligned window; the sliding log in any
//     period);
//   - once the TTL of the stored state has passed, the state decides like
//     no state at all, so correctness never depends on the TTL firing.
func checkInvariants(t testing.TB, alg algorithms.Algorithm, limit, period int64, seed uint64, maxStep int64) {
	rng := rand.New(rand.NewPCG(seed, 3))
	var state []byte
	var stored, ttl int64 // when state was stored, and its TTL
	now := int64(1_800_000_000_000_000)
	type admit struct{ at, cost int64 }
	var admitted []admit
	for i := 0; i < 200; i++ {
		now += rng.Int64N(maxStep + 1)
		req := algorithms.Request{Now: now, Cost: 1 + rng.Int64N(alg.MaxCost())}
		if rng.IntN(4) > 0 {
			req.Cost = 1
		}
		if state != nil && now >= stored+ttl {
			// Expired state must decide as no state.
			fresh, err := alg.Decide(nil, req)
			if err != nil {
				t.Fatal(err)
			}
			old, err := alg.Decide(bytes.Clone(state), req)
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(fresh.Decision, old.Decision) {
				t.Fatalf("%v at %d, %d µs after its TTL: expired state decides %+v, no state %+v", alg, now, now-stored-ttl, old.Decision, fresh.Decision)
			}
		}
		peek := step(t, alg, &state, algorithms.Request{Now: now, Cost: 1, Peek: true})
		before := bytes.Clone(state)
		if peek2 := step(t, alg, &state, algorithms.Request{Now: now, Cost: 1, Peek: true}); !reflect.DeepEqual(peek2, peek) || !bytes.Equal(before, state) {
			t.Fatalf("%v: a second Peek at %d gave %+v after %+v", alg, now, peek2, peek)
		}
		st, err := alg.Decide(state, req)
		if err != nil {
			t.Fatal(err)
		}
		d := st.Decision
		if st.Next != nil {
			state, stored, ttl = bytes.Clone(st.Next), now, st.TTL
		}
		switch {
		case d.Remaining < 0 || d.Remaining > d.Limit:
			t.Fatalf("%v: remaining %d outside 0..%d", alg, d.Remaining, d.Limit)
		case d.Allowed && d.RetryAfter != 0:
			t.Fatalf("%v: allowed with retry after %d", alg, d.RetryAfter)
		case !d.Allowed && d.RetryAfter <= 0:
			t.Fatalf("%v: denied %+v with retry after %d", alg, req, d.RetryAfter)
		case d.ResetAfter < 0 || d.Delay < 0:
			t.Fatalf("%v: negative reset after %d or delay %d", alg, d.ResetAfter, d.Delay)
		case d.Allowed != peek.Allowed && req.Cost == 1:
			t.Fatalf("%v: Peek said %v, AllowN(1) said %v at %d", alg, peek.Allowed, d.Allowed, now)
		}
		if d.Allowed {
			admitted = append(admitted, admit{now, req.Cost})
		}
	}
	if alg.Name() != "fixed_window" && alg.Name() != "sliding_log" {
		return
	}
	for i, a := range admitted {
		var sum int64
		for _, b := range admitted[i:] {
			inWindow := b.at < a.at+period
			if alg.Name() == "fixed_window" {
				inWindow = b.at/period == a.at/period
			}
			if inWindow {
				sum += b.cost
			}
		}
		if sum > limit {
			t.Fatalf("%v admitted %d in the period from %d, above its limit %d", alg, sum, a.at, limit)
		}
	}
}

func TestInvariants(t *testing.T) {
	for seed := uint64(1); seed <= 20; seed++ {
		limit, period := 1+int64(seed%7), int64(seed*97)*1000
		for _, alg := range every(limit, time.Duration(period)*time.Microsecond, 1+int64(seed%5)) {
			checkInvariants(t, alg, limit, period, seed, int64(seed*40)*1000)
		}
	}
}

func FuzzInvariants(f *testing.F) {
	f.Add(int64(5), int64(1_000_000), int64(3), uint64(1), int64(300_000))
	f.Add(int64(3), int64(1_000_000), int64(1), uint64(2), int64(400_000))
	f.Add(int64(1000), int64(3_600_000_000), int64(100), uint64(3), int64(10_000_000))
	f.Fuzz(func(t *testing.T, limit, periodUs, burst int64, seed uint64, maxStep int64) {
		if maxStep < 0 || maxStep > 1<<40 || limit > 1000 || burst > 1000 {
			t.Skip()
		}
		for _, alg := range every(limit, time.Duration(periodUs)*time.Microsecond, burst) {
			if alg.Validate() != nil {
				continue
			}
			checkInvariants(t, alg, limit, periodUs, seed, maxStep)
		}
	})
}

// FuzzCorruptState feeds arbitrary bytes as stored state: an algorithm
// returns an error or a decision, never panics.
func FuzzCorruptState(f *testing.F) {
	f.Add([]byte{}, int64(0))
	f.Add(make([]byte, 24), int64(1<<50))
	f.Add(make([]byte, 32), int64(5))
	f.Fuzz(func(t *testing.T, state []byte, now int64) {
		if now < 0 || now > algorithms.MaxExact/2 {
			t.Skip()
		}
		for _, alg := range every(5, time.Second, 5) {
			st, err := alg.Decide(bytes.Clone(state), algorithms.Request{Now: now, Cost: 1})
			if err == nil && st.Next != nil && st.TTL < 1 {
				t.Fatalf("%v: state written with TTL %d", alg, st.TTL)
			}
		}
	})
}

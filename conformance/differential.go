package conformance

import (
	"bytes"
	"context"
	"encoding/binary"
	"fmt"
	"math/rand/v2"
	"reflect"
	"slices"
	"testing"
	"time"

	"github.com/ratelimitkit/ratelimit"
	"github.com/ratelimitkit/ratelimit/algorithms"
	"github.com/ratelimitkit/ratelimit/algorithms/forms"
	"github.com/ratelimitkit/ratelimit/clock"
	"github.com/ratelimitkit/ratelimit/store"
)

// The Differential groups hold a store to the Go forms: seeded random
// sequences of requests go through the store and through the Go form on
// local state (the model), and every decision must be equal, field by
// field. Where the harness can read the store's state (Harness.State),
// every write must also equal the Go form's next state, with the same
// TTL. On the server path this proves a store's server-side forms equal
// to the Go forms; on the update path, that Update keeps state faithfully.

// family is a set of parameters for one algorithm, switched at random in
// the middle of a sequence under one limiter name, so that each form must
// read state written under other numbers (the rate algorithms' rescale,
// GCRA's fraction rescale, windows of another length).
type family struct {
	name string
	algs []algorithms.Algorithm
	// span is the time scale of the family's periods: steps are drawn
	// from small ones and from fractions of it.
	span time.Duration
}

// families returns, for each built-in algorithm (forms.Builtins), one
// family of everyday numbers (uneven rates such as 1000 per 3 s, where a
// unit's interval is not a whole number of microseconds) and one of numbers
// at the bounds the parameter checks allow, where the server forms' doubles
// and bigints come closest to their limits.
func families() []family {
	const ms, s, us = time.Millisecond, time.Second, time.Microsecond
	const bigN = algorithms.MaxExact / 1024 // the largest count the checks allow
	const maxP = algorithms.MaxPeriod
	everyday := []numbers{{3, 100 * ms, 7}, {7, s, 5}, {1000, 3 * s, 11}}
	bounds := []numbers{{1, maxP, 7}, {999983, maxP, 7}, {bigN, us, bigN}, {bigN, maxP, 1}}
	var out []family
	for _, b := range forms.Builtins() {
		out = append(out,
			family{b.Name, instances(b, everyday), s},
			family{b.Name + "-bounds", instances(b, bounds), maxP})
	}
	return out
}

// numbers are the arguments of forms.Builtin.New.
type numbers struct {
	limit  int64
	period time.Duration
	burst  int64
}

// instances returns b with each of ns that its parameter checks accept.
func instances(b *forms.Builtin, ns []numbers) []algorithms.Algorithm {
	var out []algorithms.Algorithm
	for _, n := range ns {
		if a := b.New(n.limit, n.period, n.burst); a.Validate() == nil {
			out = append(out, a)
		}
	}
	return out
}

// The fake clock stays within [minNow, maxNow] µs: well after the epoch,
// and below the limiter's bound of MaxExact/2.
const (
	minNow = int64(1_000_000_000_000_000) // 2001
	maxNow = algorithms.MaxExact/2 - 1
)

// smallSteps are clock steps below any period's scale.
var smallSteps = []time.Duration{0, 0, 0, time.Microsecond, 7 * time.Microsecond, time.Millisecond, 13 * time.Millisecond, 33333 * time.Microsecond, 99999 * time.Microsecond}

// step draws the next clock step: often small, often a fraction of the
// span (give or take a microsecond, to land on both sides of window and
// refill edges), and one time in five backwards, as when a request comes
// from a machine whose clock runs behind the last writer's. Besides these
// steps, runSequence reads one request in eight up to 3 s before the
// clock, which then goes on from where it was: readings out of order.
func (fam family) step(rng *rand.Rand) time.Duration {
	var d time.Duration
	if rng.IntN(2) == 0 {
		d = smallSteps[rng.IntN(len(smallSteps))]
	} else {
		d = fam.span*time.Duration(1+rng.IntN(8))/7 + time.Duration(rng.IntN(3)-1)*time.Microsecond
	}
	if rng.IntN(5) == 0 {
		d = -d
	}
	return d
}

// cost draws a request's cost: mostly 1, else anything up to the maximum,
// the maximum itself, or just below it.
func drawCost(rng *rand.Rand, maxCost int64) int64 {
	switch rng.IntN(6) {
	case 0:
		return 1 + rng.Int64N(maxCost)
	case 1:
		return maxCost
	case 2:
		return max(maxCost-rng.Int64N(3), 1)
	}
	return 1
}

// model is what the store should hold for a key: the Go form's last
// written state and when its TTL passes. The state counts as missing at
// any time not before expires, and as live again should the clock step
// back before it.
type model struct {
	state   []byte
	expires int64
	// written is when, by this machine's clock, the state was written,
	// and at0 the limiter's time of that write.
	written time.Time
	at0     int64
}

// realTTLPassed reports whether the backend, which expires keys by real
// time, may have dropped the model's state: its TTL has passed in real time
// since it was written.
func (m *model) realTTLPassed(h Harness) bool {
	return h.RealTimeExpiry && m.state != nil && time.Since(m.written) >= time.Duration(m.expires-m.at0)*time.Microsecond
}

// at returns the state the Go form sees at now.
func (m *model) at(now int64) []byte {
	if m.state == nil || now >= m.expires {
		return nil
	}
	return bytes.Clone(m.state)
}

// testDifferential runs seeded random sequences on the limiter's (fake)
// clock, for every family, on both paths.
func testDifferential(t *testing.T, newHarness func(*testing.T) Harness) {
	for _, p := range paths {
		if p.name == "server" && !storeHas(t).decider {
			continue
		}
		t.Run(p.name, func(t *testing.T) {
			for _, fam := range families() {
				t.Run(fam.name, func(t *testing.T) {
					h := newHarness(t)
					s := p.wrap(t, h, h.Store, fam.algs[0])
					for seed := uint64(1); seed <= 2; seed++ {
						runSequence(t, h, s, fam, seed, 200)
					}
				})
			}
		})
	}
}

// runSequence runs n random requests for one key through limiters of
// every algorithm in fam, sharing one name and one fake clock.
func runSequence(t *testing.T, h Harness, s store.Store, fam family, seed uint64, n int) {
	t.Helper()
	ctx := context.Background()
	rng := rand.New(rand.NewPCG(seed, 0x5eed))
	f := newFixture(t, s, fam.algs[0], ratelimit.WithName("differential"))
	lims := []*fixture{f}
	for _, alg := range fam.algs[1:] {
		lims = append(lims, f.sibling(s, alg, ratelimit.WithName("differential")))
	}
	id := fmt.Sprintf("differential-%d", seed)
	key := store.Key{Namespace: f.lim.Namespace(), ID: id}
	var m model
	var holds []held // admitted reservations not yet cancelled
	for i := 0; i < n; i++ {
		j := 0
		if rng.IntN(4) == 0 {
			j = rng.IntN(len(fam.algs))
		}
		alg, lim := fam.algs[j], lims[j].lim
		now := f.clock.Now().UnixMicro()
		next := now + fam.step(rng).Microseconds()
		if next < minNow || next > maxNow {
			next = now - (next - now)
		}
		if h.RealTimeExpiry && m.state != nil && next < m.expires &&
			2*time.Since(m.written) >= time.Duration(m.expires-m.at0)*time.Microsecond {
			// The backend expires keys by real time, and half the state's
			// TTL has passed in real time: it may be gone by the time this
			// request and the State read after it reach the backend. Do
			// not step to where the model's state would be live.
			next = m.expires
		}
		resume := next // where the clock goes on from after this request
		if rng.IntN(8) == 0 && next-3_000_000 >= minNow && !(h.RealTimeExpiry && m.state != nil &&
			2*time.Since(m.written) >= time.Duration(m.expires-m.at0)*time.Microsecond) {
			// A reading older than the state, by up to 3 s: a request that
			// read the clock, then waited for the key, or one from a
			// process whose clock runs behind; the clock then goes on
			// from where it was.
			next -= rng.Int64N(3_000_001)
		}
		f.clock.Set(time.UnixMicro(next))
		now = next
		cost := drawCost(rng, alg.MaxCost())
		peek := rng.IntN(8) == 0
		if peek {
			cost = 1 // what Limiter.Peek asks
		}
		req := algorithms.Request{Now: now, Cost: cost, Peek: peek}
		// One request in five is a reservation, and one in eight gives
		// back an earlier one (Reservation.Cancel), with the algorithm
		// that reserved it.
		var cancel *held
		switch {
		case len(holds) > 0 && rng.IntN(8) == 0:
			k := rng.IntN(len(holds))
			c := holds[k]
			cancel = &c
			holds = slices.Delete(holds, k, k+1)
			alg = cancel.alg
			req = algorithms.Request{Now: now, Cost: cancel.cost, Refund: true, Act: cancel.act}
		case !peek && rng.IntN(5) == 0:
			req.MaxDelay = min(fam.maxDelay(rng), algorithms.MaxPeriod).Microseconds() // as Limiter.Reserve clamps it
		}
		want, err := alg.Decide(m.at(now), req)
		if err != nil {
			t.Fatalf("seed %d step %d: Go form %v Decide(%v, %+v): %v", seed, i, alg, fields(m.at(now)), req, err)
		}
		written := time.Now()
		var got ratelimit.Decision
		var call string
		switch {
		case cancel != nil:
			call = fmt.Sprintf("Reservation{cost %d, act µs %d}.Cancel()", cancel.cost, cancel.act)
			err = cancel.r.Cancel(ctx) // it reports no decision: the state is compared below
		case req.MaxDelay > 0:
			var r *ratelimit.Reservation
			call = fmt.Sprintf("lim.Reserve(%q, %d, %v)", id, cost, time.Duration(req.MaxDelay)*time.Microsecond)
			if r, err = lim.Reserve(ctx, id, int(cost), time.Duration(req.MaxDelay)*time.Microsecond); err == nil {
				got = r.Decision()
				if r.OK() {
					holds = append(holds, newHeld(r, alg, cost))
				}
			}
		default:
			got, call, err = ask(ctx, lim, id, cost, peek)
		}
		if err != nil {
			t.Fatalf("seed %d step %d: %v: %s at %s: %v", seed, i, alg, call, f.at(), err)
		}
		if cancel == nil && !sameDecision(want.Decision, got) && m.realTTLPassed(h) {
			// This machine stalled past the state's TTL in real time, and a
			// backend that expires keys by real time may have dropped it:
			// the store must then decide as on no state.
			if alt, err := alg.Decide(nil, req); err == nil && sameDecision(alt.Decision, got) {
				want, m.state = alt, nil
			}
		}
		if cancel == nil && !sameDecision(want.Decision, got) {
			t.Fatalf("seed %d step %d: %v: %s at %s (µs %d) on state %v = %+v, want the Go form's %+v",
				seed, i, alg, call, f.at(), now, fields(m.at(now)), got, want.Decision)
		}
		if want.Next != nil {
			m.state, m.expires, m.written, m.at0 = bytes.Clone(want.Next), now+want.TTL, written, now
		}
		if h.State != nil && m.state != nil && now < m.expires {
			st, exp, err := h.State(ctx, key)
			if err != nil {
				t.Fatalf("seed %d step %d: Harness.State(%q): %v", seed, i, key, err)
			}
			if st == nil && m.realTTLPassed(h) {
				// The state's TTL has passed in real time (this machine
				// stalled), and the backend reclaimed it: so be it.
				m.state = nil
			} else if !bytes.Equal(st, m.state) || exp != m.expires {
				t.Fatalf("seed %d step %d: %v: after %s at µs %d the store holds %v expiring at %d, want the Go form's %v expiring at %d (TTL %d)",
					seed, i, alg, call, now, fields(st), exp, fields(m.state), m.expires, m.expires-now)
			}
		}
		f.clock.Set(time.UnixMicro(resume))
	}
	if err := f.lim.Reset(ctx, id); err != nil {
		t.Fatalf("lim.Reset(%q): %v", id, err)
	}
}

// serverClockFamilies are small, fast policies for sequences in real time.
func serverClockFamilies() []family {
	const ms = time.Millisecond
	small := []numbers{{3, 10 * ms, 4}, {9, 7 * ms, 3}, {1000, 3 * time.Second, 5}}
	var out []family
	for _, b := range forms.Builtins() {
		out = append(out, family{b.Name, instances(b, small), 10 * ms})
	}
	return out
}

// testDifferentialServerClock runs random sequences in real time on a
// store that reads its server's clock, on both paths. The limiter's clock
// is a fake one stuck in 2001, so a store that used it would be caught. The
// server's time of each call is unknown but lies between this machine's
// clock readings before and after it; the decision, and with Harness.State
// the write, must equal the Go form's at some time in that interval, and
// the model follows the store at that time.
func testDifferentialServerClock(t *testing.T, newHarness func(*testing.T) Harness) {
	// Said once for the group, not once per path and algorithm.
	if h := newHarness(t); h.ServerClock == nil {
		t.Skip("harness has no ServerClock: the store has no server clock, or the harness does not offer it")
	} else if h.State == nil {
		t.Skip("harness has no State: the server's time of a call cannot be pinned down without the state it wrote")
	}
	for _, p := range paths {
		if p.name == "server" && !storeHas(t).decider {
			continue
		}
		t.Run(p.name, func(t *testing.T) {
			for _, fam := range serverClockFamilies() {
				t.Run(fam.name, func(t *testing.T) {
					h := newHarness(t)
					s := p.wrap(t, h, h.ServerClock(t), fam.algs[0])
					runServerClockSequence(t, h, s, fam, 40)
				})
			}
		})
	}
}

// withoutServerClock hides s's store.ServerClocker, if it has one, so
// that a limiter on it takes a clock: ratelimit.New refuses a clock a
// store on its server's clock would ignore, and this group passes one to
// prove that the store does ignore it.
func withoutServerClock(s store.Store) store.Store {
	if d, ok := s.(store.Decider); ok {
		return struct {
			store.Store
			store.Decider
		}{s, d}
	}
	return struct{ store.Store }{s}
}

func runServerClockSequence(t *testing.T, h Harness, s store.Store, fam family, n int) {
	t.Helper()
	ctx := context.Background()
	rng := rand.New(rand.NewPCG(7, 0xc10c))
	stuck := clock.NewFake(time.Date(2001, 1, 1, 0, 0, 0, 0, time.UTC))
	var lims []*ratelimit.Limiter
	for _, alg := range fam.algs {
		lim, err := ratelimit.New(withoutServerClock(s), alg, ratelimit.WithClock(stuck), ratelimit.WithName("server-clock"))
		if err != nil {
			t.Fatalf("ratelimit.New(%v): %v", alg, err)
		}
		lims = append(lims, lim)
	}
	const id = "server-clock"
	key := store.Key{Namespace: lims[0].Namespace(), ID: id}
	var m model
	for i := 0; i < n; i++ {
		j := 0
		if rng.IntN(4) == 0 {
			j = rng.IntN(len(fam.algs))
		}
		alg, lim := fam.algs[j], lims[j]
		if rng.IntN(3) == 0 {
			time.Sleep(time.Duration(rng.Int64N(int64(fam.span) / 3)))
		}
		cost := drawCost(rng, alg.MaxCost())
		peek := rng.IntN(8) == 0
		if peek {
			cost = 1
		}
		before := time.Now().UnixMicro()
		got, call, err := ask(ctx, lim, id, cost, peek)
		after := time.Now().UnixMicro()
		if err != nil {
			t.Fatalf("step %d: %v: %s: %v", i, alg, call, err)
		}
		st, exp, err := h.State(ctx, key)
		if err != nil {
			t.Fatalf("step %d: Harness.State(%q): %v", i, key, err)
		}
		// State whose TTL has passed by now may be gone from the backend.
		read := time.Now().UnixMicro()
		if after-before > int64(10*time.Second/time.Microsecond) {
			t.Fatalf("step %d: %s took %v: too long to pin down the server's time", i, call, time.Duration(after-before)*time.Microsecond)
		}
		// Widen by a microsecond each side for clocks read at different
		// resolutions.
		found := false
		for now := before - 1; now <= after+1 && !found; now++ {
			req := algorithms.Request{Now: now, Cost: cost, Peek: peek}
			want, err := alg.Decide(m.at(now), req)
			if err != nil || !sameDecision(want.Decision, got) {
				continue
			}
			if want.Next != nil {
				written := bytes.Equal(st, want.Next) && exp == now+want.TTL
				if !written && !(st == nil && read >= now+want.TTL) {
					continue
				}
				m.state, m.expires = bytes.Clone(want.Next), now+want.TTL
			} else if !(bytes.Equal(st, m.state) && (st == nil || exp == m.expires)) && !(st == nil && read >= m.expires) {
				continue // nothing may be written, and what was stays (or has expired)
			}
			found = true
		}
		if !found {
			w0, _ := alg.Decide(m.at(before), algorithms.Request{Now: before, Cost: cost, Peek: peek})
			w1, _ := alg.Decide(m.at(after), algorithms.Request{Now: after, Cost: cost, Peek: peek})
			t.Fatalf("step %d: %v: %s on the server's clock = %+v, leaving %v expiring at %d; no time between µs %d and %d gives that: the Go form says %+v (next %v) at the first and %+v (next %v) at the last, from state %v expiring at %d",
				i, alg, call, got, fields(st), exp, before, after,
				w0.Decision, fields(w0.Next), w1.Decision, fields(w1.Next), fields(m.state), m.expires)
		}
	}
	if err := lims[0].Reset(ctx, id); err != nil {
		t.Fatalf("lim.Reset(%q): %v", id, err)
	}
}

// ask makes one request of lim for id, a peek or an AllowN of cost, and
// returns its decision and how it was called, for messages.
// held is an admitted reservation the differential may give back.
type held struct {
	r    *ratelimit.Reservation
	alg  algorithms.Algorithm
	cost int64
	act  int64 // the time to act its refund names (Request.Act)
}

// newHeld returns r, made with alg for cost, as a held reservation.
func newHeld(r *ratelimit.Reservation, alg algorithms.Algorithm, cost int64) held {
	d := r.Decision()
	act := r.TimeToAct().UnixMicro()
	if len(d.Limits) > 0 {
		// A composite's refund names the earliest of its limits' times
		// to act (see Reservation.Cancel).
		delay := d.Delay
		for _, p := range d.Limits {
			delay = min(delay, p.Delay)
		}
		act -= (d.Delay - delay).Microseconds()
	}
	return held{r: r, alg: alg, cost: cost, act: act}
}

// maxDelay draws a reservation's max delay: small, a fraction of the
// span, several spans, or the longest period.
func (fam family) maxDelay(rng *rand.Rand) time.Duration {
	switch rng.IntN(4) {
	case 0:
		return smallSteps[rng.IntN(len(smallSteps))] + time.Microsecond
	case 1:
		return fam.span * time.Duration(1+rng.IntN(8)) / 7
	case 2:
		return fam.span * time.Duration(2+rng.IntN(4))
	}
	return algorithms.MaxPeriod
}

func ask(ctx context.Context, lim *ratelimit.Limiter, id string, cost int64, peek bool) (ratelimit.Decision, string, error) {
	if peek {
		d, err := lim.Peek(ctx, id)
		return d, fmt.Sprintf("lim.Peek(%q)", id), err
	}
	d, err := lim.AllowN(ctx, id, int(cost))
	return d, fmt.Sprintf("lim.AllowN(%q, %d)", id, cost), err
}

// fields shows state as the little-endian int64 fields the built-in
// algorithms use, for messages.
func fields(state []byte) any {
	if state == nil {
		return "none"
	}
	if len(state)%8 != 0 {
		return state
	}
	v := make([]int64, len(state)/8)
	for i := range v {
		v[i] = int64(binary.LittleEndian.Uint64(state[8*i:]))
	}
	return v
}

// sameDecision reports whether got, a limiter's decision, is the store's
// answer (SourceStore, not shadowed) and, in integers, the Go form's want,
// field by field and limit by limit.
func sameDecision(want algorithms.Decision, got ratelimit.Decision) bool {
	if got.Source != ratelimit.SourceStore || got.Shadowed {
		return false
	}
	return reflect.DeepEqual(want, asAlgorithms(got))
}

// asAlgorithms returns d's figures as an algorithm's Decision, durations
// in microseconds, a composite's limits as its parts: the inverse of what
// a Limiter does with its store's answer.
func asAlgorithms(d ratelimit.Decision) algorithms.Decision {
	a := algorithms.Decision{
		Allowed: d.Allowed, Limit: int64(d.Limit), Remaining: int64(d.Remaining),
		RetryAfter: d.RetryAfter.Microseconds(), ResetAfter: d.ResetAfter.Microseconds(), Delay: d.Delay.Microseconds(),
	}
	if d.Limits != nil {
		a.Parts = make([]algorithms.Decision, len(d.Limits))
		for i, p := range d.Limits {
			a.Parts[i] = algorithms.Decision{
				Allowed: p.Allowed, Limit: int64(p.Limit), Remaining: int64(p.Remaining),
				RetryAfter: p.RetryAfter.Microseconds(), ResetAfter: p.ResetAfter.Microseconds(), Delay: p.Delay.Microseconds(),
			}
		}
	}
	return a
}

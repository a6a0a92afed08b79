package algorithms_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/ratelimitkit/ratelimit/algorithms"
	"github.com/ratelimitkit/ratelimit/algorithms/forms"
)

// factsOf returns alg's facts, failing t when it states none.
func factsOf(t *testing.T, alg algorithms.Algorithm) algorithms.Facts {
	t.Helper()
	s, ok := alg.(algorithms.FactStater)
	if !ok {
		t.Fatalf("%v does not implement FactStater", alg)
	}
	return s.Facts()
}

// factRun decides requests on one key's state in order.
type factRun struct {
	t     *testing.T
	alg   algorithms.Algorithm
	state []byte
}

func (r *factRun) do(req algorithms.Request) algorithms.Decision {
	r.t.Helper()
	st, err := r.alg.Decide(clone(r.state), req)
	if err != nil {
		r.t.Fatalf("%v: Decide(%+v): %v", r.alg, req, err)
	}
	if st.Next != nil {
		r.state = st.Next
	}
	return st.Decision
}

// TestFactsHold checks every built-in's facts against what it does, so
// that a fact is a statement about the algorithm, not a table beside it:
// each fact that holds is shown, and each that does not is shown not to.
// An algorithm added to the registry is held to its facts too.
func TestFactsHold(t *testing.T) {
	const limit, burst = 10, 10
	period := time.Second
	p := period.Microseconds()
	for _, b := range forms.Builtins() {
		t.Run(b.Name, func(t *testing.T) {
			alg := b.New(limit, period, burst)
			f := factsOf(t, alg)
			pol := alg.(algorithms.PolicyStater).Policy()
			if f.Limit != pol.Limit || f.Period != pol.Period || f.Burst != pol.Burst || f.Parts != nil {
				t.Errorf("Facts() = %+v; want the policy's numbers %+v and no parts", f, pol)
			}
			// Start a hundredth into a window.
			t0 := int64(1_800_000_000_000_000)/p*p + p/100
			fresh := func() *factRun { return &factRun{t: t, alg: alg} }

			// Refunds: a refund right after an admission (Act = now)
			// gives its unit back, or nothing at all.
			r := fresh()
			r.do(algorithms.Request{Now: t0, Cost: 3})
			before := r.do(algorithms.Request{Now: t0, Cost: 1, Peek: true}).Remaining
			after := r.do(algorithms.Request{Now: t0, Cost: 3, Refund: true, Act: t0}).Remaining
			if gave := after > before; gave != f.Refunds {
				t.Errorf("Refunds = %v, but a refund at once moved Remaining from %d to %d", f.Refunds, before, after)
			}

			// Window: admissions in one window count together, and an
			// aligned boundary starts afresh; a refund naming the
			// previous window gives nothing back.
			if f.Window > 0 {
				w := f.Window.Microseconds()
				r := fresh()
				end := t0/w*w + w
				r.do(algorithms.Request{Now: end - 2, Cost: 4})
				in := r.do(algorithms.Request{Now: end - 1, Cost: 1, Peek: true}).Remaining
				if in != limit-4 {
					t.Errorf("Window %v: 4 admitted 1µs earlier in the window, Remaining %d; want %d", f.Window, in, limit-4)
				}
				r.do(algorithms.Request{Now: end, Cost: 1})
				back := r.do(algorithms.Request{Now: end, Cost: 4, Refund: true, Act: end - 2})
				got := r.do(algorithms.Request{Now: end, Cost: 1, Peek: true}).Remaining
				if back.Remaining != got {
					t.Errorf("a refund's decision says %d remaining, a peek after it %d", back.Remaining, got)
				}
				if f.WindowBound && got != limit-1 {
					t.Errorf("Window %v, WindowBound: at the window's end %d remaining after 1 admitted and a refund naming the previous window; want %d", f.Window, got, limit-1)
				}
			}

			// WindowBound: an admitted decision's ResetAfter is the time
			// to the end of its window.
			if d := fresh().do(algorithms.Request{Now: t0, Cost: 1}); f.WindowBound != (f.Window > 0 && d.ResetAfter == (t0/p*p+p)-t0) {
				t.Errorf("WindowBound = %v (Window %v), but an admission at %dµs into the window has ResetAfter %dµs", f.WindowBound, f.Window, t0%p, d.ResetAfter)
			}
			// A window-bound algorithm's units are worth nothing after
			// their window: the next window is whole again.
			if f.WindowBound {
				r := fresh()
				r.do(algorithms.Request{Now: t0, Cost: limit})
				if d := r.do(algorithms.Request{Now: t0/p*p + p, Cost: limit, Peek: true}); !d.Allowed {
					t.Errorf("WindowBound: the whole limit spent in one window, the next window denies it: %+v", d)
				}
			}

			// Refills: a drained key gets a unit back after Period/Limit,
			// continuously (not at a window's edge).
			r = fresh()
			r.do(algorithms.Request{Now: t0, Cost: burst})
			refilled := r.do(algorithms.Request{Now: t0 + p/limit, Cost: 1, Peek: true}).Allowed
			if refilled != f.Refills {
				t.Errorf("Refills = %v, but drained at t0, one unit at t0 + Period/Limit is allowed = %v", f.Refills, refilled)
			}

			// Debt: a drained key admits a reservation to be served later.
			r = fresh()
			r.do(algorithms.Request{Now: t0, Cost: burst})
			d := r.do(algorithms.Request{Now: t0, Cost: 1, MaxDelay: p})
			if debt := d.Allowed && d.Delay > 0; debt != f.Debt {
				t.Errorf("Debt = %v, but a reservation on a drained key is %+v", f.Debt, d)
			}

			// Queue: admitted units wait their turn, Period/Limit apart.
			r = fresh()
			r.do(algorithms.Request{Now: t0, Cost: 3})
			d = r.do(algorithms.Request{Now: t0, Cost: 1})
			if queued := d.Delay == 3*p/limit; queued != f.Queue {
				t.Errorf("Queue = %v, but a request behind 3 queued units has Delay %dµs (Period/Limit is %dµs)", f.Queue, d.Delay, p/limit)
			}
		})
	}
}

// TestCompositeFactsAreItsParts: a composite states its parts' facts, in
// order, and the zero Facts for a part that states none.
func TestCompositeFactsAreItsParts(t *testing.T) {
	parts := []algorithms.Algorithm{algorithms.GCRA(10, time.Second, 20), algorithms.FixedWindow(1000, time.Hour), noFacts{algorithms.SlidingLog(5, time.Minute)}}
	f := factsOf(t, algorithms.All(parts...))
	if len(f.Parts) != len(parts) {
		t.Fatalf("All of %d parts states %d parts' facts", len(parts), len(f.Parts))
	}
	for i, p := range parts[:2] {
		if want := factsOf(t, p); fmt.Sprint(f.Parts[i]) != fmt.Sprint(want) {
			t.Errorf("part %d: %+v, want %+v", i, f.Parts[i], want)
		}
	}
	if fmt.Sprint(f.Parts[2]) != fmt.Sprint(algorithms.Facts{}) {
		t.Errorf("a part that states no facts: %+v, want the zero Facts", f.Parts[2])
	}
	if f.Burst != 0 || f.Limit != 10 || f.Refunds || f.Window != 0 {
		t.Errorf("the composite's own facts: %+v; want the first part's numbers, the least burst (0: one part states none), nothing else", f)
	}
}

// noFacts is an algorithm that hides its facts: what a user's algorithm
// without them looks like.
type noFacts struct{ algorithms.Algorithm }

func (noFacts) Name() string { return "hidden" }

func ExampleFactStater() {
	alg := algorithms.FixedWindow(100, time.Minute)
	if s, ok := alg.(algorithms.FactStater); ok {
		f := s.Facts()
		fmt.Printf("refunds %v, window %v, bound to it %v, refills %v\n", f.Refunds, f.Window, f.WindowBound, f.Refills)
	}
	// Output: refunds true, window 1m0s, bound to it true, refills false
}

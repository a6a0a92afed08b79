package conformance

import (
	"context"
	"testing"
	"time"

	"github.com/ratelimitkit/ratelimit"
	"github.com/ratelimitkit/ratelimit/store"
)

// The Reservation group checks Limiter.Reserve and Reservation.Cancel on
// every built-in algorithm (10 a second, burst or limit 10) and both
// paths, with exact expectations on the fake clock:
//
//   - a reservation takes its cost now; with a max delay, the token bucket
//     and GCRA admit what they can serve within it, and say when
//     (Delay, TimeToAct); the other algorithms serve only now (the leaky
//     bucket queues, and says its own delay, whatever the max delay);
//   - Cancel gives the cost back, so a request the reservation had made
//     impossible is admitted (the sliding log gives nothing back);
//   - a second Cancel gives nothing more; a Cancel never leaves more room
//     than a fresh key has; a reservation that was not admitted took
//     nothing and gives nothing;
//   - too late: once a rate algorithm's reservation's time has passed, or a
//     window algorithm's window, Cancel gives nothing back;
//   - later reservations keep their place: a rate algorithm gives back
//     only what no later reservation built on (x/time/rate's rule).
//
// The differential group holds the server forms to the Go forms on random
// sequences of reservations and cancels besides.

// reservesAhead reports whether an algorithm reserves into the future.
func reservesAhead(name string) bool { return name == "gcra" || name == "token_bucket" }

// rateAlgorithm reports whether an algorithm gives back by the time to act
// (the buckets and GCRA), rather than by window.
func rateAlgorithm(name string) bool { return reservesAhead(name) || name == "leaky_bucket" }

func testReservation(t *testing.T, newHarness func(*testing.T) Harness) {
	forEach(t, newHarness, func(t *testing.T, h Harness, s store.Store, a algorithm) {
		ctx := context.Background()
		name := a.alg.Name()
		f := newFixture(t, s, a.alg)
		reserve := func(key string, n int, maxDelay time.Duration) *ratelimit.Reservation {
			t.Helper()
			r, err := f.lim.Reserve(ctx, key, n, maxDelay)
			if err != nil {
				t.Fatalf("lim.Reserve(%q, %d, %v) at %s: %v", key, n, maxDelay, f.at(), err)
			}
			return r
		}
		cancel := func(r *ratelimit.Reservation) {
			t.Helper()
			if err := r.Cancel(ctx); err != nil {
				t.Fatalf("Reservation.Cancel() at %s: %v", f.at(), err)
			}
		}
		remaining := func(key string) int {
			t.Helper()
			d, err := f.lim.Peek(ctx, key)
			if err != nil {
				t.Fatalf("lim.Peek(%q): %v", key, err)
			}
			return d.Remaining
		}
		refunds := name != "sliding_log"

		// Cancel gives back, so a request the reservation made impossible
		// is admitted.
		r := reserve("cancel", a.limit, 0)
		if !r.OK() || r.Decision().Delay != 0 || r.Delay() != 0 {
			t.Fatalf("lim.Reserve(key, %d, 0) on a fresh key = ok %v, delay %v; want ok with no delay", a.limit, r.OK(), r.Decision().Delay)
		}
		if name != "leaky_bucket" { // the leaky bucket queues what follows
			f.expect("cancel", 1, false)
		}
		cancel(r)
		if name == "leaky_bucket" {
			if got := remaining("cancel"); got != a.limit {
				t.Errorf("after Cancel of a reservation of the whole capacity, lim.Peek(key) = remaining %d, want %d (rule: cancel gives back)", got, a.limit)
			}
		} else {
			f.expect("cancel", 1, refunds)
		}

		// A second Cancel gives nothing more, and a Cancel never leaves
		// more room than a fresh key has.
		f.allow("twice", a.limit-2)
		r = reserve("twice", 1, 0)
		cancel(r)
		cancel(r)
		want := 2
		if !refunds {
			want = 1
		}
		if got := remaining("twice"); got != want {
			t.Errorf("after one reservation cancelled twice, lim.Peek(key) = remaining %d, want %d (rule: a reservation gives back once)", got, want)
		}
		r = reserve("fresh", 1, 0)
		cancel(r)
		if want := a.limit - 1 + min(btoi(refunds), 1); remaining("fresh") != want {
			t.Errorf("after Reserve then Cancel on a fresh key, lim.Peek(key) = remaining %d, want %d (rule: a refund never gives more than was taken)", remaining("fresh"), want)
		}

		// A reservation that was not admitted took nothing and gives
		// nothing.
		f.exhaust("notok", a.limit)
		r = reserve("notok", 1, 0)
		if name != "leaky_bucket" {
			if r.OK() || r.Delay() != time.Duration(1<<63-1) || !r.TimeToAct().IsZero() {
				t.Errorf("lim.Reserve(key, 1, 0) on an exhausted key = ok %v, Delay %v; want not ok, the largest Duration", r.OK(), r.Delay())
			}
			cancel(r)
			f.expect("notok", 1, false)
		}

		// Too late: the reservation's time has passed (rate algorithms),
		// or its window has (window algorithms); Cancel gives nothing.
		late := reserve("late", a.limit, 0)
		f.clock.Advance(time.Second + time.Millisecond)
		before := remaining("late")
		f.allow("late", 1)
		cancel(late)
		if got := remaining("late"); got != before-1 {
			t.Errorf("Cancel of a reservation made 1.001s before gave back: lim.Peek(key) = remaining %d, want %d (rule: too late gives nothing back)", got, before-1)
		}

		if !reservesAhead(name) {
			// Serve only now: a max delay changes nothing.
			f.exhaust("ahead", a.limit)
			r := reserve("ahead", 1, time.Hour)
			if name != "leaky_bucket" && r.OK() {
				t.Errorf("lim.Reserve(key, 1, 1h) on an exhausted key = ok with delay %v; want not ok (%s serves only now)", r.Decision().Delay, name)
			}
			return
		}

		// The rate algorithms reserve into the future: 100ms a unit.
		f.exhaust("ahead", a.limit)
		for _, c := range []struct {
			n        int
			maxDelay time.Duration
			ok       bool
			delay    time.Duration
		}{
			{1, 0, false, 0},
			{1, 99 * time.Millisecond, false, 0},
			{1, 100 * time.Millisecond, true, 100 * time.Millisecond},
			{3, time.Second, true, 400 * time.Millisecond},
			{1, 400 * time.Millisecond, false, 0},
		} {
			r := reserve("ahead", c.n, c.maxDelay)
			if r.OK() != c.ok || c.ok && (r.Decision().Delay != c.delay || r.Delay() != c.delay || !r.TimeToAct().Equal(f.clock.Now().Add(c.delay))) {
				t.Errorf("lim.Reserve(key, %d, %v) at %s = ok %v, delay %v; want ok %v, delay %v", c.n, c.maxDelay, f.at(), r.OK(), r.Decision().Delay, c.ok, c.delay)
			}
		}
		f.clock.Advance(150 * time.Millisecond)
		r = reserve("ahead", 1, time.Second)
		if want := 350 * time.Millisecond; r.Delay() != want {
			t.Errorf("lim.Reserve(key, 1, 1s) 150ms later: Delay() = %v, want %v", r.Delay(), want)
		}

		// Later reservations keep their place: cancelling A (3 units)
		// after B (1 unit) was reserved behind it gives back 2 units.
		f.exhaust("later", a.limit)
		ra := reserve("later", 3, time.Second) // acts at +300ms
		reserve("later", 1, time.Second)       // acts at +400ms
		cancel(ra)
		r = reserve("later", 2, time.Second)
		if want := 400 * time.Millisecond; !r.OK() || r.Decision().Delay != want {
			t.Errorf("after a reservation cancelled with one behind it, lim.Reserve(key, 2, 1s) = ok %v, delay %v; want ok, %v (rule: what later reservations built on stays taken)", r.OK(), r.Decision().Delay, want)
		}
	})
}

func btoi(b bool) int {
	if b {
		return 1
	}
	return 0
}

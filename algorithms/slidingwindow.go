package algorithms

import (
	"fmt"
	"time"
)

// SlidingWindow is the sliding window counter: it keeps the count of the
// current and the previous fixed window and estimates the cost admitted in
// the last period as
//
//	floor(previous × (period − elapsed) / period) + current
//
// where elapsed is the time since the current window began. It costs three
// integers per key and smooths the fixed window's boundary burst, but it is
// an approximation: it assumes the previous window's requests were spread
// evenly, so it can admit somewhat more or less than a sliding log would.
func SlidingWindow(limit int64, period time.Duration) Algorithm {
	a := &slidingWindow{limit: limit, period: micros(period)}
	a.err = checkCount("sliding window", "limit", limit)
	if a.err == nil {
		a.err = checkPeriod("sliding window", period)
	}
	a.args = a.serverArgs()
	return a
}

type slidingWindow struct {
	limit, period int64
	args          []int64
	err           error
}

func (a *slidingWindow) Name() string        { return "sliding_window" }
func (a *slidingWindow) Validate() error     { return a.err }
func (a *slidingWindow) MaxCost() int64      { return a.limit }
func (a *slidingWindow) ServerArgs() []int64 { return a.args }
func (a *slidingWindow) String() string {
	return fmt.Sprintf("SlidingWindow(limit=%d, period=%v)", a.limit, time.Duration(a.period)*time.Microsecond)
}

// serverArgs lists the parameters the server-side forms receive, in order.
func (a *slidingWindow) serverArgs() []int64 { return []int64{a.limit, a.period} }

// slidingWindowState is the sliding window's stored state, field by field.
type slidingWindowState struct {
	start int64 // the current window's start, µs
	curr  int64 // the cost admitted in the current window
	prev  int64 // the cost admitted in the previous window
}

// weighted is the previous window's contribution after elapsed of the
// current one: prev × (period − elapsed), then ÷ period, then floor, in
// doubles.
func (a *slidingWindow) weighted(prev, elapsed int64) int64 {
	return mulDivFloor(prev, a.period-elapsed, a.period)
}

// wait is the smallest time e ≥ from, within a window, at which
// weighted(prev, e) ≤ room. It returns period when no such e exists before
// the window ends.
func (a *slidingWindow) wait(prev, room, from int64) int64 {
	if room < 0 {
		return a.period
	}
	// weighted(prev, e) ≤ room ⇔ e > period − (room+1)·period/prev. Start
	// from that estimate and step to the exact boundary of the formula.
	// When prev ≤ room the answer is from; testing that first keeps the
	// quotient at most period.
	e := from
	if prev > room {
		e = max(from, a.period-mulDivFloor(room+1, a.period, prev))
	}
	for e > from && a.weighted(prev, e-1) <= room {
		e--
	}
	for e < a.period && a.weighted(prev, e) > room {
		e++
	}
	return e
}

// Decide implements Algorithm. State: [current window start, current count,
// previous count].
func (a *slidingWindow) Decide(state []byte, req Request) (Step, error) {
	return decideBy(a, state, req)
}

// DecideTo implements forms.ToDecider.
func (a *slidingWindow) DecideTo(state []byte, req Request) (next []byte, ttl int64, allowed bool, limit, remaining, retryAfter, resetAfter, delay int64, err error) {
	var s slidingWindowState
	if state != nil {
		var f [3]int64
		if err := decodeFields(state, f[:]); err != nil {
			return nil, 0, false, 0, 0, 0, 0, 0, err
		}
		s = slidingWindowState{start: f[0], curr: f[1], prev: f[2]}
	}
	var r Decision
	ttl0 := a.decide(&s, state != nil, req, &r)
	next, ttl = encodeState(state, ttl0, s.start, s.curr, s.prev)
	return next, ttl, r.Allowed, r.Limit, r.Remaining, r.RetryAfter, r.ResetAfter, r.Delay, nil
}

// decide is the sliding window's transition, in the subset the server-side
// forms are generated from (internal/formgen). Windows follow each other
// every period from the first window's start, which is aligned to a
// multiple of period.
func (a *slidingWindow) decide(s *slidingWindowState, live bool, req Request, d *Decision) int64 {
	if !live || req.Now >= s.start+2*a.period {
		// No state, or older than the previous window.
		s.start, s.curr, s.prev = req.Now/a.period*a.period, 0, 0
	} else if req.Now >= s.start+a.period {
		// The stored window is the previous one. Otherwise it is the
		// current one (or ahead of our clock).
		s.start, s.curr, s.prev = s.start+a.period, 0, s.curr
	}
	elapsed := max(req.Now-s.start, 0)
	weighted := a.weighted(s.prev, elapsed)
	*d = Decision{Limit: a.limit}
	if req.Refund {
		// Only a reservation made in the current window gives back.
		give := int64(0)
		if live && req.Act >= s.start && req.Act < s.start+a.period {
			give = min(req.Cost, s.curr)
		}
		s.curr -= give
		d.Allowed = true
		d.Remaining = max(a.limit-weighted-s.curr, 0)
		if s.curr > 0 {
			d.ResetAfter = s.start + 2*a.period - req.Now
		} else if s.prev > 0 {
			d.ResetAfter = s.start + a.period - req.Now
		}
		if give == 0 {
			return 0
		}
		return s.start + 2*a.period - req.Now
	}
	d.Allowed = weighted+s.curr+req.Cost <= a.limit
	if d.Allowed && !req.Peek {
		s.curr += req.Cost
	}
	d.Remaining = max(a.limit-weighted-s.curr, 0)
	if s.curr > 0 {
		d.ResetAfter = s.start + 2*a.period - req.Now
	} else if s.prev > 0 {
		d.ResetAfter = s.start + a.period - req.Now
	}
	if !d.Allowed {
		// First try later in this window, as prev decays; failing that,
		// in the next window, where this window's count becomes prev.
		e := a.wait(s.prev, a.limit-s.curr-req.Cost, elapsed)
		if e < a.period {
			d.RetryAfter = e - elapsed
		} else {
			next := a.wait(s.curr, a.limit-req.Cost, 0)
			d.RetryAfter = a.period - elapsed + next
		}
		return 0
	}
	if req.Peek {
		return 0
	}
	return s.start + 2*a.period - req.Now
}

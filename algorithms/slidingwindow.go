package algorithms

import (
	"fmt"
	"math"
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
	a.args = []int64{a.limit, a.period}
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

// weighted is the previous window's contribution after elapsed of the
// current one. The server-side forms compute the same expression in the
// same order in doubles: prev × (period − elapsed), then ÷ period, then floor.
func (a *slidingWindow) weighted(prev, elapsed int64) int64 {
	return int64(math.Floor(float64(prev) * float64(a.period-elapsed) / float64(a.period)))
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
	// quotient at most period, well inside an int64.
	e := from
	if prev > room {
		est := a.period - int64(math.Floor(float64(room+1)*float64(a.period)/float64(prev)))
		e = max(from, est)
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
// previous count]. Windows follow each other every period from the first
// window's start, which is aligned to a multiple of period.
func (a *slidingWindow) Decide(state []byte, req Request) (Step, error) {
	var f [3]int64
	start, curr, prev := req.Now-req.Now%a.period, int64(0), int64(0)
	if state != nil {
		if err := decodeFields(state, f[:]); err != nil {
			return Step{}, err
		}
		switch k := (req.Now - f[0]) / a.period; {
		case req.Now < f[0]+a.period: // current (or ahead of our clock)
			start, curr, prev = f[0], f[1], f[2]
		case k == 1: // the stored window is the previous one
			start, curr, prev = f[0]+a.period, 0, f[1]
		}
	}
	elapsed := max(req.Now-start, 0)
	weighted := a.weighted(prev, elapsed)
	d := Decision{Limit: a.limit}
	d.Allowed = weighted+curr+req.Cost <= a.limit
	if d.Allowed && !req.Peek {
		curr += req.Cost
	}
	d.Remaining = nonNeg(a.limit - weighted - curr)
	switch {
	case curr > 0:
		d.ResetAfter = start + 2*a.period - req.Now
	case prev > 0:
		d.ResetAfter = start + a.period - req.Now
	}
	if !d.Allowed {
		// First try later in this window, as prev decays; failing that,
		// in the next window, where this window's count becomes prev.
		if e := a.wait(prev, a.limit-curr-req.Cost, elapsed); e < a.period {
			d.RetryAfter = e - elapsed
		} else {
			d.RetryAfter = a.period - elapsed + a.wait(curr, a.limit-req.Cost, 0)
		}
		return Step{Decision: d}, nil
	}
	if req.Peek {
		return Step{Decision: d}, nil
	}
	return Step{Decision: d, Next: encodeFields(state, start, curr, prev), TTL: start + 2*a.period - req.Now}, nil
}

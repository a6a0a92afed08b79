package algorithms

import (
	"fmt"
	"time"
)

// FixedWindow admits at most limit units of cost per window of length
// period. Windows are aligned to multiples of period since the Unix epoch,
// so every key's window starts at the same instants.
//
// It is the cheapest algorithm (two integers per key) but allows the
// boundary burst: limit requests at the end of one window and limit more at
// the start of the next, twice the limit inside a short interval.
func FixedWindow(limit int64, period time.Duration) Algorithm {
	a := &fixedWindow{limit: limit, period: micros(period)}
	a.err = checkCount("fixed window", "limit", limit)
	if a.err == nil {
		a.err = checkPeriod("fixed window", period)
	}
	a.args = a.serverArgs()
	return a
}

type fixedWindow struct {
	limit, period int64
	args          []int64
	err           error
}

func (a *fixedWindow) Name() string        { return "fixed_window" }
func (a *fixedWindow) Validate() error     { return a.err }
func (a *fixedWindow) MaxCost() int64      { return a.limit }
func (a *fixedWindow) ServerArgs() []int64 { return a.args }
func (a *fixedWindow) String() string {
	return fmt.Sprintf("FixedWindow(limit=%d, period=%v)", a.limit, time.Duration(a.period)*time.Microsecond)
}

// serverArgs lists the parameters the server-side forms receive, in order.
func (a *fixedWindow) serverArgs() []int64 { return []int64{a.limit, a.period} }

// fixedWindowState is the fixed window's stored state, field by field.
type fixedWindowState struct {
	start int64 // the window's start, µs
	count int64 // the cost admitted in it
}

// Decide implements Algorithm. State: [window start, count].
func (a *fixedWindow) Decide(state []byte, req Request) (Step, error) {
	return decideBy(a, state, req)
}

// DecideTo implements forms.ToDecider.
func (a *fixedWindow) DecideTo(state []byte, req Request) (next []byte, ttl int64, allowed bool, limit, remaining, retryAfter, resetAfter, delay int64, err error) {
	var s fixedWindowState
	if state != nil {
		var f [2]int64
		if err := decodeFields(state, f[:]); err != nil {
			return nil, 0, false, 0, 0, 0, 0, 0, err
		}
		s = fixedWindowState{start: f[0], count: f[1]}
	}
	var r Decision
	ttl0 := a.decide(&s, state != nil, req, &r)
	next, ttl = encodeState(state, ttl0, s.start, s.count)
	return next, ttl, r.Allowed, r.Limit, r.Remaining, r.RetryAfter, r.ResetAfter, r.Delay, nil
}

// decide is the fixed window's transition, in the subset the server-side
// forms are generated from (internal/formgen).
//
// The stored window is current while now < start+period (also when start
// lies ahead of now, as it does when clocks disagree: counting into it is
// the conservative choice). Otherwise a new window aligned to period starts
// with a count of zero.
func (a *fixedWindow) decide(s *fixedWindowState, live bool, req Request, d *Decision) int64 {
	if !live || req.Now >= s.start+a.period {
		s.start, s.count = req.Now/a.period*a.period, 0
	}
	end := s.start + a.period
	*d = Decision{Limit: a.limit, ResetAfter: end - req.Now}
	if req.Refund {
		// Only a reservation made in the current window gives back.
		give := int64(0)
		if live && req.Act >= s.start && req.Act < end {
			give = min(req.Cost, s.count)
		}
		s.count -= give
		d.Allowed = true
		d.Remaining = max(a.limit-s.count, 0)
		if s.count == 0 {
			d.ResetAfter = 0
		}
		if give == 0 {
			return 0
		}
		return end - req.Now
	}
	if s.count == 0 {
		d.ResetAfter = 0
	}
	d.Allowed = s.count+req.Cost <= a.limit
	if !d.Allowed {
		d.Remaining = max(a.limit-s.count, 0)
		d.RetryAfter = end - req.Now
		return 0
	}
	if req.Peek {
		d.Remaining = max(a.limit-s.count, 0)
		return 0
	}
	s.count += req.Cost
	d.Remaining = a.limit - s.count
	d.ResetAfter = end - req.Now
	return end - req.Now
}

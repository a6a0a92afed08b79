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
	a.args = []int64{a.limit, a.period}
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

// Decide implements Algorithm. State: [window start, count].
//
// The stored window is current while now < start+period (also when start
// lies ahead of now, as it does when clocks disagree: counting into it is
// the conservative choice). Otherwise a new window aligned to period starts
// with a count of zero.
func (a *fixedWindow) Decide(state []byte, req Request) (Step, error) {
	var f [2]int64
	start, count := int64(0), int64(0)
	fresh := true
	if state != nil {
		if err := decodeFields(state, f[:]); err != nil {
			return Step{}, err
		}
		start, count = f[0], f[1]
		fresh = req.Now >= start+a.period
	}
	if fresh {
		start, count = req.Now-req.Now%a.period, 0
	}
	end := start + a.period
	d := Decision{Limit: a.limit, ResetAfter: end - req.Now}
	if count == 0 {
		d.ResetAfter = 0
	}
	d.Allowed = count+req.Cost <= a.limit
	if !d.Allowed {
		d.Remaining = nonNeg(a.limit - count)
		d.RetryAfter = end - req.Now
		return Step{Decision: d}, nil
	}
	if req.Peek {
		d.Remaining = nonNeg(a.limit - count)
		return Step{Decision: d}, nil
	}
	count += req.Cost
	d.Remaining = a.limit - count
	d.ResetAfter = end - req.Now
	return Step{Decision: d, Next: encodeFields(state, start, count), TTL: end - req.Now}, nil
}

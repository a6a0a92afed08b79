package algorithms

import (
	"encoding/binary"
	"fmt"
	"time"
)

// SlidingLog admits a request when the cost of all requests admitted in the
// last period, plus its own, is at most limit. It keeps one log entry per
// admitted request (its time and cost), so it is exact (no boundary burst)
// but its state grows with the limit: up to limit entries of 16 bytes each.
//
// Two requests admitted in the same microsecond are two entries: the log
// never merges entries by time.
func SlidingLog(limit int64, period time.Duration) Algorithm {
	a := &slidingLog{limit: limit, period: micros(period)}
	a.err = checkCount("sliding log", "limit", limit)
	if a.err == nil {
		a.err = checkPeriod("sliding log", period)
	}
	a.args = []int64{a.limit, a.period}
	return a
}

type slidingLog struct {
	limit, period int64
	args          []int64
	err           error
}

func (a *slidingLog) Name() string        { return "sliding_log" }
func (a *slidingLog) Validate() error     { return a.err }
func (a *slidingLog) MaxCost() int64      { return a.limit }
func (a *slidingLog) ServerArgs() []int64 { return a.args }
func (a *slidingLog) String() string {
	return fmt.Sprintf("SlidingLog(limit=%d, period=%v)", a.limit, time.Duration(a.period)*time.Microsecond)
}

const logEntrySize = 16

func logEntry(state []byte, i int) (at, cost int64) {
	e := state[i*logEntrySize:]
	return int64(binary.LittleEndian.Uint64(e)), int64(binary.LittleEndian.Uint64(e[8:]))
}

// Decide implements Algorithm. State: a list of (time, cost) entries sorted
// by time. An entry counts while now < time+period; entries timed after now
// (clocks that disagree) count too.
func (a *slidingLog) Decide(state []byte, req Request) (Step, error) {
	if len(state)%logEntrySize != 0 {
		return Step{}, fmt.Errorf("%w: sliding log of %d bytes", ErrCorruptState, len(state))
	}
	n := len(state) / logEntrySize
	// Skip expired entries: they are the oldest, at the front.
	first := 0
	for first < n {
		at, _ := logEntry(state, first)
		if req.Now < at+a.period {
			break
		}
		first++
	}
	used := int64(0)
	newest := int64(-1)
	for i := first; i < n; i++ {
		at, cost := logEntry(state, i)
		if cost <= 0 || cost > MaxExact || at > MaxExact || used > MaxExact {
			return Step{}, fmt.Errorf("%w: sliding log entry (%d, %d)", ErrCorruptState, at, cost)
		}
		used += cost
		newest = at
	}
	d := Decision{Limit: a.limit}
	if newest >= 0 {
		d.ResetAfter = newest + a.period - req.Now
	}
	d.Allowed = used+req.Cost <= a.limit
	if !d.Allowed {
		d.Remaining = nonNeg(a.limit - used)
		// Wait until enough of the oldest entries have left the window.
		excess := used + req.Cost - a.limit
		for i := first; i < n; i++ {
			at, cost := logEntry(state, i)
			excess -= cost
			if excess <= 0 {
				d.RetryAfter = at + a.period - req.Now
				break
			}
		}
		return Step{Decision: d}, nil
	}
	if req.Peek {
		d.Remaining = nonNeg(a.limit - used)
		return Step{Decision: d}, nil
	}
	d.Remaining = nonNeg(a.limit - used - req.Cost)
	// The new log: the live entries plus this request, kept sorted by time.
	live := state[first*logEntrySize:]
	next := make([]byte, 0, len(live)+logEntrySize)
	pos := len(live)
	for pos > 0 {
		at, _ := logEntry(live, pos/logEntrySize-1)
		if at <= req.Now {
			break
		}
		pos -= logEntrySize
	}
	next = append(next, live[:pos]...)
	next = binary.LittleEndian.AppendUint64(next, uint64(req.Now))
	next = binary.LittleEndian.AppendUint64(next, uint64(req.Cost))
	next = append(next, live[pos:]...)
	newest = max(newest, req.Now)
	d.ResetAfter = newest + a.period - req.Now
	return Step{Decision: d, Next: next, TTL: d.ResetAfter}, nil
}

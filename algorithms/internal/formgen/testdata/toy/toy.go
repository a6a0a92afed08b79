// Package toy is the translator's golden test input: a small algorithm
// package that uses every construct of the subset. It is never built into
// anything.
package toy

// The declarations the translator expects of an algorithms package.

type Request struct {
	Now, Cost int64
	Peek      bool
}

type Decision struct {
	Allowed                                         bool
	Limit, Remaining, RetryAfter, ResetAfter, Delay int64
}

func ceilDiv(a, b int64) int64        { return (a + b - 1) / b }
func mulDivFloor(a, b, c int64) int64 { return a * b / c }
func divMulFloor(a, b, c int64) int64 { return a / b * c }

// counter is a toy algorithm.
type counter struct{ limit, period, spare int64 }

func (a *counter) Name() string        { return "counter" }
func (a *counter) serverArgs() []int64 { return []int64{a.limit, a.period} }

type counterState struct{ start, used, seen int64 }

func (s *counterState) valid() bool { return s.used <= s.seen || s.seen == 0 }

// half is an expression helper.
func (a *counter) half(x int64) int64 { return x / 2 }

// clamp is a statement helper with early returns.
func (a *counter) clamp(x, lo int64) int64 {
	if x < lo {
		return lo
	}
	if x > a.limit {
		return a.limit
	}
	y := x
	y -= a.half(y) % 3
	return max(y, lo)
}

// search is a helper with a loop.
func (a *counter) search(from int64) int64 {
	e := from
	for e < a.period && mulDivFloor(e, a.limit, a.period) < a.limit {
		e++
	}
	return e
}

func (a *counter) decide(s *counterState, live bool, req Request, d *Decision) int64 {
	start, used, seen := req.Now-req.Now%a.period, int64(0), int64(0)
	if live {
		seen = s.seen
	}
	if live && req.Now < s.start+a.period {
		start, used = s.start, s.used
	} else if live {
		used = divMulFloor(s.used, 3, 2)
	} else {
		used = 0
	}
	*d = Decision{Limit: a.limit, Delay: -1}
	d.Delay = 0
	room := a.clamp(a.limit-used, 0)
	d.Allowed = req.Cost <= room && !(req.Peek && used > 0)
	if !d.Allowed {
		wait := a.search(req.Now - start)
		d.RetryAfter = ceilDiv(wait, 7)
		return 0
	}
	d.Remaining = room - req.Cost
	used += req.Cost
	used *= 1
	used++
	used--
	s.start, s.used, s.seen = start, used, seen+1
	return start + a.period - req.Now
}

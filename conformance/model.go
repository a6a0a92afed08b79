package conformance

import (
	"fmt"
	"time"

	"github.com/ratelimitkit/ratelimit/algorithms"
	"github.com/ratelimitkit/ratelimit/algorithms/forms"
)

// Model is an algorithm's promise, as Check holds a limiter to it: not how
// the algorithm decides, but the bounds any of its decisions must keep.
// Times are microseconds since the Unix epoch on the store's clock, with
// from ≤ to, and the bounds apply to one key from its first request (or
// its last Reset) on.
//
// Most bounds over-admission: the cost admitted to act at times within
// [from, to], both ends included, never exceeds Most(from, to) (a token
// bucket: burst + limit × (to − from) / period; a fixed window: limit per
// window the span touches).
//
// Least bounds under-admission: a request of cost n at time at, made when
// every request before it acts at or before at, must be admitted when, for
// every span [from, to] that contains at, the cost admitted within it plus
// n is at most Least(from, to). Least(from, to) ≤ Most(from, to); the two
// are equal for an algorithm that admits exactly what its promise allows
// (the token bucket, the fixed window, the sliding log), and Least is
// smaller where the algorithm documents a slack (the sliding window's
// estimate of the previous window).
//
// A model for a user's algorithm is passed in CheckAlgorithm; ModelOf
// returns the built-ins' and their composites'.
type Model interface {
	Most(from, to int64) int64
	Least(from, to int64) int64
}

// ModelOf returns the model of a built-in algorithm or of a composite
// (algorithms.All) of built-ins, from docs/algorithms.md's promises, and
// false for any other algorithm. A composite's model is its parts': what
// it admits keeps every part's Most, and it must admit what fits every
// part's Least.
func ModelOf(alg algorithms.Algorithm) (Model, bool) {
	if c, ok := alg.(algorithms.Composite); ok {
		var m composite
		for _, p := range c.Parts() {
			pm, ok := ModelOf(p)
			if !ok {
				return nil, false
			}
			m = append(m, pm)
		}
		return m, true
	}
	b := forms.BuiltinOf(alg)
	ps, ok := alg.(algorithms.PolicyStater)
	if b == nil || !ok {
		return nil, false
	}
	p := ps.Policy()
	base := builtinModel{name: b.Name, limit: p.Limit, period: int64(p.Period / time.Microsecond), burst: p.Burst}
	switch b.Name {
	case "fixed_window":
		base.kind = kindFixed
	case "sliding_log":
		base.kind = kindLog
	case "sliding_window":
		base.kind = kindSliding
	case "token_bucket", "gcra":
		base.kind, base.reservesAhead = kindBucket, true
	case "leaky_bucket":
		// The leaky bucket admits as the token bucket does and spaces the
		// admitted requests by their Delay: its promise is on the times
		// it admits at (decisionTimed), not the times they act at.
		base.kind, base.decisionTimed = kindBucket, true
	default:
		return nil, false
	}
	return base, true
}

type modelKind int

const (
	kindBucket modelKind = iota
	kindFixed
	kindLog
	kindSliding
)

// builtinModel is a built-in algorithm's promise.
type builtinModel struct {
	name                 string
	kind                 modelKind
	limit, period, burst int64 // period in µs
	// reservesAhead: Reserve books into the future, up to its maxDelay
	// (docs/reservations.md: the token bucket and GCRA, as x/time/rate).
	reservesAhead bool
	// decisionTimed: the bounds apply to the times requests are admitted
	// at, not those they act at.
	decisionTimed bool
}

func (m builtinModel) String() string {
	return fmt.Sprintf("%s(%d per %v, burst %d)", m.name, m.limit, time.Duration(m.period)*time.Microsecond, m.burst)
}

// windows is how many aligned windows of m's period [from, to] touches.
func (m builtinModel) windows(from, to int64) int64 { return to/m.period - from/m.period + 1 }

func (m builtinModel) Most(from, to int64) int64 {
	switch m.kind {
	case kindBucket:
		// A full bucket, and its refill over the span (exact: limit per
		// period, held as a fraction).
		return m.burst + mulDiv(m.limit, to-from, m.period)
	case kindLog:
		// Any span shorter than a period holds at most the limit.
		return m.limit * ((to - from + m.period) / m.period)
	default:
		// The fixed window resets at each boundary; the sliding window's
		// current count never exceeds the limit either.
		return m.limit * m.windows(from, to)
	}
}

func (m builtinModel) Least(from, to int64) int64 {
	if m.kind == kindSliding {
		// The estimate counts at most the whole previous window: what fits
		// the limit over two windows is admitted.
		return m.limit * ((m.windows(from, to) + 1) / 2)
	}
	return m.Most(from, to)
}

// interval is the time one unit takes to come back, in µs.
func (m builtinModel) interval() int64 { return max(m.period/max(m.limit, 1), 1) }

// mulDiv is a × b / c rounded down, without overflow for the suite's
// numbers (a ≤ 2^20, b up to a few hours in µs).
func mulDiv(a, b, c int64) int64 {
	hi, lo := b/c, b%c
	return a*hi + a*lo/c
}

// composite is a composite's model: its parts'.
type composite []Model

func (c composite) Most(from, to int64) int64 {
	most := int64(-1)
	for _, m := range c {
		if v := m.Most(from, to); most < 0 || v < most {
			most = v
		}
	}
	return most
}

func (c composite) Least(from, to int64) int64 {
	least := int64(-1)
	for _, m := range c {
		if v := m.Least(from, to); least < 0 || v < least {
			least = v
		}
	}
	return least
}

// parts returns the models a promise is checked against one by one.
func parts(m Model) []Model {
	if c, ok := m.(composite); ok {
		var out []Model
		for _, p := range c {
			out = append(out, parts(p)...)
		}
		return out
	}
	return []Model{m}
}

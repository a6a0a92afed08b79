package algorithms

import (
	"fmt"
	"time"
)

// Divisible is implemented by algorithms that can give one replica's share
// of their limit when n replicas enforce it without sharing state. A
// limiter's local fallback (ratelimit.WithFallback) uses it; the built-in
// algorithms divide without implementing it (see Divide).
type Divisible interface {
	Algorithm
	// Divide returns the same algorithm with its numbers divided by n
	// (n ≥ 1). It must not return nil.
	Divide(n int64) Algorithm
}

// Divide returns alg with its numbers divided by n, for one of n replicas
// that each decide alone: the limit (and the burst or capacity of a bucket)
// divided by n, rounded down but never below 1, and the period unchanged.
// Together the n shares admit at most the whole limit, except where
// rounding up to 1 gives more (n replicas each admit at least one unit of
// cost per period). It is an approximation by nature: traffic spread
// unevenly over the replicas sees a smaller limit than the whole.
//
// n = 1 returns alg itself. An algorithm that is neither built in nor
// Divisible is an error wrapping ErrInvalidParams, as is n < 1.
func Divide(alg Algorithm, n int64) (Algorithm, error) {
	if n < 1 {
		return nil, fmt.Errorf("%w: cannot divide a limit by %d replicas", ErrInvalidParams, n)
	}
	if n == 1 {
		return alg, nil
	}
	var d Algorithm
	p, numbers := alg.(numbered)
	switch b := builtinOf(alg); {
	case numbers && b != nil:
		limit, period, burst := p.numbers()
		share := func(v int64) int64 { return max(v/n, 1) }
		d = b.New(share(limit), time.Duration(period)*time.Microsecond, share(burst)).(Algorithm)
	default:
		a, ok := alg.(Divisible)
		if !ok {
			return nil, fmt.Errorf("%w: algorithm %s cannot be divided between replicas: implement algorithms.Divisible", ErrInvalidParams, alg.Name())
		}
		d = a.Divide(n)
	}
	if d == nil {
		return nil, fmt.Errorf("%w: %s.Divide(%d) returned nil", ErrInvalidParams, alg.Name(), n)
	}
	if err := d.Validate(); err != nil {
		return nil, err
	}
	return d, nil
}

// numbered is implemented by the built-in algorithms: their numbers as
// given to their constructor (the period in microseconds; 0 for the burst
// of the window algorithms, which have none), for Builtin.New.
type numbered interface {
	numbers() (limit, period, burst int64)
}

func (r rate) numbers() (limit, period, burst int64)           { return r.limit, r.period, r.burst }
func (a *fixedWindow) numbers() (limit, period, burst int64)   { return a.limit, a.period, 0 }
func (a *slidingLog) numbers() (limit, period, burst int64)    { return a.limit, a.period, 0 }
func (a *slidingWindow) numbers() (limit, period, burst int64) { return a.limit, a.period, 0 }

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
	share := func(v int64) int64 { return max(v/n, 1) }
	period := func(p int64) time.Duration { return time.Duration(p) * time.Microsecond }
	var d Algorithm
	switch a := alg.(type) {
	case Divisible:
		d = a.Divide(n)
	case *fixedWindow:
		d = FixedWindow(share(a.limit), period(a.period))
	case *slidingLog:
		d = SlidingLog(share(a.limit), period(a.period))
	case *slidingWindow:
		d = SlidingWindow(share(a.limit), period(a.period))
	case *tokenBucket:
		d = TokenBucket(share(a.limit), period(a.period), share(a.burst))
	case *leakyBucket:
		d = LeakyBucket(share(a.limit), period(a.period), share(a.burst))
	case *gcra:
		d = GCRA(share(a.limit), period(a.period), share(a.burst))
	default:
		return nil, fmt.Errorf("%w: algorithm %s cannot be divided between replicas: implement algorithms.Divisible", ErrInvalidParams, alg.Name())
	}
	if d == nil {
		return nil, fmt.Errorf("%w: %s.Divide(%d) returned nil", ErrInvalidParams, alg.Name(), n)
	}
	if err := d.Validate(); err != nil {
		return nil, err
	}
	return d, nil
}

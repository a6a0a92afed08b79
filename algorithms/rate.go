package algorithms

import (
	"fmt"
	"math"
	"time"
)

// rate is the exact integer form of "limit per period" shared by the
// token bucket, the leaky bucket and GCRA.
//
// One unit of cost is worth unit fixed-point units, and drip units flow per
// microsecond, where unit = period/g and drip = limit/g for
// g = gcd(period, limit). The interval between two units of cost is then
// exactly unit/drip microseconds with no rounding, whatever the limit and
// period. A bucket of burst units of cost holds capacity = burst × unit.
type rate struct {
	limit, period, burst int64 // as given; period in microseconds
	unit, drip, capacity int64
	fill                 int64 // microseconds to drip a whole capacity
}

func newRate(name, burstWord string, limit int64, period time.Duration, burst int64) (rate, error) {
	r := rate{limit: limit, period: micros(period), burst: burst}
	if err := checkCount(name, "limit", limit); err != nil {
		return r, err
	}
	if err := checkPeriod(name, period); err != nil {
		return r, err
	}
	if err := checkCount(name, burstWord, burst); err != nil {
		return r, err
	}
	g := gcd(r.period, limit)
	r.unit, r.drip = r.period/g, limit/g
	if r.unit > MaxExact/4/burst {
		return r, fmt.Errorf("%w: %s of %d per %v with %s %d needs integers above 2^53; lower the %s or use a shorter period",
			ErrInvalidParams, name, limit, period, burstWord, burst, burstWord)
	}
	r.capacity = burst * r.unit
	r.fill = ceilDiv(r.capacity, r.drip)
	return r, nil
}

func (r rate) String() string {
	return fmt.Sprintf("limit=%d, period=%v, burst=%d", r.limit, time.Duration(r.period)*time.Microsecond, r.burst)
}

// args are the parameters every server-side form of a rate algorithm
// receives: unit, drip, capacity, fill, burst.
func (r rate) args() []int64 { return []int64{r.unit, r.drip, r.capacity, r.fill, r.burst} }

// drain returns level after elapsed microseconds of dripping, never below
// zero. A negative elapsed (a clock behind the one that stored the state)
// drains nothing.
func (r rate) drain(level, elapsed int64) int64 {
	if elapsed <= 0 {
		return level
	}
	if elapsed >= r.fill {
		return 0
	}
	return max(level-elapsed*r.drip, 0)
}

// rescale converts a level measured in another unit (after the limit or
// period changed) into this rate's unit, capped at the capacity. The
// server-side forms compute the same doubles in the same order.
func (r rate) rescale(level, fromUnit int64) int64 {
	if fromUnit == r.unit {
		return min(level, r.capacity)
	}
	scaled := math.Floor(float64(level) / float64(fromUnit) * float64(r.unit))
	if scaled >= float64(r.capacity) {
		return r.capacity
	}
	return int64(scaled)
}

// TokenBucket holds up to burst tokens and refills limit tokens per period,
// continuously. A request takes cost tokens and is admitted when the bucket
// holds that many; a full bucket admits burst requests at once. The refill
// is exact: limit and period need not divide evenly.
//
// It makes the same decisions as GCRA with the same numbers (they are two
// bookkeepings of one policy); it stores a token level and a time where
// GCRA stores one time.
func TokenBucket(limit int64, period time.Duration, burst int64) Algorithm {
	r, err := newRate("token bucket", "burst", limit, period, burst)
	return &tokenBucket{rate: r, err: err, argv: r.args()}
}

type tokenBucket struct {
	rate
	err  error
	argv []int64
}

func (a *tokenBucket) Name() string        { return "token_bucket" }
func (a *tokenBucket) Validate() error     { return a.err }
func (a *tokenBucket) MaxCost() int64      { return a.burst }
func (a *tokenBucket) ServerArgs() []int64 { return a.argv }
func (a *tokenBucket) String() string      { return "TokenBucket(" + a.rate.String() + ")" }

// Decide implements Algorithm. State: [missing units, last update, unit].
// The bucket's deficit (capacity − tokens) is stored rather than its level,
// so that an empty state and a full bucket coincide.
func (a *tokenBucket) Decide(state []byte, req Request) (Step, error) {
	var f [3]int64
	deficit, last := int64(0), req.Now
	if state != nil {
		if err := decodeFields(state, f[:]); err != nil {
			return Step{}, err
		}
		if f[2] <= 0 {
			return Step{}, fmt.Errorf("%w: token bucket unit %d", ErrCorruptState, f[2])
		}
		deficit = a.rescale(f[0], f[2])
		last = max(f[1], req.Now)
		deficit = a.drain(deficit, req.Now-f[1])
	}
	need := req.Cost * a.unit
	d := Decision{Limit: a.burst}
	d.Allowed = deficit+need <= a.capacity
	if d.Allowed && !req.Peek {
		deficit += need
	}
	d.Remaining = (a.capacity - deficit) / a.unit
	d.ResetAfter = ceilDiv(deficit, a.drip)
	if !d.Allowed {
		d.RetryAfter = ceilDiv(deficit+need-a.capacity, a.drip)
		return Step{Decision: d}, nil
	}
	if req.Peek {
		return Step{Decision: d}, nil
	}
	return Step{Decision: d, Next: encodeFields(state, deficit, last, a.unit), TTL: d.ResetAfter}, nil
}

// LeakyBucket is the leaky bucket as a queue: it shapes traffic into a
// steady flow of limit units of cost per period. Each admitted request joins
// a queue of at most capacity units and is told, in Decision.Delay, how long
// to wait for its turn; requests then proceed one interval apart. A request
// that would overflow the queue is denied.
//
// Where a token bucket lets a burst through at once, the leaky bucket
// admits the same burst but spreads it out: that is the difference between
// limiting and shaping.
func LeakyBucket(limit int64, period time.Duration, capacity int64) Algorithm {
	r, err := newRate("leaky bucket", "capacity", limit, period, capacity)
	return &leakyBucket{rate: r, err: err, argv: r.args()}
}

type leakyBucket struct {
	rate
	err  error
	argv []int64
}

func (a *leakyBucket) Name() string        { return "leaky_bucket" }
func (a *leakyBucket) Validate() error     { return a.err }
func (a *leakyBucket) MaxCost() int64      { return a.burst }
func (a *leakyBucket) ServerArgs() []int64 { return a.argv }
func (a *leakyBucket) String() string {
	return fmt.Sprintf("LeakyBucket(limit=%d, period=%v, capacity=%d)", a.limit, time.Duration(a.period)*time.Microsecond, a.burst)
}

// Decide implements Algorithm. State: [queued units, last update, unit].
// The queue drains drip units per microsecond; a request admitted behind
// queued units waits until they have drained.
func (a *leakyBucket) Decide(state []byte, req Request) (Step, error) {
	var f [3]int64
	level, last := int64(0), req.Now
	if state != nil {
		if err := decodeFields(state, f[:]); err != nil {
			return Step{}, err
		}
		if f[2] <= 0 {
			return Step{}, fmt.Errorf("%w: leaky bucket unit %d", ErrCorruptState, f[2])
		}
		level = a.drain(a.rescale(f[0], f[2]), req.Now-f[1])
		last = max(f[1], req.Now)
	}
	need := req.Cost * a.unit
	d := Decision{Limit: a.burst}
	d.Allowed = level+need <= a.capacity
	if d.Allowed {
		d.Delay = ceilDiv(level, a.drip)
		if !req.Peek {
			level += need
		}
	}
	d.Remaining = (a.capacity - level) / a.unit
	d.ResetAfter = ceilDiv(level, a.drip)
	if !d.Allowed {
		d.RetryAfter = ceilDiv(level+need-a.capacity, a.drip)
		return Step{Decision: d}, nil
	}
	if req.Peek {
		return Step{Decision: d}, nil
	}
	return Step{Decision: d, Next: encodeFields(state, level, last, a.unit), TTL: d.ResetAfter}, nil
}

// GCRA is the generic cell rate algorithm: it keeps one theoretical arrival
// time (TAT) per key, the time at which the key would be fully rested, and
// admits a request when, after adding the request's cost × interval, the
// TAT is at most burst intervals ahead of now. The interval is
// period/limit, held exactly as a fraction.
//
// Its decisions are the token bucket's with the same numbers.
func GCRA(limit int64, period time.Duration, burst int64) Algorithm {
	r, err := newRate("gcra", "burst", limit, period, burst)
	return &gcra{rate: r, err: err, argv: r.args()}
}

type gcra struct {
	rate
	err  error
	argv []int64
}

func (a *gcra) Name() string        { return "gcra" }
func (a *gcra) Validate() error     { return a.err }
func (a *gcra) MaxCost() int64      { return a.burst }
func (a *gcra) ServerArgs() []int64 { return a.argv }
func (a *gcra) String() string      { return "GCRA(" + a.rate.String() + ")" }

// Decide implements Algorithm. State: [TAT microseconds, TAT fraction in
// 1/drip of a microsecond, drip]. Everything is compared in units relative
// to now, where the TAT's distance ahead of now is at most capacity.
func (a *gcra) Decide(state []byte, req Request) (Step, error) {
	var f [3]int64
	ahead := int64(0) // units by which the TAT lies ahead of now
	if state != nil {
		if err := decodeFields(state, f[:]); err != nil {
			return Step{}, err
		}
		tat, frac, drip := f[0], f[1], f[2]
		if drip <= 0 || frac < 0 || frac >= drip {
			return Step{}, fmt.Errorf("%w: gcra fraction %d/%d", ErrCorruptState, frac, drip)
		}
		if tat >= req.Now {
			// A TAT further ahead than the capacity (a clock behind the
			// one that stored it, or a smaller burst than before) is
			// capped.
			us := min(tat-req.Now, a.fill)
			if drip != a.drip {
				frac = int64(math.Floor(float64(frac) / float64(drip) * float64(a.drip)))
			}
			ahead = min(us*a.drip+frac, a.capacity)
		}
	}
	need := req.Cost * a.unit
	d := Decision{Limit: a.burst}
	d.Allowed = ahead+need <= a.capacity
	if d.Allowed && !req.Peek {
		ahead += need
	}
	d.Remaining = nonNeg(a.capacity-ahead) / a.unit
	d.ResetAfter = ceilDiv(ahead, a.drip)
	if !d.Allowed {
		d.RetryAfter = ceilDiv(ahead+need-a.capacity, a.drip)
		return Step{Decision: d}, nil
	}
	if req.Peek {
		return Step{Decision: d}, nil
	}
	tat := req.Now + ahead/a.drip
	return Step{Decision: d, Next: encodeFields(state, tat, ahead%a.drip, a.drip), TTL: d.ResetAfter}, nil
}

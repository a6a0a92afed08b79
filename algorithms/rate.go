package algorithms

import (
	"fmt"
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

// serverArgs lists the parameters every server-side form of a rate
// algorithm receives, in order.
func (r rate) serverArgs() []int64 { return []int64{r.unit, r.drip, r.capacity, r.fill, r.burst} }

// drain returns level after elapsed microseconds of dripping, never below
// zero, for a level that drains completely within span microseconds. A
// negative elapsed (a clock behind the one that stored the state) drains
// nothing.
func (r rate) drain(level, elapsed, span int64) int64 {
	if elapsed <= 0 {
		return level
	}
	if elapsed >= span {
		return 0
	}
	return max(level-elapsed*r.drip, 0)
}

// rescale converts a level measured in another unit (after the limit or
// period changed) into this rate's unit, capped at top. The server-side
// forms compute the same doubles in the same order.
func (r rate) rescale(level, fromUnit, top int64) int64 {
	if fromUnit == r.unit {
		return min(level, top)
	}
	return min(divMulFloor(level, fromUnit, r.unit), top)
}

// top is the most a token bucket or GCRA holds, in fixed-point units: its
// capacity and two more of reservations, or 2^52 units where that is more
// (ten years of the rate for every limit that divides its period in
// microseconds), so that every value the arithmetic reaches (top plus a
// request's need) stays at most MaxExact.
func (r rate) top() int64 { return max(3*r.capacity, MaxExact/2) }

// maxReach is the longest a reservation may book ahead, in microseconds:
// MaxPeriod, the longest maxDelay Limiter.Reserve passes. It keeps every
// time a state stores (GCRA's TAT) below MaxExact for any now a Limiter
// passes (below MaxExact/2).
const maxReach = int64(MaxPeriod / time.Microsecond)

// horizon is how far beyond a full bucket, in microseconds, a reservation
// may book: maxReach, or as far as top reaches where that is less.
func (r rate) horizon() int64 { return min(maxReach, (r.top()-r.capacity)/r.drip) }

// after returns how long from now a level, measured at the state's latest
// time, takes to drain, when now lies behind microseconds before that
// time (a reading older than the state): nothing for an empty level.
func (r rate) after(behind, level int64) int64 {
	return min(level, 1)*behind + ceilDiv(level, r.drip)
}

// refund returns how many units a refund of need units gives back to a
// bucket ahead units deep, for a reservation whose time to act is wait
// microseconds from now (negative once it has passed: nothing), where
// the reservation's own units end at the depth edge (the burst's capacity
// for the token bucket and GCRA, the request itself for the leaky
// bucket's queue). Units reserved after it (ahead beyond edge + wait×drip)
// stay: later reservations were admitted on top of it, as
// golang.org/x/time/rate's Reservation.CancelAt keeps them.
func (r rate) refund(ahead, need, edge, wait int64) int64 {
	if wait < 0 {
		return 0
	}
	later := ahead - edge - min(wait, r.top()/r.drip+1)*r.drip
	return max(min(need-max(later, 0), ahead), 0)
}

// reach is how far beyond the burst's capacity a reservation of maxDelay
// microseconds may take a bucket: maxDelay's worth of drip, as far as the
// horizon.
func (r rate) reach(maxDelay int64) int64 {
	return min(max(maxDelay, 0), r.horizon()) * r.drip
}

// bucketState is the stored state of the token and the leaky bucket, field
// by field.
type bucketState struct {
	level int64 // the token bucket's deficit, the leaky bucket's queue
	last  int64 // the last update, µs
	unit  int64 // the unit level is measured in
}

// valid reports whether a stored state can be read.
func (s *bucketState) valid() bool { return s.unit > 0 }

// decodeBucket decodes a bucket's stored state.
func decodeBucket(name string, state []byte) (bucketState, error) {
	var f [3]int64
	if err := decodeFields(state, f[:]); err != nil {
		return bucketState{}, err
	}
	s := bucketState{level: f[0], last: f[1], unit: f[2]}
	if !s.valid() {
		return s, fmt.Errorf("%w: %s unit %d", ErrCorruptState, name, s.unit)
	}
	return s, nil
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
	return &tokenBucket{rate: r, err: err, argv: r.serverArgs()}
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
	return decideBy(a, state, req)
}

// DecideTo implements forms.ToDecider.
func (a *tokenBucket) DecideTo(state []byte, req Request) (next []byte, ttl int64, allowed bool, limit, remaining, retryAfter, resetAfter, delay int64, err error) {
	var s bucketState
	if state != nil {
		if s, err = decodeBucket("token bucket", state); err != nil {
			return nil, 0, false, 0, 0, 0, 0, 0, err
		}
	}
	var r Decision
	ttl0 := a.decide(&s, state != nil, req, &r)
	next, ttl = encodeState(state, ttl0, s.level, s.last, s.unit)
	return next, ttl, r.Allowed, r.Limit, r.Remaining, r.RetryAfter, r.ResetAfter, r.Delay, nil
}

// decide is the token bucket's transition, in the subset the server-side
// forms are generated from (internal/formgen).
//
// A reading older than the state's last update (req.Now < s.last: clocks
// that disagree, or a request that read the clock before it queued for
// the key) is served as of s.last: nothing drains, and what it takes is
// taken at s.last. Every duration it answers (ResetAfter, RetryAfter,
// Delay, the TTL) is measured from its own now, so they include the time
// it lies behind: the state never expires before it is back to rest.
func (a *tokenBucket) decide(s *bucketState, live bool, req Request, d *Decision) int64 {
	deficit := int64(0)
	top := a.top()
	behind := int64(0) // how long before s.last the reading lies
	if live {
		deficit = a.rescale(s.level, s.unit, top)
		deficit = a.drain(deficit, req.Now-s.last, top/a.drip+1)
		behind = max(s.last-req.Now, 0)
		s.last = max(s.last, req.Now)
	} else {
		s.last = req.Now
	}
	need := req.Cost * a.unit
	*d = Decision{Limit: a.burst}
	if req.Refund {
		// The deficit is as of s.last (the latest time the key has
		// seen), and so is the reservation's distance.
		give := a.refund(deficit, need, a.capacity, req.Act-s.last)
		deficit -= give
		d.Allowed = true
		d.Remaining = max(a.capacity-deficit, 0) / a.unit
		d.ResetAfter = a.after(behind, deficit)
		if give == 0 {
			return 0
		}
		s.level, s.unit = deficit, a.unit
		return max(d.ResetAfter, 1)
	}
	// A reservation acts within MaxDelay of its own now.
	room := a.capacity + a.reach(req.MaxDelay-behind)
	d.Allowed = deficit+need <= room
	if d.Allowed {
		d.Delay = a.after(behind, max(deficit+need-a.capacity, 0))
		if !req.Peek {
			deficit += need
		}
	}
	d.Remaining = max(a.capacity-deficit, 0) / a.unit
	d.ResetAfter = a.after(behind, deficit)
	if !d.Allowed {
		d.RetryAfter = behind + ceilDiv(deficit+need-room, a.drip)
		return 0
	}
	if req.Peek {
		return 0
	}
	s.level, s.unit = deficit, a.unit
	return d.ResetAfter
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
	return &leakyBucket{rate: r, err: err, argv: r.serverArgs()}
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
	return decideBy(a, state, req)
}

// DecideTo implements forms.ToDecider.
func (a *leakyBucket) DecideTo(state []byte, req Request) (next []byte, ttl int64, allowed bool, limit, remaining, retryAfter, resetAfter, delay int64, err error) {
	var s bucketState
	if state != nil {
		if s, err = decodeBucket("leaky bucket", state); err != nil {
			return nil, 0, false, 0, 0, 0, 0, 0, err
		}
	}
	var r Decision
	ttl0 := a.decide(&s, state != nil, req, &r)
	next, ttl = encodeState(state, ttl0, s.level, s.last, s.unit)
	return next, ttl, r.Allowed, r.Limit, r.Remaining, r.RetryAfter, r.ResetAfter, r.Delay, nil
}

// decide is the leaky bucket's transition, in the subset the server-side
// forms are generated from (internal/formgen).
//
// A reading older than the state's last update is served as of s.last, as
// the token bucket serves it: its Delay, ResetAfter, RetryAfter and TTL
// include the time it lies behind.
func (a *leakyBucket) decide(s *bucketState, live bool, req Request, d *Decision) int64 {
	level := int64(0)
	behind := int64(0) // how long before s.last the reading lies
	if live {
		level = a.rescale(s.level, s.unit, a.capacity)
		level = a.drain(level, req.Now-s.last, a.fill)
		behind = max(s.last-req.Now, 0)
		s.last = max(s.last, req.Now)
	} else {
		s.last = req.Now
	}
	need := req.Cost * a.unit
	*d = Decision{Limit: a.burst}
	if req.Refund {
		give := a.refund(level, need, need, req.Act-s.last)
		level -= give
		d.Allowed = true
		d.Remaining = (a.capacity - level) / a.unit
		d.ResetAfter = a.after(behind, level)
		if give == 0 {
			return 0
		}
		s.level, s.unit = level, a.unit
		return max(d.ResetAfter, 1)
	}
	d.Allowed = level+need <= a.capacity
	if d.Allowed {
		d.Delay = a.after(behind, level)
		if !req.Peek {
			level += need
		}
	}
	d.Remaining = (a.capacity - level) / a.unit
	d.ResetAfter = a.after(behind, level)
	if !d.Allowed {
		d.RetryAfter = behind + ceilDiv(level+need-a.capacity, a.drip)
		return 0
	}
	if req.Peek {
		return 0
	}
	s.level, s.unit = level, a.unit
	return d.ResetAfter
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
	return &gcra{rate: r, err: err, argv: r.serverArgs()}
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

// gcraState is GCRA's stored state, field by field.
type gcraState struct {
	tat  int64 // the theoretical arrival time, µs
	frac int64 // its fraction, in 1/drip of a µs
	drip int64 // the drip the fraction is measured in
}

// valid reports whether a stored state can be read.
func (s *gcraState) valid() bool { return s.drip > 0 && s.frac < s.drip }

// Decide implements Algorithm. State: [TAT microseconds, TAT fraction in
// 1/drip of a microsecond, drip].
func (a *gcra) Decide(state []byte, req Request) (Step, error) {
	return decideBy(a, state, req)
}

// DecideTo implements forms.ToDecider.
func (a *gcra) DecideTo(state []byte, req Request) (next []byte, ttl int64, allowed bool, limit, remaining, retryAfter, resetAfter, delay int64, err error) {
	var s gcraState
	if state != nil {
		var f [3]int64
		if err := decodeFields(state, f[:]); err != nil {
			return nil, 0, false, 0, 0, 0, 0, 0, err
		}
		s = gcraState{tat: f[0], frac: f[1], drip: f[2]}
		if !s.valid() {
			return nil, 0, false, 0, 0, 0, 0, 0, fmt.Errorf("%w: gcra fraction %d/%d", ErrCorruptState, s.frac, s.drip)
		}
	}
	var r Decision
	ttl0 := a.decide(&s, state != nil, req, &r)
	next, ttl = encodeState(state, ttl0, s.tat, s.frac, s.drip)
	return next, ttl, r.Allowed, r.Limit, r.Remaining, r.RetryAfter, r.ResetAfter, r.Delay, nil
}

// decide is GCRA's transition, in the subset the server-side forms are
// generated from (internal/formgen). Everything is compared in units
// relative to now, where the TAT's distance ahead of now is at most
// capacity, plus the reservations (Request.MaxDelay) booked beyond it.
//
// A request never moves the TAT back but to refund its own reservation.
// A reading older than the state (clocks that disagree, or a request that
// read the clock before it queued for the key) sees the TAT further
// ahead, as the time it lies behind: it is judged more strictly, never
// less, and what it takes is added to the TAT. A TAT further ahead than
// top (a reading very far behind, or numbers changed to a shorter refill
// than the ones that wrote it) is read as top, which no request fits:
// it is denied, writes nothing, and its RetryAfter is computed from the
// TAT itself, so that the same request, retried when told, is admitted.
func (a *gcra) decide(s *gcraState, live bool, req Request, d *Decision) int64 {
	ahead := int64(0) // units by which the TAT lies ahead of now, at most top
	top := a.top()
	over := int64(0) // microseconds by which the TAT lies ahead of now
	frac := int64(0) // the TAT's fraction, in 1/drip of a microsecond
	capped := false  // the TAT lies further ahead than top
	if live && s.tat >= req.Now {
		over = s.tat - req.Now
		frac = s.frac
		if s.drip != a.drip {
			frac = divMulFloor(s.frac, s.drip, a.drip)
		}
		// (max: the server forms may compute raw before the test above.)
		raw := max(min(over, top/a.drip+1), 0)*a.drip + frac
		ahead = min(raw, top)
		capped = raw > top
	}
	need := req.Cost * a.unit
	*d = Decision{Limit: a.burst}
	if req.Refund {
		give := a.refund(ahead, need, a.capacity, req.Act-req.Now)
		if capped {
			give = 0
		}
		ahead -= give
		d.Allowed = true
		d.Remaining = max(a.capacity-ahead, 0) / a.unit
		d.ResetAfter = ceilDiv(ahead, a.drip)
		if capped {
			d.ResetAfter = over + ceilDiv(frac, a.drip)
		}
		if give == 0 {
			return 0
		}
		whole := ahead / a.drip
		s.tat, s.frac, s.drip = req.Now+whole, ahead-whole*a.drip, a.drip
		return max(d.ResetAfter, 1)
	}
	room := a.capacity + a.reach(req.MaxDelay)
	d.Allowed = ahead+need <= room && !capped
	if d.Allowed {
		d.Delay = ceilDiv(max(ahead+need-a.capacity, 0), a.drip)
		if !req.Peek {
			ahead += need
		}
	}
	d.Remaining = max(a.capacity-ahead, 0) / a.unit
	d.ResetAfter = ceilDiv(ahead, a.drip)
	if capped {
		d.ResetAfter = over + ceilDiv(frac, a.drip)
	}
	if !d.Allowed {
		// The first time at which the TAT is within room − need of now:
		// over − ⌊(room − need − frac) / drip⌋, written so that the
		// dividend is positive (room − need ≥ 0 > frac − drip).
		d.RetryAfter = over + 1 - (room-need-frac+a.drip)/a.drip
		return 0
	}
	if req.Peek {
		return 0
	}
	whole := ahead / a.drip
	s.tat, s.frac, s.drip = req.Now+whole, ahead-whole*a.drip, a.drip
	return d.ResetAfter
}

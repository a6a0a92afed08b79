// Package algorithms holds the rate-limiting algorithms, each written once as
// a pure state transition: (state, now, cost, parameters) → (new state,
// decision). Stores hold the state; they contain no algorithm logic.
//
// This package is what a user composes: the six constructors, All (several
// limits on one key), Divide (a limit shared by replicas), Policy, and the
// Algorithm interface with its Request, Step and Decision, for a user who
// writes an algorithm of their own, which then runs on every store through
// its atomic Update.
//
// Every built-in algorithm also runs next to the data where the store can
// run code there: a Lua form for Redis and Valkey and a SQL form for
// PostgreSQL. Those forms, their calling conventions, and the built-ins
// bound to their Go types are the store author's API, in package forms
// (algorithms/forms), as Go CDK keeps blob/driver apart from blob. The Go
// form here is the only source: the forms of the scalar algorithms are
// generated from each one's decide method by internal/formgen (go
// generate), and only the sliding log's, which keep data structures the
// generator's subset of Go does not express, are written by hand. The
// conformance suite runs the server-side forms against the Go form on
// seeded random sequences (clocks that step backwards, numbers switched
// mid-sequence and at their bounds, costs and peeks) and requires identical
// decisions and stored states.
//
// Time is an integer count of microseconds since the Unix epoch. All
// arithmetic is integer arithmetic whose values stay below 2^53, so the Lua
// form, which computes in doubles, gets exactly the Go form's answers. The
// parameter checks in each constructor enforce that bound.
package algorithms

import (
	"encoding/binary"
	"errors"
	"fmt"
	"time"
)

// MaxExact is the largest integer every form of an algorithm represents
// exactly (2^53, the limit of a double). Parameters whose derived values
// would exceed it are rejected with ErrInvalidParams.
const MaxExact = 1 << 53

// MaxPeriod is the longest period an algorithm accepts.
const MaxPeriod = 10 * 365 * 24 * time.Hour

// Errors returned by the algorithms. The ratelimit package re-exports them.
var (
	// ErrInvalidParams reports a zero, negative or overflowing limit,
	// period, burst or capacity.
	ErrInvalidParams = errors.New("ratelimit: invalid parameters")
	// ErrCorruptState reports stored state that does not decode as the
	// algorithm's state.
	ErrCorruptState = errors.New("ratelimit: corrupt state")
)

// Request is one call to an algorithm.
type Request struct {
	// Now is the current time in microseconds since the Unix epoch.
	Now int64
	// Cost is how many units the request consumes, at least 1 and at most
	// the algorithm's MaxCost.
	Cost int64
	// Peek asks for the decision without consuming anything: the returned
	// Step has a nil Next and the Decision's Remaining is what remains
	// before the request.
	Peek bool
	// MaxDelay, in microseconds, makes the request a reservation: it is
	// admitted when it can be served within MaxDelay from now, consuming
	// now, and Decision.Delay says how long to wait before acting on it.
	// Zero asks for what can be served now. The token bucket and GCRA
	// reserve into the future as far as MaxDelay says, at most MaxPeriod
	// beyond a full bucket and at most 2^52 fixed-point units of debt (or
	// three bursts where that is more), the bounds that keep every value
	// of their state below MaxExact; the
	// leaky bucket queues within its capacity whatever MaxDelay says; the
	// window algorithms and the sliding log serve only now (see
	// docs/reservations.md).
	MaxDelay int64
	// Refund asks to give back Cost units taken by an earlier reservation
	// whose time to act was Act (µs since the Unix epoch), as far as the
	// algorithm can: the rate algorithms give back what no later
	// reservation has built on (as golang.org/x/time/rate's
	// Reservation.Cancel does) and nothing once Act has passed; the window
	// algorithms give back within the window Act fell in, while it is the
	// current one; the sliding log gives nothing back and answers a refund
	// as a peek. A refund is always admitted, never leaves a key with more
	// room than its empty state, and never gives back more than Cost.
	// ratelimit.Limiter sends refunds only to the built-in algorithms and
	// composites of them; an algorithm of a user's own never receives one.
	Refund bool
	// Act is, for a refund, the time to act (µs) of the reservation given
	// back: the time it was made plus its Decision.Delay.
	Act int64
}

// Decision is an algorithm's answer in integers. Durations are in
// microseconds.
type Decision struct {
	// Allowed reports whether the request is admitted.
	Allowed bool
	// Limit is the most a key may hold at once: the limit of a window
	// algorithm, the burst of a bucket.
	Limit int64
	// Remaining is how many units of cost could still be admitted now.
	Remaining int64
	// RetryAfter is, for a denied request, how long until the same request
	// would be admitted if nothing else happened; zero when allowed.
	RetryAfter int64
	// ResetAfter is how long until the key's state is back to its initial,
	// unused condition if nothing else happens.
	ResetAfter int64
	// Delay is how long an admitted request should wait before it
	// proceeds. The leaky bucket, which shapes traffic into a steady rate,
	// sets it, and so do the token bucket and GCRA for a reservation
	// (Request.MaxDelay) served in the future; it is zero otherwise.
	Delay int64
	// Parts holds, for a composite (All), each part's own decision in the
	// order of its parts: for an admitted request the figures after it
	// consumed, for a denied request or a peek what each part would say
	// without consuming. It is nil for a single algorithm.
	Parts []Decision
}

// Step is the result of one transition.
type Step struct {
	// Decision is the answer to the request.
	Decision Decision
	// Next is the state to store, or nil when the stored state must stay
	// as it is (a peek, or a request that changed nothing).
	Next []byte
	// TTL is how long, in microseconds, Next stays meaningful: after it
	// the state is equivalent to no state at all. It is at least 1 when
	// Next is not nil.
	TTL int64
}

// Algorithm is the pure form of a rate-limiting algorithm with its
// parameters. Implementations must be safe for concurrent use; the built-in
// ones are immutable values.
//
// Users may implement Algorithm to run their own algorithm on every store:
// stores that cannot run it next to their data run it through their atomic
// Update, which calls Decide with the stored state.
type Algorithm interface {
	// Name identifies the algorithm in errors and metrics, and is part of
	// every storage key: a Limiter's namespace is "<limiter
	// name>:<algorithm name>", so limiters whose algorithms have
	// different names never share state. ratelimit.New refuses, with
	// ErrInvalidParams, a name that is not 1 to 64 characters of
	// [A-Za-z0-9_.-]. A name selects nothing: stores find a built-in's
	// server-side form by its type (BuiltinOf), so a user's algorithm
	// that calls itself "gcra" still runs through Update.
	Name() string
	// Validate reports whether the parameters are usable, with an error
	// wrapping ErrInvalidParams that names the bad value.
	Validate() error
	// MaxCost is the largest cost a single request may have: a request
	// above it could never be admitted.
	MaxCost() int64
	// Decide applies req to state, which is nil when the key holds no
	// state. It must not retain state; it may write the next state into
	// state's memory unless req.Peek is set.
	Decide(state []byte, req Request) (Step, error)
}

// toDecider is forms.ToDecider, which the built-ins whose state is a few
// integers implement; their Decide is decideBy.
type toDecider interface {
	DecideTo(state []byte, req Request) (next []byte, ttl int64, allowed bool, limit, remaining, retryAfter, resetAfter, delay int64, err error)
}

// Params checks shared by the constructors.

func micros(d time.Duration) int64 { return int64(d / time.Microsecond) }

func checkPeriod(name string, period time.Duration) error {
	switch {
	case period <= 0:
		return fmt.Errorf("%w: %s period %v must be positive", ErrInvalidParams, name, period)
	case period%time.Microsecond != 0:
		return fmt.Errorf("%w: %s period %v must be a whole number of microseconds", ErrInvalidParams, name, period)
	case period > MaxPeriod:
		return fmt.Errorf("%w: %s period %v exceeds the maximum %v", ErrInvalidParams, name, period, MaxPeriod)
	}
	return nil
}

func checkCount(name, what string, n int64) error {
	switch {
	case n <= 0:
		return fmt.Errorf("%w: %s %s %d must be positive", ErrInvalidParams, name, what, n)
	case n > MaxExact/1024:
		return fmt.Errorf("%w: %s %s %d is too large", ErrInvalidParams, name, what, n)
	}
	return nil
}

// gcd returns the greatest common divisor of two positive integers.
func gcd(a, b int64) int64 {
	for b != 0 {
		a, b = b, a%b
	}
	return a
}

func nonNeg(n int64) int64 { return max(n, 0) }

// State encoding: a fixed number of little-endian int64 fields, each in
// [0, MaxExact]; anything else is corrupt.

func decodeFields(state []byte, dst []int64) error {
	if len(state) != 8*len(dst) {
		return fmt.Errorf("%w: %d bytes, want %d", ErrCorruptState, len(state), 8*len(dst))
	}
	for i := range dst {
		dst[i] = int64(binary.LittleEndian.Uint64(state[8*i : 8*i+8]))
	}
	for i, f := range dst {
		if uint64(f) > MaxExact { // negative ones too
			return fmt.Errorf("%w: field %d is %d", ErrCorruptState, i, f)
		}
	}
	return nil
}

// decideBy is Decide for an algorithm whose DecideTo does the work: the
// Step is DecideTo's decision, next state and TTL.
func decideBy(a toDecider, state []byte, req Request) (Step, error) {
	next, ttl, allowed, limit, remaining, retryAfter, resetAfter, delay, err := a.DecideTo(state, req)
	if err != nil {
		return Step{}, err
	}
	return Step{
		Decision: Decision{Allowed: allowed, Limit: limit, Remaining: remaining, RetryAfter: retryAfter, ResetAfter: resetAfter, Delay: delay},
		Next:     next,
		TTL:      ttl,
	}, nil
}

// encodeState returns a decide core's next state and its TTL: the state's
// fields encoded into buf's memory when ttl is positive, and no state when
// it is zero.
func encodeState(buf []byte, ttl int64, fields ...int64) ([]byte, int64) {
	if ttl <= 0 {
		return nil, 0
	}
	return encodeFields(buf, fields...), ttl
}

// encodeFields writes fields into buf when it has room (reusing the
// caller's memory) and into a new slice otherwise.
func encodeFields(buf []byte, fields ...int64) []byte {
	n := 8 * len(fields)
	if cap(buf) < n {
		buf = make([]byte, n)
	}
	buf = buf[:n]
	for i, f := range fields {
		binary.LittleEndian.PutUint64(buf[8*i:], uint64(f))
	}
	return buf
}

package ratelimit

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/ratelimitkit/ratelimit/algorithms"
	"github.com/ratelimitkit/ratelimit/store"
)

// ErrCircuitOpen is returned (wrapped) with decisions made without calling
// the store because the circuit breaker is open (WithCircuitBreaker). The
// error also wraps the store failure that opened the breaker, so errors.As
// still reaches the backend's error.
var ErrCircuitOpen = errors.New("ratelimit: circuit open")

// WithCircuitBreaker stops calling a failing store. After failures
// consecutive store failures the breaker opens: for coolDown, the store is
// not called, and the request is decided as for any store failure, with an
// error wrapping ErrCircuitOpen and the failure that opened it, so a dead
// store costs nothing per request. After the cool-down one request probes
// the store, while the others go on as if open: a probe that succeeds
// closes the breaker, one that fails opens it for another cool-down.
//
// What counts as a failure is an error that is the store's fault, one that
// ended a call's time budget included; not the caller's context ending
// (even when the store's error arrives first, the caller's deadline having
// passed, or the call having shared a batch with callers whose deadlines
// ended it), not state the algorithm cannot read (ErrCorruptState), and
// not a step of a user's algorithm that breaks the contract
// (ErrInvalidParams). The breaker measures time on the limiter's clock.
func WithCircuitBreaker(failures int, coolDown time.Duration) Option {
	return func(l *Limiter) error {
		if err := checkPositive("circuit breaker failures", failures); err != nil {
			return err
		}
		if coolDown < time.Microsecond {
			return fmt.Errorf("%w: circuit breaker cool-down %v must be at least 1µs", ErrInvalidParams, coolDown)
		}
		return l.addLink(breakerLink, func(_ *chainOf, next link) (link, error) {
			return &breaker{passForget: passForget{next}, threshold: int64(failures), coolDown: int64(coolDown / time.Microsecond)}, nil
		})
	}
}

// The breaker's states.
const (
	breakerClosed  int32 = iota // calls go to the store
	breakerOpen                 // calls do not, until the cool-down ends
	breakerProbing              // one call (the probe) went to the store
)

// breaker is WithCircuitBreaker's link: a circuit breaker on the
// limiter's clock (microseconds). Its fast path, a closed breaker, is one
// atomic load before the call and at most one after it.
type breaker struct {
	passForget
	threshold int64 // consecutive failures that open it
	coolDown  int64 // µs

	state    atomic.Int32
	failures atomic.Int64 // consecutive failures while closed
	until    atomic.Int64 // end of the cool-down while open, µs
	err      atomic.Pointer[circuitError]
}

// decide asks the rest of the chain unless the breaker is open, and counts
// the outcome. While it is open it decides nothing and returns the error
// that opened it, wrapped in ErrCircuitOpen: made once when it opened, so
// that path allocates nothing.
func (b *breaker) decide(ctx context.Context, t *Tier, k store.Key, req algorithms.Request, d *Decision) error {
	if !b.allow(req.Now) {
		return b.err.Load()
	}
	err := b.next.decide(ctx, t, k, req, d)
	b.record(ctx, req.Now, err)
	return err
}

// allow reports whether a call may go to the store at now. When the
// breaker is open past its cool-down, exactly one caller gets true: the
// probe.
func (b *breaker) allow(now int64) bool {
	switch b.state.Load() {
	case breakerClosed:
		return true
	case breakerOpen:
		return now >= b.until.Load() && b.state.CompareAndSwap(breakerOpen, breakerProbing)
	default: // another call is probing
		return false
	}
}

// record counts the outcome of a store call made under ctx at now.
func (b *breaker) record(ctx context.Context, now int64, err error) {
	switch {
	case storeFault(ctx, err):
		if b.state.Load() == breakerProbing || b.failures.Add(1) >= b.threshold {
			b.open(now, err)
		}
	case err != nil && !notStoresFault(err):
		// The caller gave up: the store is neither blamed nor cleared. A
		// probe that ends this way lets the next request probe.
		b.state.CompareAndSwap(breakerProbing, breakerOpen)
	default:
		if b.failures.Load() != 0 {
			b.failures.Store(0)
		}
		if b.state.Load() != breakerClosed {
			b.state.Store(breakerClosed)
		}
	}
}

// open opens the breaker at now for a cool-down, because of err.
func (b *breaker) open(now int64, err error) {
	b.err.Store(&circuitError{cause: err, coolDown: time.Duration(b.coolDown) * time.Microsecond})
	b.until.Store(now + b.coolDown)
	b.failures.Store(0)
	b.state.Store(breakerOpen)
}

// circuitError is ErrCircuitOpen with the failure that opened the breaker.
type circuitError struct {
	cause    error
	coolDown time.Duration
}

func (e *circuitError) Error() string {
	return fmt.Sprintf("ratelimit: circuit open (the store is probed every %v): %v", e.coolDown, e.cause)
}

// storesFault makes an open breaker the store's fault (storeFault).
func (e *circuitError) storesFault() {}

// retryAfter is how long the store is not called, at most (retryError).
func (e *circuitError) retryAfter() time.Duration { return e.coolDown }

// Is reports ErrCircuitOpen.
func (e *circuitError) Is(target error) bool { return target == ErrCircuitOpen }

// Unwrap returns the store failure that opened the breaker.
func (e *circuitError) Unwrap() error { return e.cause }

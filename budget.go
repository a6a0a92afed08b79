package ratelimit

import (
	"context"
	"fmt"
	"time"

	"github.com/ratelimitkit/ratelimit/algorithms"
	"github.com/ratelimitkit/ratelimit/internal/ctxaware"
)

// DefaultStoreTimeout is the time budget of each store call of a limiter
// created without WithStoreTimeout, on a store outside the process: a store
// that hangs then costs a decision at most this long, and the decision
// comes from the failure policy (or the fallback) with an error wrapping
// context.DeadlineExceeded. It is long enough for a healthy store on a
// loaded machine (its calls take well under 10ms) and short enough that an
// HTTP client is still waiting for the answer.
//
// The memory store, which runs in the process and cannot hang, gets no
// budget by default: a decision on it then costs no timer and allocates
// nothing.
const DefaultStoreTimeout = time.Second

// WithStoreTimeout sets the time budget of every store call to d, instead
// of DefaultStoreTimeout: a call still running after d is abandoned and
// counts as a store failure (its error says the budget ran out and wraps
// context.DeadlineExceeded and the store's own error), so a store that
// hangs adds at most d to a decision. A store error that came back within
// the budget is returned as it is. The caller's context still ends the call
// sooner when its deadline comes first; that is not a store failure.
//
// WithStoreTimeout(0) turns the budget off: store calls are then bounded
// only by the caller's context and the store client's own timeouts.
// A negative d is an error wrapping ErrInvalidParams. On the memory store,
// which gets no budget by default, a positive d applies as given.
//
// The budget reaches the store as the context's deadline, which every
// store must honour (the conformance suite checks it). A store of the
// user's own is called on a goroutine of its own as well, so that the
// budget holds even when it does not; the built-in stores are called
// directly.
func WithStoreTimeout(d time.Duration) Option {
	return func(l *Limiter) error {
		if d < 0 {
			return fmt.Errorf("%w: store timeout %v must not be negative", ErrInvalidParams, d)
		}
		l.timeout = d
		return nil
	}
}

// initTimeout gives the limiter's guard the store budget its options chose:
// WithStoreTimeout's, or DefaultStoreTimeout on a store outside the
// process (one that is not the memory store's toDecider).
func (l *Limiter) initTimeout() {
	d := l.timeout
	if d < 0 { // not set
		if toDeciderOf(l.store) != nil {
			return
		}
		d = DefaultStoreTimeout
	}
	if d > 0 {
		guardOf(l).timeout = d
		l.detach = !ctxaware.Honours(l.store)
	}
}

// budgeted asks the store at tier t within the guard's time budget, if it
// has one. An error is a budgetError only when the budget ran out before
// the call ended, and before the caller's own deadline.
func (l *Limiter) budgeted(ctx context.Context, t *Tier, k Key, req algorithms.Request) (Decision, error) {
	budget := l.guard.timeout
	if budget == 0 {
		return l.fromStore(ctx, t, k, req)
	}
	end := time.Now().Add(budget)
	if dl, ok := ctx.Deadline(); ok && !dl.After(end) {
		// The caller's deadline comes first and bounds the call: a call
		// that ends by it ends by the caller's choice.
		return l.askStore(ctx, t, k, req)
	}
	sctx, cancel := context.WithDeadline(ctx, end)
	d, err := l.askStore(sctx, t, k, req)
	// The budget ran out if its context ended while the caller's did not,
	// or if its end has passed on the monotonic clock: a client that
	// set its socket's deadline from the context may answer before the
	// context's own timer fires.
	if err != nil && ctx.Err() == nil && (sctx.Err() != nil || !time.Now().Before(end)) {
		err = &budgetError{budget: budget, err: err}
	}
	cancel()
	return d, err
}

// askStore is fromStore for a call with a deadline: made directly on a
// store known to give up when its context ends, and otherwise on a
// goroutine of its own that the caller stops waiting for when ctx ends.
func (l *Limiter) askStore(ctx context.Context, t *Tier, k Key, req algorithms.Request) (Decision, error) {
	if !l.detach {
		return l.fromStore(ctx, t, k, req)
	}
	return ctxaware.Detached(ctx, "ratelimit: ", func(ctx context.Context) (Decision, error) { return l.fromStore(ctx, t, k, req) })
}

// bounded runs a store call that returns no decision (Reset's Delete)
// within the limiter's budget, as budgeted does for decisions.
func (l *Limiter) bounded(ctx context.Context, call func(context.Context) error) error {
	var budget time.Duration
	if l.guard != nil {
		budget = l.guard.timeout
	}
	if budget == 0 {
		return call(ctx)
	}
	end := time.Now().Add(budget)
	if dl, ok := ctx.Deadline(); !ok || dl.After(end) {
		var cancel context.CancelFunc
		ctx, cancel = context.WithDeadline(ctx, end)
		defer cancel()
	}
	if !l.detach {
		return call(ctx)
	}
	_, err := ctxaware.Detached(ctx, "ratelimit: ", func(ctx context.Context) (struct{}, error) { return struct{}{}, call(ctx) })
	return err
}

// budgetError is a store call's error when its time budget ran out.
type budgetError struct {
	budget time.Duration
	err    error
}

func (e *budgetError) Error() string {
	return fmt.Sprintf("ratelimit: store call exceeded its %v budget: %v", e.budget, e.err)
}

// Unwrap returns the store's error.
func (e *budgetError) Unwrap() error { return e.err }

// Is reports context.DeadlineExceeded, whatever the client made of the
// deadline (go-redis returns its socket's i/o timeout).
func (e *budgetError) Is(target error) bool { return target == context.DeadlineExceeded }

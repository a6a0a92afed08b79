package ratelimit

import (
	"context"
	"fmt"
	"time"

	"github.com/ratelimitkit/ratelimit/algorithms"
	"github.com/ratelimitkit/ratelimit/internal/ctxaware"
	"github.com/ratelimitkit/ratelimit/internal/deadline"
	"github.com/ratelimitkit/ratelimit/store"
)

// defaultStoreTimeout is the time budget of each store call of a limiter
// created without WithStoreTimeout, on a store outside the process: a store
// that hangs then costs a decision at most this long, and the decision is
// made as for any store failure, with an error wrapping
// context.DeadlineExceeded. It is long enough for a healthy store on a
// loaded machine (its calls take well under 10ms) and short enough that an
// HTTP client is still waiting for the answer.
//
// The memory store, which runs in the process and cannot hang, gets no
// budget by default: a decision on it then costs no timer and allocates
// nothing.
const defaultStoreTimeout = time.Second

// WithStoreTimeout sets the time budget of every store call to d. Without
// it, each call to a store outside the process has a budget of one second
// (long enough for a healthy store on a loaded machine, short enough that
// an HTTP client is still waiting), and the memory store, which cannot
// hang, none. A call still running after d is abandoned and
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
// store must honour (the conformance suite checks it). Calls whose context
// cannot be canceled (context.Background(), say) and that start within a
// hundredth of d of each other (at most a millisecond) share one deadline,
// the latest of theirs, so that a busy limiter sets no timer per call. A
// store of the user's own is called on a goroutine of its own as well, so
// that the budget holds even when it does not; the built-in stores are
// called directly.
func WithStoreTimeout(d time.Duration) Option {
	return func(l *Limiter) error {
		if d < 0 {
			return fmt.Errorf("%w: store timeout %v must not be negative", ErrInvalidParams, d)
		}
		return l.addLink(budgetLink, makeBudget(d))
	}
}

// makeBudget makes the budget's link for a timeout of d: WithStoreTimeout's,
// or, for d < 0 (no option), defaultStoreTimeout on a store outside the
// process (one that is not the memory store's toDecider). A budget of 0
// adds no link.
func makeBudget(d time.Duration) linkMaker {
	return func(c *chainOf, next link) (link, error) {
		store, timeout := c.l.store, d
		if timeout < 0 {
			if toDeciderOf(store) != nil {
				return next, nil
			}
			timeout = defaultStoreTimeout
		}
		if timeout == 0 {
			return next, nil
		}
		return &budget{passForget: passForget{next}, timeout: timeout, detach: !ctxaware.Honours(store), shared: deadline.New(timeout)}, nil
	}
}

// budget is the link that runs the rest of the chain, down to the store,
// within a time budget.
type budget struct {
	passForget
	timeout time.Duration
	// detach is set for a store not known to give up when its context
	// ends: it is called on a goroutine of its own (ctxaware.Detached).
	detach bool
	// shared bounds the calls whose context cannot be canceled by
	// deadlines they share (see within).
	shared *deadline.Shared
}

// within returns ctx bounded by the budget that ends at end (the budget
// from now), the deadline it got (end, or up to a step later), and the
// function that releases it: a context that cannot be canceled (such as
// context.Background()) gets a deadline shared with the other calls that
// start within a small step of it (a hundredth of the budget, at most a
// millisecond; deadline.Shared), any other its own.
func (b *budget) within(ctx context.Context, end time.Time) (context.Context, time.Time, context.CancelFunc) {
	return b.shared.Within(ctx, end)
}

// decide asks the rest of the chain within the budget. Its error is a
// budgetError only when the budget ran out before the call ended, and
// before the caller's own deadline.
func (b *budget) decide(ctx context.Context, t *Tier, k store.Key, req algorithms.Request, d *Decision) error {
	end := time.Now().Add(b.timeout)
	if dl, ok := ctx.Deadline(); ok && !dl.After(end) {
		// The caller's deadline comes first and bounds the call: a call
		// that ends by it ends by the caller's choice.
		return b.ask(ctx, t, k, req, d)
	}
	sctx, end, cancel := b.within(ctx, end)
	err := b.ask(sctx, t, k, req, d)
	// The budget ran out if its context ended while the caller's did not,
	// or if its end has passed on the monotonic clock: a client that
	// set its socket's deadline from the context may answer before the
	// context's own timer fires.
	if err != nil && ctx.Err() == nil && (sctx.Err() != nil || !time.Now().Before(end)) {
		err = &budgetError{budget: b.timeout, err: err}
	}
	cancel()
	return err
}

// ask asks the rest of the chain under ctx, which has a deadline: directly
// for a store known to give up when its context ends, and otherwise on a
// goroutine of its own that the caller stops waiting for when ctx ends.
func (b *budget) ask(ctx context.Context, t *Tier, k store.Key, req algorithms.Request, d *Decision) error {
	if !b.detach {
		return b.next.decide(ctx, t, k, req, d)
	}
	// The goroutine decides into a Decision of its own: it may outlive
	// the call, and d is the caller's (see link.decide).
	v, err := ctxaware.Detached(ctx, "ratelimit: ", func(ctx context.Context) (v Decision, err error) {
		err = b.next.decide(ctx, t, k, req, &v)
		return v, err
	})
	if err == nil {
		*d = v
	}
	return err
}

// forget has the rest of the chain forget k (the store's Delete) within
// the budget, as decide does for decisions.
func (b *budget) forget(ctx context.Context, k store.Key) error {
	end := time.Now().Add(b.timeout)
	if dl, ok := ctx.Deadline(); !ok || dl.After(end) {
		var cancel context.CancelFunc
		ctx, _, cancel = b.within(ctx, end)
		defer cancel()
	}
	if !b.detach {
		return b.next.forget(ctx, k)
	}
	_, err := ctxaware.Detached(ctx, "ratelimit: ", func(ctx context.Context) (struct{}, error) { return struct{}{}, b.next.forget(ctx, k) })
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

// storesFault makes a budget that ran out the store's fault (storeFault).
func (e *budgetError) storesFault() {}

// Is reports context.DeadlineExceeded, whatever the client made of the
// deadline (go-redis returns its socket's i/o timeout).
func (e *budgetError) Is(target error) bool { return target == context.DeadlineExceeded }

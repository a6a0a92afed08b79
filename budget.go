package ratelimit

import (
	"context"
	"fmt"
	"time"

	"github.com/ratelimitkit/ratelimit/algorithms"
)

// WithStoreTimeout gives every store call a time budget of d, whatever the
// caller's context allows: a call still running after d is abandoned and
// counts as a store failure (its error wraps context.DeadlineExceeded), so a
// store that hangs adds at most d to a decision. The caller's context still
// ends the call sooner when it ends first; that is not a store failure.
//
// The budget reaches the store as the context's deadline, which every
// store honours (the conformance suite checks it). With go-redis, create
// the client with ContextTimeoutEnabled: true, or its own read and write
// timeouts bound the call instead.
func WithStoreTimeout(d time.Duration) Option {
	return func(l *Limiter) error {
		if d <= 0 {
			return fmt.Errorf("%w: store timeout %v must be positive", ErrInvalidParams, d)
		}
		guardOf(l).timeout = d
		return nil
	}
}

// budgeted asks the store at tier t within the guard's time budget, if it
// has one.
func (l *Limiter) budgeted(ctx context.Context, t *Tier, k Key, req algorithms.Request) (Decision, error) {
	budget := l.guard.timeout
	if budget == 0 {
		return l.fromStore(ctx, t, k, req)
	}
	sctx, cancel := context.WithTimeout(ctx, budget)
	d, err := l.fromStore(sctx, t, k, req)
	cancel()
	if err != nil && ctx.Err() == nil && sctx.Err() != nil {
		err = fmt.Errorf("ratelimit: store call exceeded its %v budget: %w", budget, err)
	}
	return d, err
}

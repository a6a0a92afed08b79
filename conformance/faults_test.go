package conformance_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/ratelimitkit/ratelimit"
	"github.com/ratelimitkit/ratelimit/algorithms"
	"github.com/ratelimitkit/ratelimit/conformance"
	"github.com/ratelimitkit/ratelimit/lease"
	"github.com/ratelimitkit/ratelimit/store"
)

// The fault groups test a store together with the SDK's limiter and locker.
// To prove that they can fail, the suite's own tests give them broken
// subjects, each with one defect the issue found in the field, built on the
// real ones; and brokenStore (conformance_test.go) has a freezable backend
// that ignores its context under the defect "context-ignored".

// useBrokenSubject replaces the fault groups' subject for defect, and
// reports whether defect names one.
func useBrokenSubject(defect string) bool {
	switch defect {
	case "do-no-deadline-check":
		conformance.SetLocker(func(s store.Store, ttl time.Duration, opts ...lease.Option) (conformance.Locker, error) {
			lk, err := lease.New(s, ttl, opts...)
			return naiveDo{lk}, err
		})
	case "breaker-blames-caller":
		conformance.SetBreakerLimiter(func(s store.Store, alg algorithms.Algorithm, failures int, coolDown time.Duration, opts ...ratelimit.Option) (conformance.Limiter, error) {
			lim, err := ratelimit.New(s, alg, opts...)
			return &blamingBreaker{Limiter: lim, threshold: failures}, err
		})
	case "quota-keeps-share":
		useBrokenQuota()
	default:
		return false
	}
	return true
}

// naiveDo is a locker whose Do forgets the lease's deadline: it starts the
// work whenever the acquire returns, neither renews nor cancels, and
// releases only when the work returns normally.
type naiveDo struct{ *lease.Locker }

func (l naiveDo) Do(ctx context.Context, key string, fn func(ctx context.Context, le *lease.Lease) error) error {
	le, err := l.Acquire(ctx, key)
	if err != nil {
		return err
	}
	err = fn(ctx, le)
	return errors.Join(err, le.Release(ctx))
}

// blamingBreaker is a limiter with a circuit breaker (fail open, for ever)
// that counts every error as the store's while the caller's context has not
// reported Done: the defect the issue found in the SDK's own breaker, where
// a caller's deadline reaches it as the store's error first.
type blamingBreaker struct {
	*ratelimit.Limiter
	threshold int

	mu       sync.Mutex
	failures int
	open     error
}

func (b *blamingBreaker) Allow(ctx context.Context, key string) (ratelimit.Decision, error) {
	b.mu.Lock()
	open := b.open
	b.mu.Unlock()
	if open != nil {
		return ratelimit.Decision{Allowed: true, Source: ratelimit.SourceFailurePolicy}, open
	}
	d, err := b.Limiter.Allow(ctx, key)
	b.mu.Lock()
	defer b.mu.Unlock()
	switch {
	case err != nil && ctx.Err() == nil:
		if b.failures++; b.failures >= b.threshold {
			b.open = fmt.Errorf("%w: %w", ratelimit.ErrCircuitOpen, err)
		}
	case err == nil:
		b.failures = 0
	}
	return d, err
}

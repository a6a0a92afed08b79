package ratelimit

import (
	"context"
	"fmt"
	"time"

	"github.com/ratelimitkit/ratelimit/algorithms"
	"github.com/ratelimitkit/ratelimit/store"
)

// WithFallback makes the limiter decide locally while its store fails,
// instead of admitting or denying everything: the same algorithm runs on
// store (normally a memory.Store of its own, bounded with
// memory.WithMaxKeys) with its numbers divided by replicas, the number of
// processes that share the limit (algorithms.Divide says how each
// algorithm divides). Such decisions have Source SourceFallback and come
// with the store's error.
//
// The fallback is approximate by nature: each replica enforces its share
// alone, so uneven traffic sees less than the whole limit, rounding gives
// each replica at least one unit per period, and what was consumed in the
// store before the outage is not known locally (nor the reverse when the
// store returns). It is meant to keep a service up and its limit roughly
// enforced for the length of an outage.
//
// It answers only for a store at fault: not when the caller's context has
// ended, nor for state the algorithm cannot read (ErrCorruptState), nor
// when the fallback store itself fails; the failure policy decides those.
// A request whose cost exceeds the fallback's share of the burst is
// denied, with a RetryAfter of the time the store's error says it will not
// be called, or else one second. A tier (Limiter.Tier) falls back to its
// own numbers divided the same way.
//
// The fallback keeps its state under the limiter's namespace: give it a
// store of its own, not the limiter's store. An algorithm that is neither
// built in nor algorithms.Divisible is an error wrapping ErrInvalidParams.
func WithFallback(st store.Store, replicas int) Option {
	return func(l *Limiter) error {
		if isNil(st) {
			return fmt.Errorf("%w: nil fallback store", ErrInvalidParams)
		}
		if err := checkPositive("fallback replicas", replicas); err != nil {
			return err
		}
		return l.addLink(fallbackLink, func(c *chainOf, next link) (link, error) {
			if err := checkClock(st, c.l.clock); err != nil {
				return nil, fmt.Errorf("fallback: %w", err)
			}
			f := &fallback{passForget: passForget{next}, replicas: int64(replicas)}
			f.local.init(st, c.l.alg)
			f.slot = c.perTier(f.share)
			return f, nil
		})
	}
}

// fallback is WithFallback's link: when the rest of the chain fails by the
// store's fault, it decides on its own store with each tier's share of
// the numbers, which it keeps in the tier (Tier.local[slot]).
type fallback struct {
	passForget
	local    storeLink
	replicas int64
	slot     int
}

// share returns the fallback's share of alg's numbers, as a Tier that
// local decides with.
func (f *fallback) share(alg algorithms.Algorithm) (any, error) {
	div, err := algorithms.Divide(alg, f.replicas)
	if err == nil {
		err = div.Validate()
	}
	if err != nil {
		return nil, fmt.Errorf("fallback: %w", err)
	}
	t := &Tier{alg: div, maxCost: div.MaxCost()}
	if t.maxCost <= 0 {
		return nil, fmt.Errorf("%w: fallback: %v has max cost %d", ErrInvalidParams, div, t.maxCost)
	}
	t.setNumbers()
	return t, nil
}

func (f *fallback) decide(ctx context.Context, t *Tier, k store.Key, req algorithms.Request, d *Decision) error {
	err := f.next.decide(ctx, t, k, req, d)
	if err == nil || !storeFault(ctx, err) || req.Refund {
		// A refund gives back to the store's state only: the local
		// state never took the reservation.
		return err
	}
	share := t.local[f.slot].(*Tier)
	if req.Cost > share.maxCost {
		*d = Decision{Limit: int(share.maxCost), RetryAfter: retryAfter(err), Source: SourceFallback}
		return err
	}
	if f.local.decide(ctx, share, k, req, d) == nil {
		d.Source = SourceFallback
	}
	return err
}

// forget drops k's local state, then has the rest of the chain forget it.
func (f *fallback) forget(ctx context.Context, k store.Key) error {
	_ = f.local.forget(ctx, k)
	return f.next.forget(ctx, k)
}

// retryAfter is the RetryAfter of a request only the store can admit,
// while it fails with err: the time err says the store will not be called
// (a retryError), or one second.
func retryAfter(err error) time.Duration {
	if r, ok := err.(retryError); ok {
		return r.retryAfter()
	}
	return time.Second
}

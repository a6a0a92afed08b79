package ratelimit

import (
	"context"
	"fmt"
	"time"

	"github.com/ratelimitkit/ratelimit/algorithms"
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
// The failure policy still applies where the fallback cannot answer: when
// the caller's context has ended, for state the algorithm cannot read
// (ErrCorruptState), and when the fallback store itself fails. A request
// whose cost exceeds the fallback's share of the burst is denied.
//
// The fallback keeps its state under the limiter's namespace: give it a
// store of its own, not the limiter's store. An algorithm that is neither
// built in nor algorithms.Divisible is an error wrapping ErrInvalidParams.
func WithFallback(store Store, replicas int) Option {
	return func(l *Limiter) error {
		if isNil(store) {
			return fmt.Errorf("%w: nil fallback store", ErrInvalidParams)
		}
		if err := checkPositive("fallback replicas", replicas); err != nil {
			return err
		}
		guardOf(l).fallback = &fallback{store: store, replicas: int64(replicas)}
		return nil
	}
}

// fallback is the local limiter of WithFallback. Each Tier of the limiter
// holds its share of the tier's numbers as a Tier of lim (Tier.fb).
type fallback struct {
	store    Store
	replicas int64
	lim      *Limiter // a plain limiter (no guard) on store, in l's namespace
}

func (f *fallback) init(l *Limiter) error {
	alg, err := algorithms.Divide(l.alg, f.replicas)
	if err != nil {
		return fmt.Errorf("fallback: %w", err)
	}
	if f.lim, err = New(f.store, alg, WithClock(l.clock)); err != nil {
		return err
	}
	f.lim.ns = l.ns
	return nil
}

// tier returns the fallback's share of alg's numbers, a tier of f.lim.
func (f *fallback) tier(alg algorithms.Algorithm) (*Tier, error) {
	share, err := algorithms.Divide(alg, f.replicas)
	if err != nil {
		return nil, fmt.Errorf("fallback: %w", err)
	}
	return f.lim.Tier(share)
}

// fallbackDecide asks the fallback store, at fb (a tier of the fallback
// limiter), into d, and reports false when it cannot answer. retry is the
// RetryAfter of a request above the fallback's burst, which only the store
// can admit.
func fallbackDecide(ctx context.Context, fb *Tier, k Key, req algorithms.Request, retry time.Duration, d *Decision) bool {
	if req.Cost > fb.maxCost {
		*d = Decision{Limit: int(fb.maxCost), RetryAfter: retry, Source: SourceFallback}
		return true
	}
	fd, err := fb.l.fromStore(ctx, fb, k, req)
	if err != nil {
		return false
	}
	*d = fd
	d.Source = SourceFallback
	return true
}

// forget drops key's local state.
func (f *fallback) forget(ctx context.Context, key string) {
	_ = f.lim.store.Delete(ctx, Key{Namespace: f.lim.ns, ID: key})
}

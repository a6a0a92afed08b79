package ratelimit

import (
	"context"
	"fmt"
	"time"

	"github.com/ratelimitkit/ratelimit/algorithms"
)

// guard is what a limiter does around its store when it has a store
// budget (by default, on every store but the memory store: see
// initTimeout) or any of the options for failures, the deny cache, shadow
// mode or the observer is set. A limiter with none of them (one on the
// memory store without options) has a nil guard and decides exactly as
// before: validate, ask the store, apply the failure policy.
//
// Each mechanism lives in its own file: budget.go (WithStoreTimeout),
// breaker.go (WithCircuitBreaker), fallback.go (WithFallback),
// denycache.go (WithDenyCache), shadow.go (WithShadow) and observer.go
// (WithObserver). This file puts them in order.
type guard struct {
	timeout  time.Duration // per store call; 0 means none
	breaker  *breaker
	fallback *fallback
	deny     *denyCache
	shadow   bool
	observer Observer

	// Set by init.
	label     string        // the limiter's name, for events
	algorithm string        // the algorithm's name, for events
	maxCost   int64         // the limiter's, for decisions without figures
	retry     time.Duration // RetryAfter of a denial whose real wait is unknown
}

// guardOf returns l's guard, creating it for the first option that needs it.
func guardOf(l *Limiter) *guard {
	if l.guard == nil {
		l.guard = &guard{}
	}
	return l.guard
}

// init finishes the guard once every option has run and the namespace is
// known: name is the limiter's name, given or derived.
func (g *guard) init(l *Limiter, name string) error {
	g.label, g.algorithm, g.maxCost = name, l.alg.Name(), l.maxCost
	g.retry = time.Second
	if g.breaker != nil {
		g.retry = time.Duration(g.breaker.coolDown) * time.Microsecond
	}
	if g.fallback != nil {
		if err := g.fallback.init(l); err != nil {
			return err
		}
		l.own.fb = &g.fallback.lim.own
	}
	return nil
}

// guarded decides k's request at tier t with the guard's mechanisms, in
// this order: the deny cache, the circuit breaker, the store (within its
// time budget), and on a store failure the fallback or the failure policy;
// then shadow mode, then the observer.
func (l *Limiter) guarded(ctx context.Context, t *Tier, k Key, req algorithms.Request) (Decision, error) {
	g := l.guard
	var (
		d       Decision
		err     error
		called  bool
		latency time.Duration
	)
	switch {
	case g.deny != nil && g.deny.lookup(k.ID, t, req, &d):
	case g.breaker != nil && !g.breaker.allow(req.Now):
		// The store is not called: this is the path whose cost
		// BenchmarkOutageRatio holds to a memory-store decision's.
		// The fallback's common case is inlined here; degraded has the
		// rest (a cost above the fallback's burst, a caller whose context
		// has ended, which the fallback store reports as every store must).
		err = g.breaker.openError()
		if fb := t.fb; fb != nil && req.Cost <= fb.maxCost {
			var ferr error
			if d, ferr = fb.l.fromStore(ctx, fb, k, req); ferr == nil {
				d.Source = SourceFallback
				break
			}
		}
		d = l.degraded(ctx, t, k, req, err, ctx.Err() == nil)
	default:
		called = true
		var start time.Time
		if g.observer != nil {
			start = time.Now()
		}
		d, err = l.budgeted(ctx, t, k, req)
		if g.observer != nil {
			latency = time.Since(start)
		}
		if g.breaker != nil {
			g.breaker.record(ctx, req.Now, err)
		}
		if err != nil {
			d = l.degraded(ctx, t, k, req, err, storeFault(ctx, err))
		} else if g.deny != nil && !d.Allowed {
			g.deny.remember(k.ID, t, req, d)
		}
	}
	allowed := d.Allowed
	if g.shadow && !d.Allowed {
		d.Allowed, d.Shadowed = true, true
	}
	if g.observer != nil {
		g.observer.ObserveDecision(ctx, Event{
			Limiter:      g.label,
			Algorithm:    g.algorithm,
			Key:          k.ID,
			Cost:         int(req.Cost),
			Peek:         req.Peek,
			Allowed:      allowed,
			Decision:     d,
			CalledStore:  called,
			StoreLatency: latency,
			Err:          err,
		})
	}
	return d, err
}

// degraded is the decision at tier t for a request the store did not
// decide (err says why): the fallback's when there is one and the store is
// at fault (fault), not the caller or the key's data; the failure policy's
// otherwise.
func (l *Limiter) degraded(ctx context.Context, t *Tier, k Key, req algorithms.Request, err error, fault bool) Decision {
	var d Decision
	if t.fb == nil || !fault || !fallbackDecide(ctx, t.fb, k, req, l.guard.retry, &d) {
		d, _ = l.failed(t, err)
	}
	return d
}

// storeFault reports whether err, returned by a store call made under ctx,
// is the store's fault: not the caller's context ending, and not state the
// algorithm cannot read (which a working store returned). A caller whose
// deadline has passed on the monotonic clock is taken to have given up
// even before its context says so: a client that set its socket's deadline
// from the context, or a batch sent under its callers' latest deadline
// (the Redis and Valkey stores), may hand back the error before the
// context's timer fires. A budget that ran out (budgetError) ran out before
// the caller's deadline, so it is the store's fault.
func storeFault(ctx context.Context, err error) bool {
	if err == nil || ctx.Err() != nil || notStoresFault(err) {
		return false
	}
	if _, budget := err.(*budgetError); budget {
		return true
	}
	dl, ok := ctx.Deadline()
	return !ok || time.Now().Before(dl)
}

// forget drops what the guard holds locally about key, for Reset.
func (g *guard) forget(ctx context.Context, key string) {
	if g.deny != nil {
		g.deny.forget(key)
	}
	if g.fallback != nil {
		g.fallback.forget(ctx, key)
	}
}

// checkPositive is the check shared by the options that take a count.
func checkPositive(what string, n int) error {
	if n < 1 {
		return fmt.Errorf("%w: %s %d must be at least 1", ErrInvalidParams, what, n)
	}
	return nil
}

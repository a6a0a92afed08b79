package ratelimit

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/ratelimitkit/ratelimit/algorithms"
	"github.com/ratelimitkit/ratelimit/store"
)

// Observer is told about every decision a limiter makes, for metrics,
// logs or traces. ObserveDecision runs on the deciding goroutine, after the
// decision and before it is returned, so it must be quick and must not
// block; it may be called concurrently. It is not called for calls
// rejected as bad input (a bad key, cost or clock reading), nor for a
// Reservation's Cancel, which decide nothing. A reservation
// (Limiter.Reserve) is a decision like any other.
//
// A limiter without an observer pays nothing for the hook: no clock reads,
// no allocations (BenchmarkObserver measures both).
type Observer interface {
	ObserveDecision(ctx context.Context, e Event)
}

// Event describes one decision, for an Observer.
type Event struct {
	// Limiter is the limiter's name: the one given to WithName, or the
	// name derived from its algorithm and numbers.
	Limiter string
	// Algorithm is the algorithm's name, such as "gcra".
	Algorithm string
	// Key is the caller's key. Metrics should not use it as a label: keys
	// are unbounded.
	Key string
	// Cost is the request's cost; Peek reports a Peek, which consumes
	// nothing.
	Cost int
	Peek bool
	// Allowed is the limit's answer. It differs from Decision.Allowed only
	// in shadow mode, where a denial is returned as allowed.
	Allowed bool
	// Decision is what the caller gets; Decision.Source says where it came
	// from.
	Decision Decision
	// CalledStore reports whether the decision called the store (the deny
	// cache and an open circuit breaker spare it), and StoreLatency how
	// long the decision took from the observer's hook on when it did,
	// failed or not: the store call, and the in-process steps beside it
	// (a fallback's, after a failure).
	CalledStore  bool
	StoreLatency time.Duration
	// Err is the error returned with the decision: the store's failure, or
	// ErrCircuitOpen; nil when the store answered.
	Err error
}

// WithObserver has o told about every decision the limiter makes. A nil o
// or a nil pointer in o, which would panic on the first decision, is an
// error wrapping ErrInvalidParams.
func WithObserver(o Observer) Option {
	return func(l *Limiter) error {
		if isNil(o) {
			return fmt.Errorf("%w: nil observer", ErrInvalidParams)
		}
		return l.addLink(observerLink, func(c *chainOf, next link) (link, error) {
			return &observed{passForget{next}, o, c.name(), c.l.alg.Name()}, nil
		})
	}
}

// observed is WithObserver's link: it tells its observer of the decision
// the rest of the chain made.
type observed struct {
	passForget
	o         Observer
	limiter   string
	algorithm string
}

func (ob *observed) decide(ctx context.Context, t *Tier, k store.Key, req algorithms.Request, d *Decision) error {
	if req.Refund {
		return ob.next.decide(ctx, t, k, req, d)
	}
	start := time.Now()
	err := ob.next.decide(ctx, t, k, req, d)
	latency := time.Since(start)
	called := d.Source != SourceDenyCache && !errors.Is(err, ErrCircuitOpen)
	if !called {
		latency = 0
	}
	ob.o.ObserveDecision(ctx, Event{
		Limiter:      ob.limiter,
		Algorithm:    ob.algorithm,
		Key:          k.ID,
		Cost:         int(req.Cost),
		Peek:         req.Peek,
		Allowed:      d.Allowed && !d.Shadowed,
		Decision:     *d,
		CalledStore:  called,
		StoreLatency: latency,
		Err:          err,
	})
	return err
}

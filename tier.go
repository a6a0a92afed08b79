package ratelimit

import (
	"context"
	"errors"
	"fmt"
	"reflect"

	"github.com/ratelimitkit/ratelimit/algorithms"
	"github.com/ratelimitkit/ratelimit/algorithms/forms"
)

// Tier is a Limiter deciding with other numbers for its algorithm: a
// user's plan, say, where the free plan allows 10 requests a minute and
// the paid one 1,000. Make one with Limiter.Tier for each plan, once, at
// start-up, and call its Allow for the requests it applies to. Its
// methods are the Limiter's deciding methods, with the same signatures and
// documented there; Reset and everything else that acts on the limiter as
// a whole stay on the Limiter.
//
// A key has one state under its limiter, whatever tier decides for it: a
// Tier uses the limiter's store, namespace, clock and options (failure
// policy, fallback, deny cache, shadow mode, observer), and only the
// numbers differ. So a key that changes plan keeps what it has consumed,
// measured by the new numbers: each algorithm carries its state across the
// change in its own way, which docs/tiers.md spells out.
//
// A Tier rather than numbers passed to each call: Limiter.Tier checks the
// numbers and prepares what the options keep for them once, so a plan the
// limiter cannot use is an error at start-up rather than on a request, and
// a decision at a tier costs what one at the limiter's own numbers does
// (docs/tiers.md compares both call sites).
//
// The zero Tier and a nil *Tier decide nothing: their methods return an
// error wrapping ErrInvalidParams. A Tier is safe for concurrent use.
type Tier struct {
	l       *Limiter
	alg     algorithms.Algorithm
	maxCost int64
	// local holds what the links of the limiter's chain keep for these
	// numbers, each at the index it registered (chainOf.perTier).
	local []any
	// policy is alg's Policy when alg is a built-in algorithm (whose
	// Policy determines its decisions), for sameNumbers; builtin says so.
	policy  algorithms.Policy
	builtin bool
	// to is alg as an forms.ToDecider, or nil (see toDecider).
	to forms.ToDecider
}

// Tier returns a view of l that decides with alg's numbers instead of the
// limiter's own, on the same keys and state.
//
// alg must be the limiter's algorithm with other numbers: the same Go type
// and the same Name (algorithms.GCRA for a GCRA limiter, say), since the
// state in the store is that algorithm's. Another algorithm, or one whose
// numbers are unusable (Validate fails, or its MaxCost is below 1), is an
// error wrapping ErrInvalidParams; so is an algorithm that a fallback
// (WithFallback) cannot divide between replicas.
func (l *Limiter) Tier(alg algorithms.Algorithm) (*Tier, error) {
	if isNil(alg) {
		return nil, fmt.Errorf("%w: nil tier algorithm", ErrInvalidParams)
	}
	if got, want := reflect.TypeOf(alg), reflect.TypeOf(l.alg); got != want || alg.Name() != l.alg.Name() {
		return nil, fmt.Errorf("%w: tier algorithm %s (%v) is not the limiter's %s (%v): a tier changes the numbers, not the algorithm, whose state the store holds; use a limiter per algorithm",
			ErrInvalidParams, alg.Name(), got, l.alg.Name(), want)
	}
	if err := alg.Validate(); err != nil {
		if !errors.Is(err, ErrInvalidParams) {
			err = fmt.Errorf("%w: tier %v: %w", ErrInvalidParams, alg, err)
		}
		return nil, err
	}
	t := &Tier{l: l, alg: alg, maxCost: alg.MaxCost()}
	if t.maxCost <= 0 {
		return nil, fmt.Errorf("%w: tier algorithm %v has max cost %d", ErrInvalidParams, alg, t.maxCost)
	}
	t.setNumbers()
	var err error
	if t.local, err = l.tierLocal(alg); err != nil {
		return nil, err
	}
	return t, nil
}

// setNumbers records what sameNumbers compares, and alg as a ToDecider.
func (t *Tier) setNumbers() {
	t.to, _ = t.alg.(forms.ToDecider)
	if ps, ok := t.alg.(algorithms.PolicyStater); ok && forms.BuiltinOf(t.alg) != nil {
		t.policy, t.builtin = ps.Policy(), true
	}
}

// sameNumbers reports whether t and u, tiers of one limiter, are known to
// make the same decisions: they are the same tier, or built-in algorithms
// with the same numbers.
func (t *Tier) sameNumbers(u *Tier) bool {
	return t == u || t.builtin && u.builtin && t.policy == u.policy
}

// errNoTier is returned by the methods of a nil or zero Tier.
var errNoTier = fmt.Errorf("%w: nil or zero Tier (make one with Limiter.Tier)", ErrInvalidParams)

// usable reports whether t was made by Limiter.Tier.
func (t *Tier) usable() bool { return t != nil && t.l != nil }

// Limiter returns the limiter t belongs to.
func (t *Tier) Limiter() *Limiter {
	if !t.usable() {
		return nil
	}
	return t.l
}

// Algorithm returns the algorithm with t's numbers.
func (t *Tier) Algorithm() algorithms.Algorithm {
	if !t.usable() {
		return nil
	}
	return t.alg
}

// Policy is Limiter.Policy at t's numbers.
func (t *Tier) Policy() (algorithms.Policy, bool) {
	if !t.usable() {
		return algorithms.Policy{}, false
	}
	ps, ok := t.alg.(algorithms.PolicyStater)
	if !ok {
		return algorithms.Policy{}, false
	}
	return ps.Policy(), true
}

// Allow is Limiter.Allow at t's numbers.
func (t *Tier) Allow(ctx context.Context, key string) (d Decision, err error) {
	if !t.usable() {
		return d, errNoTier
	}
	err = t.l.decide(ctx, t, key, 1, false, &d)
	return d, err
}

// AllowN is Limiter.AllowN at t's numbers: a cost above t's algorithm's
// MaxCost, whatever the limiter's own, is an error wrapping ErrInvalidCost.
func (t *Tier) AllowN(ctx context.Context, key string, n int) (d Decision, err error) {
	if !t.usable() {
		return d, errNoTier
	}
	err = t.l.decide(ctx, t, key, n, false, &d)
	return d, err
}

// Peek is Limiter.Peek at t's numbers.
func (t *Tier) Peek(ctx context.Context, key string) (d Decision, err error) {
	if !t.usable() {
		return d, errNoTier
	}
	err = t.l.decide(ctx, t, key, 1, true, &d)
	return d, err
}

// Wait is Limiter.Wait at t's numbers.
func (t *Tier) Wait(ctx context.Context, key string) (Decision, error) {
	return t.WaitN(ctx, key, 1)
}

// WaitN is Limiter.WaitN at t's numbers.
func (t *Tier) WaitN(ctx context.Context, key string, n int) (Decision, error) {
	if !t.usable() {
		return Decision{}, errNoTier
	}
	return t.l.wait(ctx, t, key, n)
}

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
// the paid one 1,000. Make one with Limiter.Tier for each set of numbers
// (once, at start-up, for a fixed set of plans; or per call for numbers
// read from a database) and call its Allow, AllowN, Peek or Wait for the
// requests it applies to. Allow is the method most callers want.
//
// A key has one state under its limiter, whatever tier decides for it: a
// Tier uses the limiter's store, namespace, clock and options (failure
// policy, fallback, deny cache, shadow mode, observer), and only the
// numbers differ. So a key that changes plan keeps what it has consumed,
// measured by the new numbers: each algorithm carries its state across the
// change in its own way, which docs/tiers.md spells out.
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

// Policy returns t's numbers (see algorithms.Policy), and false when the
// algorithm does not state them (a user's algorithm that does not
// implement algorithms.PolicyStater).
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

// Allow reports whether key may make one request now under t's numbers,
// and consumes it if so. See Limiter.Allow.
func (t *Tier) Allow(ctx context.Context, key string) (d Decision, err error) {
	if !t.usable() {
		return d, errNoTier
	}
	err = t.l.decide(ctx, t, key, 1, false, &d)
	return d, err
}

// AllowN reports whether key may make a request of cost n now under t's
// numbers, and consumes n if so. A cost above t's algorithm's MaxCost is an
// error wrapping ErrInvalidCost. See Limiter.AllowN.
func (t *Tier) AllowN(ctx context.Context, key string, n int) (d Decision, err error) {
	if !t.usable() {
		return d, errNoTier
	}
	err = t.l.decide(ctx, t, key, n, false, &d)
	return d, err
}

// Peek reports whether key could make one request now under t's numbers,
// and what remains, without consuming anything.
func (t *Tier) Peek(ctx context.Context, key string) (d Decision, err error) {
	if !t.usable() {
		return d, errNoTier
	}
	err = t.l.decide(ctx, t, key, 1, true, &d)
	return d, err
}

// Wait blocks until key may make one request under t's numbers, consumes
// it, and returns the decision. See Limiter.WaitN.
func (t *Tier) Wait(ctx context.Context, key string) (Decision, error) {
	return t.WaitN(ctx, key, 1)
}

// WaitN blocks until key may make a request of cost n under t's numbers,
// consumes it, and returns the decision. See Limiter.WaitN.
func (t *Tier) WaitN(ctx context.Context, key string, n int) (Decision, error) {
	if !t.usable() {
		return Decision{}, errNoTier
	}
	return t.l.wait(ctx, t, key, n)
}

// Reset forgets key's state, as Limiter.Reset does: the state is the
// limiter's, shared by all its tiers.
func (t *Tier) Reset(ctx context.Context, key string) error {
	if !t.usable() {
		return errNoTier
	}
	return t.l.Reset(ctx, key)
}

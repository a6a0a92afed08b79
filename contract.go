package ratelimit

import (
	"fmt"

	"github.com/ratelimitkit/ratelimit/algorithms"
	"github.com/ratelimitkit/ratelimit/algorithms/forms"
)

// checkStep holds st, the step alg returned for req, to the contract every
// built-in algorithm keeps (see algorithms.Step and algorithms.Decision),
// so that a user's algorithm decides the same on every store: a store that
// is handed a TTL of 0 or a new state on a peek would otherwise fail, raise
// the TTL or write the state, each in its own way. It returns nil for a
// step that keeps the contract, and otherwise an error wrapping
// ErrInvalidParams that names the algorithm and what it broke:
//
//   - a peek returns no new state (it must not consume);
//   - new state carries a TTL of 1 to algorithms.MaxExact/2 µs (every key
//     written expires, and the expiry stays exact);
//   - the decision's Remaining is within 0..Limit, RetryAfter is 0 on an
//     admission and positive on a denial (a client told to retry after 0
//     retries at once), ResetAfter and Delay are not negative; the same for
//     each part of a composite.
//
// The Limiter runs it on every step of the Update path (Limiter.update),
// before the store writes anything; the built-in algorithms keep the
// contract by construction, and their server forms are held to their Go
// forms by the conformance suite.
func checkStep(alg algorithms.Algorithm, req algorithms.Request, st *algorithms.Step) error {
	if st.Next != nil {
		if req.Peek {
			return stepError(alg, "returned new state on a peek (a peek must not consume)")
		}
		if st.TTL < 1 || st.TTL > algorithms.MaxExact/2 {
			return stepError(alg, fmt.Sprintf("returned new state with TTL %d µs, want 1 to %d (every state written expires)", st.TTL, int64(algorithms.MaxExact/2)))
		}
	}
	if what := checkDecision(&st.Decision); what != "" {
		return stepError(alg, what)
	}
	for i := range st.Decision.Parts {
		if what := checkDecision(&st.Decision.Parts[i]); what != "" {
			return stepError(alg, fmt.Sprintf("limit %d: %s", i+1, what))
		}
	}
	return nil
}

// checkDecision returns what d breaks of the decision's contract, or "".
func checkDecision(d *algorithms.Decision) string {
	switch {
	case d.Remaining < 0 || d.Remaining > d.Limit:
		return fmt.Sprintf("decided remaining %d outside 0..limit %d", d.Remaining, d.Limit)
	case d.Allowed && d.RetryAfter != 0:
		return fmt.Sprintf("admitted with retry-after %d µs, want 0", d.RetryAfter)
	case !d.Allowed && d.RetryAfter <= 0:
		return fmt.Sprintf("denied with retry-after %d µs, want more than 0 (a client would retry at once)", d.RetryAfter)
	case d.ResetAfter < 0:
		return fmt.Sprintf("decided reset-after %d µs, want 0 or more", d.ResetAfter)
	case d.Delay < 0:
		return fmt.Sprintf("decided delay %d µs, want 0 or more", d.Delay)
	}
	return ""
}

// stepError is checkStep's error for alg breaking the contract by what.
func stepError(alg algorithms.Algorithm, what string) error {
	return fmt.Errorf("%w: algorithm %s (%T) %s", ErrInvalidParams, alg.Name(), alg, what)
}

// ownAlgorithm reports whether alg is a user's algorithm, or a composite
// holding one: no store has a server form for it, and the Limiter runs it
// through Update, where checkStep holds every step to the contract, on
// every store (the memory store's Decider, which would run it too, is not
// used for it).
func ownAlgorithm(alg algorithms.Algorithm) bool {
	if c, ok := alg.(algorithms.Composite); ok {
		for _, p := range c.Parts() {
			if ownAlgorithm(p) {
				return true
			}
		}
		return false
	}
	return forms.BuiltinOf(alg) == nil
}

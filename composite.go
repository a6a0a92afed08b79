package ratelimit

import (
	"time"

	"github.com/ratelimitkit/ratelimit/algorithms"
)

// DecisionFrom returns the Decision a limiter reports for an algorithm's
// decision a made by its store: the durations converted from
// microseconds, Source set to SourceStore, and Limits filled from a
// composite's part decisions (a.Parts). Tests that hold a store to an
// algorithm's Go form compare with it.
func DecisionFrom(a algorithms.Decision) Decision {
	var d Decision
	_ = d.set(a, nil)
	return d
}

// limitsOf converts a composite's part decisions into Decision.Limits.
func limitsOf(parts []algorithms.Decision) []LimitDecision {
	out := make([]LimitDecision, len(parts))
	for i, p := range parts {
		out[i] = LimitDecision{
			Allowed:    p.Allowed,
			Limit:      int(p.Limit),
			Remaining:  int(p.Remaining),
			RetryAfter: time.Duration(p.RetryAfter) * time.Microsecond,
			ResetAfter: time.Duration(p.ResetAfter) * time.Microsecond,
			Delay:      time.Duration(p.Delay) * time.Microsecond,
		}
	}
	return out
}

// set makes d the store's Decision for the algorithm's decision a, unless
// err is set, and returns err. It is not inlined so that a and err arrive
// in registers and are read field by field: a Decision has too many fields
// for the compiler to keep in registers, and the copy it makes of a struct
// written field by field costs a stall on the hot path.
//
//go:noinline
func (d *Decision) set(a algorithms.Decision, err error) error {
	if err != nil {
		return err
	}
	d.setFields(a.Allowed, a.Limit, a.Remaining, a.RetryAfter, a.ResetAfter, a.Delay)
	if a.Parts != nil {
		d.Limits = limitsOf(a.Parts)
	}
	return nil
}

// setFields makes d the store's Decision for a single algorithm's decision
// with these fields (durations in microseconds); its Limits is nil.
func (d *Decision) setFields(allowed bool, limit, remaining, retryAfter, resetAfter, delay int64) {
	d.Allowed = allowed
	d.Limit = int(limit)
	d.Remaining = int(remaining)
	d.RetryAfter = time.Duration(retryAfter) * time.Microsecond
	d.ResetAfter = time.Duration(resetAfter) * time.Microsecond
	d.Delay = time.Duration(delay) * time.Microsecond
	d.Source = SourceStore
	d.Limits = nil
}

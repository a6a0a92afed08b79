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

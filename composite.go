package ratelimit

import (
	"time"

	"github.com/ratelimitkit/ratelimit/algorithms"
)

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

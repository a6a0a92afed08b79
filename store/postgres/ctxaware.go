package postgres

import "github.com/ratelimitkit/ratelimit/internal/ctxaware"

// The store gives up when a call's context ends (the conformance suite's
// Context and FaultHungStore groups check it), so limiters and lockers call
// it directly, not on a goroutine of their own.
func init() { ctxaware.Declare((*Store)(nil)) }

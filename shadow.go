package ratelimit

// WithShadow puts the limiter in shadow mode, for rolling out a new limit
// safely: it decides as usual (store, fallback, deny cache, failure policy),
// consumes what an enforcing limiter would consume, and reports the
// decision, but never denies. A request the limit denies comes back with
// Allowed true and Shadowed true, its other fields (RetryAfter included)
// those of the denial, so the caller can log what enforcing would do. The
// observer sees the limit's own answer (Event.Allowed false), so metrics
// count shadow denials as denials.
//
// Store errors are still returned, and in shadow mode a failing store is
// never a reason to deny either: the failure policy's denial is shadowed
// like any other.
func WithShadow() Option {
	return func(l *Limiter) error {
		guardOf(l).shadow = true
		return nil
	}
}

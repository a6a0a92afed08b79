package ratelimit

import (
	"context"

	"github.com/ratelimitkit/ratelimit/algorithms"
	"github.com/ratelimitkit/ratelimit/store"
)

// WithShadow puts the limiter in shadow mode, for rolling out a new limit
// safely: it decides and consumes as an enforcing limiter would, and
// reports the decision, but never denies. A request the limit denies, for
// whatever reason (a failing store included), comes back with Allowed true
// and Shadowed true, its other fields (RetryAfter included) those of the
// denial, so the caller can log what enforcing would do. Errors are still
// returned.
func WithShadow() Option {
	return func(l *Limiter) error {
		return l.addLink(shadowLink, func(_ *chainOf, next link) (link, error) {
			return shadow{passForget{next}}, nil
		})
	}
}

// shadow is WithShadow's link.
type shadow struct{ passForget }

func (s shadow) decide(ctx context.Context, t *Tier, k store.Key, req algorithms.Request, d *Decision) error {
	err := s.next.decide(ctx, t, k, req, d)
	if !d.Allowed {
		d.Allowed, d.Shadowed = true, true
	}
	return err
}

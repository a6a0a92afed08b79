package ratelimit

import (
	"context"

	"github.com/ratelimitkit/ratelimit/store"

	"github.com/ratelimitkit/ratelimit/algorithms"
	"github.com/ratelimitkit/ratelimit/algorithms/forms"
	"github.com/ratelimitkit/ratelimit/internal/fastpath"
)

// toDecider decides, for an forms.ToDecider, with the decision's fields
// as results (the memory store's, which it registers with
// internal/fastpath, so that no exported method exists for it alone): a
// Limiter prefers it, as the fields travel in registers, where a Decision
// returned by value is copied through memory, a noticeable part of a
// decision made in process. Its errors are Decide's.
type toDecider = func(ctx context.Context, key store.Key, alg forms.ToDecider, req algorithms.Request) (allowed bool, limit, remaining, retryAfter, resetAfter, delay int64, err error)

// toDeciderOf returns store's toDecider, or nil when it has none.
func toDeciderOf(st store.Store) toDecider {
	f, _ := fastpath.DecideTo(st).(toDecider)
	return f
}

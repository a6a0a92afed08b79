package conformance_test

import (
	"context"
	"sync"
	"time"

	"github.com/ratelimitkit/ratelimit"
	"github.com/ratelimitkit/ratelimit/algorithms"
	"github.com/ratelimitkit/ratelimit/conformance"
	"github.com/ratelimitkit/ratelimit/store"
)

// useBrokenQuota makes the LocalQuota group test keptShares, a share
// holder that keeps a share past its window and lifetime.
func useBrokenQuota() {
	conformance.SetQuotaLimiter(func(s store.Store, alg algorithms.Algorithm, maxShare int, lifetime time.Duration, opts ...ratelimit.Option) (conformance.Limiter, error) {
		lim, err := ratelimit.New(s, alg, opts...)
		return &keptShares{Limiter: lim, size: maxShare, held: map[string]int{}}, err
	})
}

// keptShares takes shares of size units through the store, as the SDK's
// local quota does, and spends them locally, but never lets one expire:
// a share taken in one window (or long ago) is spent in the next.
type keptShares struct {
	*ratelimit.Limiter
	size int

	mu   sync.Mutex
	held map[string]int
}

func (k *keptShares) Allow(ctx context.Context, key string) (ratelimit.Decision, error) {
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.held[key] > 0 {
		k.held[key]--
		return ratelimit.Decision{Allowed: true, Source: ratelimit.SourceStore}, nil
	}
	d, err := k.Limiter.AllowN(ctx, key, k.size)
	if err == nil && d.Allowed {
		k.held[key] = k.size - 1
		return d, nil
	}
	return k.Limiter.Allow(ctx, key)
}

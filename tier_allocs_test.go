//go:build !race

package ratelimit_test

import (
	"context"
	"testing"
	"time"

	"github.com/ratelimitkit/ratelimit"
	"github.com/ratelimitkit/ratelimit/algorithms"
	"github.com/ratelimitkit/ratelimit/store/memory"
)

// TestTierDoesNotAllocate checks, outside benchmarks, that a decision at a
// tier made beforehand allocates nothing on the memory store, as a
// decision at the limiter's own numbers does (TestAllowDoesNotAllocate, in
// store/memory): with no option, and with a deny cache and a fallback.
// (The race detector allocates, so this file is built without it.)
func TestTierDoesNotAllocate(t *testing.T) {
	ctx := context.Background()
	for name, opts := range map[string][]ratelimit.Option{
		"no option":                 nil,
		"deny cache and a fallback": {ratelimit.WithDenyCache(100), ratelimit.WithFallback(memory.MustNew(), 2)},
	} {
		lim, err := ratelimit.New(memory.MustNew(), algorithms.GCRA(1, time.Second, 10), opts...)
		if err != nil {
			t.Fatal(err)
		}
		for _, alg := range []algorithms.Algorithm{
			algorithms.GCRA(1, time.Second, 1e9), // admits
			algorithms.GCRA(1, time.Hour, 1),     // denies
		} {
			tier, err := lim.Tier(alg)
			if err != nil {
				t.Fatal(err)
			}
			tier.Allow(ctx, "key")
			if n := testing.AllocsPerRun(1000, func() { tier.Allow(ctx, "key") }); n != 0 {
				t.Errorf("%s: tier(%v).Allow on a held key allocates %v times per call, want 0", name, alg, n)
			}
		}
	}
}

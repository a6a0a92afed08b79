//go:build !race

package memory_test

import (
	"context"
	"testing"
	"time"

	"github.com/ratelimitkit/ratelimit"
	"github.com/ratelimitkit/ratelimit/algorithms"
	"github.com/ratelimitkit/ratelimit/store/memory"
)

// TestAllowDoesNotAllocate checks the hot path's promise outside
// benchmarks: a decision on a key the store holds allocates nothing, for
// every built-in algorithm but the sliding log, admitted or denied. (The
// race detector allocates, so this file is built without it.)
func TestAllowDoesNotAllocate(t *testing.T) {
	for _, alg := range []algorithms.Algorithm{
		algorithms.FixedWindow(1e9, time.Hour),
		algorithms.SlidingWindow(1e9, time.Hour),
		algorithms.TokenBucket(1, time.Second, 1e9),
		algorithms.LeakyBucket(1, time.Second, 1e9),
		algorithms.GCRA(1, time.Second, 1e9),
		algorithms.FixedWindow(1, time.Hour),
		algorithms.SlidingLog(1, time.Hour), // denied: the log is read, not copied
		algorithms.SlidingWindow(1, time.Hour),
		algorithms.TokenBucket(1, time.Hour, 1),
		algorithms.LeakyBucket(1, time.Hour, 1),
		algorithms.GCRA(1, time.Hour, 1),
	} {
		lim, err := ratelimit.New(memory.MustNew(), alg)
		if err != nil {
			t.Fatal(err)
		}
		ctx := context.Background()
		lim.Allow(ctx, "key")
		if n := testing.AllocsPerRun(1000, func() { lim.Allow(ctx, "key") }); n != 0 {
			t.Errorf("%v: lim.Allow on a held key allocates %v times per call, want 0", alg, n)
		}
	}
}

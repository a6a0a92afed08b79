package ratelimit_test

import (
	"context"
	"runtime"
	"testing"
	"time"

	"github.com/ratelimitkit/ratelimit"
	"github.com/ratelimitkit/ratelimit/algorithms"
	"github.com/ratelimitkit/ratelimit/internal/cputime"
	"github.com/ratelimitkit/ratelimit/store/memory"
)

// BenchmarkChain measures one decision on a hot key of the memory store
// through the path each option builds, alone: no option (the store and
// the failure policy), each option on a store that admits (and the deny
// cache on a key it denies), a tier, and the breaker open on a stopped
// Redis with a memory fallback. Comparing two builds of it, interleaved,
// is how a change to the chain is held to "no option's path gets slower"
// (docs/failures.md, "The order of things"). Besides ns/op it reports
// cpu-ns/op, the CPU time of the benchmark's thread per call (on Linux),
// which a machine shared with other work disturbs less.
func BenchmarkChain(b *testing.B) {
	nop := observerFunc(func(context.Context, ratelimit.Event) {})
	deny := algorithms.GCRA(1, time.Hour, 1)
	cases := []struct {
		name string
		alg  algorithms.Algorithm
		opts []ratelimit.Option
	}{
		{"none", admitAll, nil},
		{"failopen", admitAll, []ratelimit.Option{ratelimit.WithFailurePolicy(ratelimit.FailOpen)}},
		{"observer", admitAll, []ratelimit.Option{ratelimit.WithObserver(nop)}},
		{"shadow", deny, []ratelimit.Option{ratelimit.WithShadow()}},
		{"denycache", admitAll, []ratelimit.Option{ratelimit.WithDenyCache(1000)}},
		{"denycache-hit", deny, []ratelimit.Option{ratelimit.WithDenyCache(1000)}},
		{"fallback", admitAll, []ratelimit.Option{ratelimit.WithFallback(memory.MustNew(), 2)}},
		{"breaker", admitAll, []ratelimit.Option{ratelimit.WithCircuitBreaker(3, time.Second)}},
		{"budget", admitAll, []ratelimit.Option{ratelimit.WithStoreTimeout(time.Second)}},
		{"localquota", admitAll, []ratelimit.Option{ratelimit.WithLocalQuota(1000, time.Second)}},
		{"all", admitAll, []ratelimit.Option{ratelimit.WithObserver(nop), ratelimit.WithShadow(),
			ratelimit.WithDenyCache(1000), ratelimit.WithFallback(memory.MustNew(), 2),
			ratelimit.WithCircuitBreaker(3, time.Second)}},
	}
	ctx := context.Background()
	for _, c := range cases {
		b.Run(c.name, func(b *testing.B) {
			lim, err := ratelimit.New(memory.MustNew(), c.alg, c.opts...)
			if err != nil {
				b.Fatal(err)
			}
			lim.Allow(ctx, "key")
			loopCPU(b, func() { lim.Allow(ctx, "key") })
		})
	}
	b.Run("tier", func(b *testing.B) {
		_, tier := tierLimiters(b)
		tier.Allow(ctx, "key")
		loopCPU(b, func() { tier.Allow(ctx, "key") })
	})
	b.Run("breaker-open", func(b *testing.B) {
		_, outage := outageLimiters(b)
		loopCPU(b, func() { outage.Allow(ctx, "key") })
	})
}

// loopCPU runs call b.N times on one thread and reports, besides ns/op
// and allocations, the thread's CPU time per call (cpu-ns/op).
func loopCPU(b *testing.B, call func()) {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	b.ReportAllocs()
	start := cputime.Thread()
	for b.Loop() {
		call()
	}
	if cpu := cputime.Thread() - start; cpu > 0 {
		b.ReportMetric(float64(cpu.Nanoseconds())/float64(b.N), "cpu-ns/op")
	}
}

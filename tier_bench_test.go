package ratelimit_test

import (
	"context"
	"runtime"
	"testing"
	"time"

	"github.com/ratelimitkit/ratelimit"
	"github.com/ratelimitkit/ratelimit/algorithms"
	"github.com/ratelimitkit/ratelimit/store/memory"
)

// tierLimiters returns a limiter on the memory store with admitAll's
// numbers, and a tier of it with other numbers that also admit every
// request of the benchmark.
func tierLimiters(tb testing.TB) (*ratelimit.Limiter, *ratelimit.Tier) {
	tb.Helper()
	lim, err := ratelimit.New(memory.MustNew(), admitAll)
	if err != nil {
		tb.Fatal(err)
	}
	tier, err := lim.Tier(algorithms.GCRA(2, time.Second, 1e9))
	if err != nil {
		tb.Fatal(err)
	}
	return lim, tier
}

// BenchmarkTier measures a decision on one hot key of the memory store at
// the limiter's own numbers (Limiter.Allow) and at a tier made beforehand
// (Tier.Allow). Run it with -benchmem: neither allocates.
func BenchmarkTier(b *testing.B) {
	lim, tier := tierLimiters(b)
	ctx := context.Background()
	for name, allow := range map[string]func(context.Context, string) (ratelimit.Decision, error){
		"own":  lim.Allow,
		"tier": tier.Allow,
	} {
		b.Run(name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				allow(ctx, "key")
			}
		})
	}
}

// BenchmarkTierRatio times Tier.Allow and Limiter.Allow interleaved in one
// process, 10,000 calls each per iteration (the side that goes first
// alternates), and reports the ratio of tier to own time per call: its
// median, quartiles and extremes over the iterations (run it with
// -benchtime=Nx for N rounds), in the CPU time of the benchmark's thread
// (cpu-ratio, on Linux) and in wall time (ratio).
func BenchmarkTierRatio(b *testing.B) {
	lim, tier := tierLimiters(b)
	ctx := context.Background()
	const calls = 10000
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	timeCalls := func(allow func(context.Context, string) (ratelimit.Decision, error)) (wall, cpu time.Duration) {
		start, startCPU := time.Now(), threadCPU()
		for range calls {
			allow(ctx, "key")
		}
		return time.Since(start), threadCPU() - startCPU
	}
	var ratios, cpuRatios []float64
	for b.Loop() {
		var o, t, oCPU, tCPU time.Duration
		if len(ratios)%2 == 0 {
			o, oCPU = timeCalls(lim.Allow)
			t, tCPU = timeCalls(tier.Allow)
		} else {
			t, tCPU = timeCalls(tier.Allow)
			o, oCPU = timeCalls(lim.Allow)
		}
		ratios = append(ratios, float64(t)/float64(o))
		if oCPU > 0 {
			cpuRatios = append(cpuRatios, float64(tCPU)/float64(oCPU))
		}
	}
	reportSpread(b, "ratio", ratios)
	if len(cpuRatios) > 0 {
		reportSpread(b, "cpu-ratio", cpuRatios)
	}
}

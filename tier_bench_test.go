package ratelimit_test

import (
	"context"
	"sync"
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

// BenchmarkTierPerCall measures what numbers passed per call would cost
// beside a Tier made beforehand (BenchmarkTier's "tier"), on the same hot
// key: "rebuilt" builds the algorithm and its tier on every call, as the
// limiter would without a cache and as a caller does today with numbers
// read per request; "looked up" finds the tier for an algorithm built
// once in a sync.Map, as a limiter taking the numbers per call would have
// to. docs/tiers.md compares the three.
func BenchmarkTierPerCall(b *testing.B) {
	lim, _ := tierLimiters(b)
	ctx := context.Background()
	b.Run("rebuilt", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			tier, err := lim.Tier(algorithms.GCRA(2, time.Second, 1e9))
			if err != nil {
				b.Fatal(err)
			}
			tier.Allow(ctx, "key")
		}
	})
	b.Run("looked up", func(b *testing.B) {
		alg := algorithms.GCRA(2, time.Second, 1e9)
		var tiers sync.Map // algorithms.Algorithm -> *ratelimit.Tier
		b.ReportAllocs()
		for b.Loop() {
			v, ok := tiers.Load(alg)
			if !ok {
				tier, err := lim.Tier(alg)
				if err != nil {
					b.Fatal(err)
				}
				v, _ = tiers.LoadOrStore(alg, tier)
			}
			v.(*ratelimit.Tier).Allow(ctx, "key")
		}
	})
}

// BenchmarkTierRatio times Tier.Allow and Limiter.Allow interleaved in one
// process (reportRatio) and reports the ratio of tier to own time per
// call; run it with -benchtime=Nx for N rounds.
func BenchmarkTierRatio(b *testing.B) {
	lim, tier := tierLimiters(b)
	reportRatio(b, lim.Allow, tier.Allow)
}

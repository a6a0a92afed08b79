package redis_test

import (
	"fmt"
	"os"
	"runtime"
	"slices"
	"strings"
	"testing"
)

// TestBar measures the Redis bars of issue #13 item 1: store/redis (GCRA
// and token bucket) against redis_rate and ulule/limiter on one go-redis
// client, at 32 callers and at 1, on a hot key and on 10,000 keys. Every
// round runs each contender once, in a rotated order; a ratio is the SDK's
// decisions/s ÷ the peer's in the same round, and the table gives the
// median over the rounds with the smallest and largest, and says whether
// each bar is met. It also gives the client's heap allocations per
// decision (all goroutines of the process, so the harness's included). It
// runs only with RATELIMIT_BENCH_BAR=1; RATELIMIT_BENCH_ROUNDS sets the
// rounds (9). bench/redis/bar.sh runs it.
func TestBar(t *testing.T) {
	if os.Getenv("RATELIMIT_BENCH_BAR") == "" {
		t.Skip("set RATELIMIT_BENCH_BAR=1 (or run bench/redis/bar.sh) to measure the bars")
	}
	rounds := benchRounds(t)
	var cs []contender
	for _, name := range []string{"sdk-gcra", "sdk-token_bucket", "redis_rate", "ulule"} {
		i := slices.IndexFunc(redisContenders, func(c contender) bool { return c.name == name })
		if i < 0 {
			t.Fatalf("no contender %q in redisContenders", name)
		}
		cs = append(cs, redisContenders[i])
	}
	const rr, ul = 2, 3 // the peers' indexes in cs
	type bar struct {
		peer int
		min  float64
	}
	workloads := []struct {
		name    string
		hot     bool
		callers int
		bars    []bar
	}{
		{"hot key, c=32", true, 32, []bar{{rr, 1.5}, {ul, 1.2}}},
		{"10,000 keys, c=32", false, 32, []bar{{rr, 1.5}, {ul, 1.2}}},
		{"hot key, c=1", true, 1, []bar{{rr, 1.0}}},
		{"10,000 keys, c=1", false, 1, []bar{{rr, 1.0}}},
	}
	var out strings.Builder
	fmt.Fprintf(&out, "\n%d rounds, GOMAXPROCS %d. Ratio: the median over the rounds of the SDK's decisions/s ÷ the peer's in the same round (smallest–largest).\n\n", rounds, runtime.GOMAXPROCS(0))
	fmt.Fprintf(&out, "| workload | contender | decisions/s (median) | allocs/decision | failures |\n|---|---|---:|---:|---:|\n")
	var bars strings.Builder
	fmt.Fprintf(&bars, "\n| workload | SDK | peer | ratio (range) | bar | met |\n|---|---|---|---:|---:|---|\n")
	for _, w := range workloads {
		n := 1000
		if w.callers > 1 {
			n = 5000
		}
		decide := make([]decideFunc, len(cs))
		for i, c := range cs {
			decide[i] = c.make(t, prefix())
			run(decide[i], 300, w.callers, w.hot) // warm up
		}
		rates := make([][]float64, len(cs))
		allocs := make([][]float64, len(cs))
		failures := make([]int64, len(cs))
		for r := range rounds {
			for j := range cs {
				i := (j + r) % len(cs)
				var m0, m1 runtime.MemStats
				runtime.ReadMemStats(&m0)
				res := run(decide[i], n, w.callers, w.hot)
				runtime.ReadMemStats(&m1)
				rates[i] = append(rates[i], res.perSec())
				allocs[i] = append(allocs[i], float64(m1.Mallocs-m0.Mallocs)/float64(n))
				failures[i] += res.failures
			}
		}
		for i, c := range cs {
			fmt.Fprintf(&out, "| %s | %s | %.0f | %.1f | %d |\n", w.name, c.name, median(rates[i]), median(allocs[i]), failures[i])
		}
		for _, sdk := range []int{0, 1} {
			for _, b := range w.bars {
				ratios := make([]float64, rounds)
				for r := range ratios {
					ratios[r] = rates[sdk][r] / rates[b.peer][r]
				}
				m := median(ratios)
				met := "met"
				if m < b.min {
					met = "**not met**"
				}
				fmt.Fprintf(&bars, "| %s | %s | %s | %.2f (%.2f–%.2f) | ≥ %.1f | %s |\n", w.name, cs[sdk].name, cs[b.peer].name,
					m, slices.Min(ratios), slices.Max(ratios), b.min, met)
			}
		}
	}
	t.Log(out.String() + bars.String())
}

package redis_test

import (
	"context"
	"fmt"
	"os"
	"runtime"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ratelimitkit/ratelimit"
	"github.com/ratelimitkit/ratelimit/algorithms"
	"github.com/ratelimitkit/ratelimit/store"
)

// The local-quota measure (issue #23, item 2): one hot key, 32 callers, one
// process on one Redis: the SDK with ratelimit.WithLocalQuota beside the
// SDK without it and redis_rate, in interleaved rounds. The bars: at least
// 10× redis_rate's decisions/s, with at most 0.1 store calls per decision.

// quotaShare and quotaLife are the local quota the measure runs with.
const (
	quotaShare = 1000
	quotaLife  = 100 * time.Millisecond
)

// callCounter is a store that counts its calls (Decide and Update).
type callCounter struct {
	store.Store
	calls *atomic.Int64
}

func (s callCounter) Decide(ctx context.Context, k store.Key, alg algorithms.Algorithm, req algorithms.Request) (algorithms.Decision, error) {
	s.calls.Add(1)
	return s.Store.(store.Decider).Decide(ctx, k, alg, req)
}

func (s callCounter) Update(ctx context.Context, k store.Key, now int64, fn store.UpdateFunc) error {
	s.calls.Add(1)
	return s.Store.Update(ctx, k, now, fn)
}

// quotaContender is a contender whose store calls are counted (nil: not
// counted, a peer).
type quotaContender struct {
	contender
	calls *atomic.Int64
	n     int // decisions per round
}

func quotaContenders() []quotaContender {
	var withQuota, without atomic.Int64
	counted := func(calls *atomic.Int64, opts ...ratelimit.Option) func(tb testing.TB, p string) decideFunc {
		return func(tb testing.TB, p string) decideFunc {
			lim, err := ratelimit.New(callCounter{redisStore(tb, p), calls}, algorithms.GCRA(rate, time.Second, burst), opts...)
			if err != nil {
				tb.Fatal(err)
			}
			return func(ctx context.Context, key string) error {
				_, err := lim.Allow(ctx, key)
				return err
			}
		}
	}
	rr := redisContenders[slices.IndexFunc(redisContenders, func(c contender) bool { return c.name == "redis_rate" })]
	return []quotaContender{
		{contender{fmt.Sprintf("sdk-gcra, WithLocalQuota(%d, %v)", quotaShare, quotaLife), counted(&withQuota, ratelimit.WithLocalQuota(quotaShare, quotaLife))}, &withQuota, 400_000},
		{contender{"sdk-gcra", counted(&without)}, &without, 10_000},
		{rr, nil, 10_000},
	}
}

// TestLocalQuotaReport measures the local quota's bars: every round runs
// each contender once, in rotating order, on one hot key at 32 callers;
// the ratio is a contender's decisions/s ÷ redis_rate's in the same round,
// and the table gives the median over the rounds with the smallest and
// largest. It runs only with RATELIMIT_BENCH_LOCALQUOTA=1;
// RATELIMIT_BENCH_ROUNDS sets the rounds (9). bash bench/run.sh localquota
// runs it and writes the table, with the load, into docs/benchmarks.md.
func TestLocalQuotaReport(t *testing.T) {
	if os.Getenv("RATELIMIT_BENCH_LOCALQUOTA") == "" {
		t.Skip("set RATELIMIT_BENCH_LOCALQUOTA=1 (or run bash bench/run.sh localquota) to measure the local quota")
	}
	rounds := benchRounds(t)
	const callers, ratioBar, callsBar = 32, 10.0, 0.1
	cs := quotaContenders()
	decide := make([]decideFunc, len(cs))
	for i, c := range cs {
		decide[i] = c.make(t, prefix())
		run(decide[i], 1000, callers, true) // warm up
	}
	rates := make([][]float64, len(cs))
	decisions := make([]int64, len(cs))
	before := make([]int64, len(cs))
	for i, c := range cs {
		if c.calls != nil {
			before[i] = c.calls.Load()
		}
	}
	for r := range rounds {
		for j := range cs {
			i := (j + r) % len(cs)
			res := run(decide[i], cs[i].n, callers, true)
			if res.failures > 0 {
				t.Fatalf("%s: %d of %d decisions failed", cs[i].name, res.failures, cs[i].n)
			}
			rates[i] = append(rates[i], res.perSec())
			decisions[i] += int64(cs[i].n)
		}
	}
	base := len(cs) - 1 // redis_rate
	var out strings.Builder
	fmt.Fprintf(&out, "\nOne hot key, %d callers, one process, %d rounds, GOMAXPROCS %d; GCRA at %d/s, burst %d (every request admitted). Ratio: the median over the rounds of the contender's decisions/s ÷ redis_rate's in the same round (smallest–largest). Store calls: the SDK's store calls (Decide or Update) per decision, over all rounds.\n\n",
		callers, rounds, runtime.GOMAXPROCS(0), rate, burst)
	fmt.Fprintf(&out, "| contender | decisions/s | × redis_rate (range) | store calls/decision | bars (≥ %.0f×, ≤ %.1f calls) |\n|---|---:|---:|---:|---|\n", ratioBar, callsBar)
	for i, c := range cs {
		ratios := make([]float64, rounds)
		for r := range ratios {
			ratios[r] = rates[i][r] / rates[base][r]
		}
		calls, met := "–", ""
		if c.calls != nil {
			per := float64(c.calls.Load()-before[i]) / float64(decisions[i])
			calls = fmt.Sprintf("%.4f", per)
			if i == 0 {
				met = "met"
				if median(ratios) < ratioBar || per > callsBar {
					met = "**not met**"
				}
			}
		}
		fmt.Fprintf(&out, "| %s | %.0f | %.2f (%.2f–%.2f) | %s | %s |\n", c.name, median(rates[i]), median(ratios), slices.Min(ratios), slices.Max(ratios), calls, met)
	}
	t.Log(out.String())
}

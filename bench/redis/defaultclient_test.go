package redis_test

import (
	"context"
	"fmt"
	"os"
	"runtime"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/go-redis/redis_rate/v10"
	goredis "github.com/redis/go-redis/v9"
	ulule "github.com/ulule/limiter/v3"
	ululeredis "github.com/ulule/limiter/v3/drivers/store/redis"

	"github.com/ratelimitkit/ratelimit/algorithms"
	rlredis "github.com/ratelimitkit/ratelimit/store/redis"
)

// TestDefaultClientBar measures issue #29 item 9's bar: with a go-redis
// client built with default options (no ContextTimeoutEnabled, which the
// limiter's default one-second store budget once paid for with a goroutine
// per call), one caller, 10,000 keys, every built-in algorithm through
// store/redis against redis_rate (and ulule/limiter, for reference) on that
// same client. Every round runs each contender once, in a rotated order; a
// ratio is the SDK's decisions/s ÷ the peer's in the same round, and the
// table gives the median over the rounds with the smallest and largest.
// The bar is ≥ 1.0× redis_rate for every algorithm. It runs only with
// RATELIMIT_BENCH_BAR=1; RATELIMIT_BENCH_ROUNDS sets the rounds (41, of
// 500 decisions per contender), and
// RATELIMIT_BENCH_CONTEXT_TIMEOUT=1 builds the client with
// ContextTimeoutEnabled instead, for comparison.
//
//	cd bench && RATELIMIT_BENCH_BAR=1 go test -count=1 -run '^TestDefaultClientBar$' -v ./redis/
func TestDefaultClientBar(t *testing.T) {
	if os.Getenv("RATELIMIT_BENCH_BAR") == "" {
		t.Skip("set RATELIMIT_BENCH_BAR=1 to measure the bar")
	}
	// Short rounds, many of them: on a machine shared with other work, the
	// contenders of one round then run within a second of each other, and
	// the ratio of a round compares like with like.
	rounds := 41
	if os.Getenv("RATELIMIT_BENCH_ROUNDS") != "" {
		rounds = benchRounds(t)
	}
	opts := &goredis.Options{Addr: redisAddr(t)} // go-redis's defaults
	opts.ContextTimeoutEnabled = os.Getenv("RATELIMIT_BENCH_CONTEXT_TIMEOUT") == "1"
	client := goredis.NewClient(opts)
	t.Cleanup(func() { client.Close() })

	onStore := func(alg algorithms.Algorithm) func(tb testing.TB, p string) decideFunc {
		return func(tb testing.TB, p string) decideFunc {
			s, err := rlredis.New(client, rlredis.WithPrefix(p))
			if err != nil {
				tb.Fatal(err)
			}
			return sdk(tb, s, alg)
		}
	}
	cs := []contender{
		{"sdk-gcra", onStore(algorithms.GCRA(rate, time.Second, burst))},
		{"sdk-token_bucket", onStore(algorithms.TokenBucket(rate, time.Second, burst))},
		{"sdk-leaky_bucket", onStore(algorithms.LeakyBucket(rate, time.Second, burst))},
		{"sdk-fixed_window", onStore(algorithms.FixedWindow(rate, time.Second))},
		{"sdk-sliding_window", onStore(algorithms.SlidingWindow(rate, time.Second))},
		{"sdk-sliding_log", onStore(algorithms.SlidingLog(rate, time.Second))},
		{"redis_rate", func(tb testing.TB, p string) decideFunc {
			lim := redis_rate.NewLimiter(client)
			limit := redis_rate.Limit{Rate: rate, Burst: burst, Period: time.Second}
			return func(ctx context.Context, key string) error {
				_, err := lim.Allow(ctx, p+":"+key, limit)
				return err
			}
		}},
		{"ulule", func(tb testing.TB, p string) decideFunc {
			st, err := ululeredis.NewStoreWithOptions(client, ulule.StoreOptions{Prefix: p})
			if err != nil {
				tb.Fatal(err)
			}
			lim := ulule.New(st, ulule.Rate{Period: time.Hour, Limit: rate * 3600})
			return func(ctx context.Context, key string) error {
				_, err := lim.Get(ctx, key)
				return err
			}
		}},
	}
	rr, ul := len(cs)-2, len(cs)-1
	const n = 500
	decide := make([]decideFunc, len(cs))
	for i, c := range cs {
		decide[i] = c.make(t, prefix())
		run(decide[i], 300, 1, false) // warm up: scripts loaded, connections open
	}
	rates := make([][]float64, len(cs))
	failures := make([]int64, len(cs))
	for r := range rounds {
		for j := range cs {
			i := (j + r) % len(cs)
			res := run(decide[i], n, 1, false)
			rates[i] = append(rates[i], res.perSec())
			failures[i] += res.failures
		}
	}
	var out strings.Builder
	fmt.Fprintf(&out, "\ngo-redis client with default options (ContextTimeoutEnabled %v), one caller, 10,000 keys, %d rounds of %d decisions, GOMAXPROCS %d.\n",
		opts.ContextTimeoutEnabled, rounds, n, runtime.GOMAXPROCS(0))
	fmt.Fprintf(&out, "Ratio: the median over the rounds of the SDK's decisions/s ÷ the peer's in the same round (smallest–largest).\n\n")
	fmt.Fprintf(&out, "| contender | decisions/s (median) | failures | ÷ redis_rate | ÷ ulule | ≥ 1.0× redis_rate |\n|---|---:|---:|---:|---:|---|\n")
	ratio := func(i, peer int) (m, lo, hi float64) {
		v := make([]float64, rounds)
		for r := range v {
			v[r] = rates[i][r] / rates[peer][r]
		}
		return median(v), slices.Min(v), slices.Max(v)
	}
	missed := 0
	for i, c := range cs {
		if i >= rr {
			fmt.Fprintf(&out, "| %s | %.0f | %d | | | |\n", c.name, median(rates[i]), failures[i])
			continue
		}
		m, lo, hi := ratio(i, rr)
		mu, lou, hiu := ratio(i, ul)
		met := "met"
		if m < 1.0 {
			met, missed = "**not met**", missed+1
		}
		fmt.Fprintf(&out, "| %s | %.0f | %d | %.2f (%.2f–%.2f) | %.2f (%.2f–%.2f) | %s |\n", c.name, median(rates[i]), failures[i], m, lo, hi, mu, lou, hiu, met)
	}
	t.Log(out.String())
	if missed > 0 {
		t.Logf("%d of %d algorithms below 1.0× redis_rate", missed, rr)
	}
}

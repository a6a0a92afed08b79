package redis_test

import (
	"context"
	"fmt"
	"os"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-redis/redis_rate/v10"
	goredis "github.com/redis/go-redis/v9"

	"github.com/ratelimitkit/ratelimit"
	"github.com/ratelimitkit/ratelimit/algorithms"
)

// TestSlidingLogReport compares the sliding log with a limit of 1,000 on
// one hot key against redis_rate's GCRA (the policy of BenchmarkRedis,
// which admits every call) on the same client and server, 32 callers, in
// interleaved rounds, and prints the median of the per-round throughput
// ratios with their range, the server's CPU per decision and the share of
// calls admitted. Two periods: one second, where the log stays full and
// most calls are denied, and 20 ms, where most calls are admitted and the
// log holds hundreds of entries, each admission dropping the ones that left
// the window. It runs only with RATELIMIT_BENCH_REPORT=1:
//
//	RATELIMIT_BENCH_REPORT=1 go test -run TestSlidingLogReport -v ./redis/
func TestSlidingLogReport(t *testing.T) {
	if os.Getenv("RATELIMIT_BENCH_REPORT") == "" {
		t.Skip("set RATELIMIT_BENCH_REPORT=1 to print the comparison")
	}
	const rounds, n, callers = 11, 6000, 32
	addr := redisAddr(t)
	stats := goredis.NewClient(&goredis.Options{Addr: addr})
	defer stats.Close()
	type contestant struct {
		name     string
		decide   decideFunc
		admitted *atomic.Int64
	}
	logs := func(period time.Duration) contestant {
		alg := algorithms.SlidingLog(1000, period)
		lim, err := ratelimit.New(redisStore(t, prefix()), alg)
		if err != nil {
			t.Fatal(err)
		}
		var admitted atomic.Int64
		return contestant{fmt.Sprint(alg), func(ctx context.Context, key string) error {
			d, err := lim.Allow(ctx, key)
			if d.Allowed {
				admitted.Add(1)
			}
			return err
		}, &admitted}
	}
	base := func() contestant {
		lim := redis_rate.NewLimiter(goredisClient(t))
		limit := redis_rate.Limit{Rate: rate, Burst: burst, Period: time.Second}
		p := prefix()
		var admitted atomic.Int64
		return contestant{"redis_rate GCRA", func(ctx context.Context, key string) error {
			r, err := lim.Allow(ctx, p+":"+key, limit)
			if err == nil && r.Allowed > 0 {
				admitted.Add(1)
			}
			return err
		}, &admitted}
	}()
	cs := []contestant{base, logs(time.Second), logs(20 * time.Millisecond)}
	for _, c := range cs {
		run(c.decide, 2000, callers, true) // warm up, and fill the logs
		c.admitted.Store(0)
	}
	ratios := make([][]float64, len(cs))
	usecs := make([][]float64, len(cs))
	var failures int64
	for r := 0; r < rounds; r++ {
		rates := make([]float64, len(cs))
		for j := range cs {
			i := (j + r) % len(cs) // rotate who goes first
			stats.ConfigResetStat(context.Background())
			res := run(cs[i].decide, n, callers, true)
			usecs[i] = append(usecs[i], serverUsec(t, stats)/float64(res.ops))
			rates[i] = res.perSec()
			failures += res.failures
		}
		for i := range cs {
			ratios[i] = append(ratios[i], rates[i]/rates[0])
		}
	}
	var out strings.Builder
	fmt.Fprintf(&out, "\nRedis, one hot key, %d callers, %d rounds of %d calls each; ratio = decisions/s ÷ redis_rate's in the same round\n\n", callers, rounds, n)
	fmt.Fprintf(&out, "| contender | throughput ratio, median (range) | server µs/decision | admitted |\n|---|---:|---:|---:|\n")
	for i, c := range cs {
		fmt.Fprintf(&out, "| %s | %.2f (%.2f–%.2f) | %.1f | %.0f%% |\n", c.name, median(ratios[i]),
			slices.Min(ratios[i]), slices.Max(ratios[i]), median(usecs[i]),
			100*float64(c.admitted.Load())/float64(rounds*n))
	}
	fmt.Fprintf(&out, "\nfailures: %d\n", failures)
	t.Log(out.String())
	if failures > 0 {
		t.Errorf("%d calls failed", failures)
	}
}

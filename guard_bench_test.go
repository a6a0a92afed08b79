package ratelimit_test

import (
	"context"
	"fmt"
	"runtime"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/ratelimitkit/ratelimit"
	"github.com/ratelimitkit/ratelimit/algorithms"
	"github.com/ratelimitkit/ratelimit/internal/cputime"
	"github.com/ratelimitkit/ratelimit/internal/testserver"
	"github.com/ratelimitkit/ratelimit/store/memory"
	rlredis "github.com/ratelimitkit/ratelimit/store/redis"
)

// These benchmarks back the figures in docs/benchmarks.md ("Failures,
// deny cache and observer"); scripts/bench-resilience.sh runs them.

// admitAll is a hot-key workload that admits every request: a deep bucket
// on the memory store, as in store/memory's benchmarks.
var admitAll = algorithms.GCRA(1, time.Second, 1e9)

// BenchmarkObserver measures the observer hook: unset (a limiter with no
// option, the default hot path, which must not allocate) and set to an
// observer that does nothing.
func BenchmarkObserver(b *testing.B) {
	nop := observerFunc(func(context.Context, ratelimit.Event) {})
	for _, c := range []struct {
		name string
		opts []ratelimit.Option
	}{
		{"unset", nil},
		{"set", []ratelimit.Option{ratelimit.WithObserver(nop)}},
	} {
		b.Run(c.name, func(b *testing.B) {
			lim, err := ratelimit.New(memory.MustNew(), admitAll, c.opts...)
			if err != nil {
				b.Fatal(err)
			}
			ctx := context.Background()
			b.ReportAllocs()
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					lim.Allow(ctx, "key")
				}
			})
		})
	}
}

// outageLimiters returns a plain limiter on the memory store and a limiter
// whose Redis store is down (a private server, stopped) with its circuit
// breaker open and a memory fallback of one replica: the same decisions, one
// from the store, one from the fallback during an outage.
func outageLimiters(tb testing.TB) (memLim, outageLim *ratelimit.Limiter) {
	tb.Helper()
	srv := testserver.StartRedis(tb)
	c := goredis.NewClient(&goredis.Options{Addr: srv.Addr(), ContextTimeoutEnabled: true, MaxRetries: -1, DialerRetries: 1})
	tb.Cleanup(func() { c.Close() })
	store, err := rlredis.New(c)
	if err != nil {
		tb.Fatal(err)
	}
	srv.Stop()
	outageLim, err = ratelimit.New(store, admitAll,
		ratelimit.WithStoreTimeout(time.Second), ratelimit.WithCircuitBreaker(1, time.Hour),
		ratelimit.WithFallback(memory.MustNew(), 1))
	if err != nil {
		tb.Fatal(err)
	}
	memLim, err = ratelimit.New(memory.MustNew(), admitAll)
	if err != nil {
		tb.Fatal(err)
	}
	ctx := context.Background()
	outageLim.Allow(ctx, "key") // fails, and opens the breaker
	if d, err := outageLim.Allow(ctx, "key"); d.Source != ratelimit.SourceFallback || !d.Allowed || err == nil {
		tb.Fatalf("outage limiter: %+v, %v; want an admission by the fallback with the error", d, err)
	}
	memLim.Allow(ctx, "key")
	return memLim, outageLim
}

// BenchmarkOutage measures a decision on the memory store and one made by
// the fallback while the breaker is open, each on its own.
func BenchmarkOutage(b *testing.B) {
	memLim, outageLim := outageLimiters(b)
	for _, c := range []struct {
		name string
		lim  *ratelimit.Limiter
	}{{"memory", memLim}, {"breaker-open", outageLim}} {
		b.Run(c.name, func(b *testing.B) {
			ctx := context.Background()
			b.ReportAllocs()
			for b.Loop() {
				c.lim.Allow(ctx, "key")
			}
		})
	}
}

// BenchmarkOutageRatio times the two sides of BenchmarkOutage interleaved
// in one process, 10,000 calls each per iteration (the side that goes first
// alternates), and reports the ratio of breaker-open to memory time per
// call: its median, quartiles and extremes over the iterations (run it with
// -benchtime=Nx for N rounds), in the CPU time of the benchmark's thread
// (cpu-ratio, on Linux) and in wall time (ratio).
func BenchmarkOutageRatio(b *testing.B) {
	memLim, outageLim := outageLimiters(b)
	reportRatio(b, memLim.Allow, outageLim.Allow)
}

// reportRatio times allow(ctx, "key") by base and by other interleaved in
// one process, 10,000 calls each per iteration (the side that goes first
// alternates), and reports the ratio of other's to base's time per call:
// its spread over the iterations (reportSpread), in the CPU time of the
// benchmark's thread (cpu-ratio, on Linux) and in wall time (ratio).
func reportRatio(b *testing.B, base, other func(context.Context, string) (ratelimit.Decision, error)) {
	ctx := context.Background()
	const calls = 10000
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	timeCalls := func(allow func(context.Context, string) (ratelimit.Decision, error)) (wall, cpu time.Duration) {
		start, startCPU := time.Now(), cputime.Thread()
		for range calls {
			allow(ctx, "key")
		}
		return time.Since(start), cputime.Thread() - startCPU
	}
	var ratios, cpuRatios []float64
	for b.Loop() {
		var m, o, mCPU, oCPU time.Duration
		if len(ratios)%2 == 0 {
			m, mCPU = timeCalls(base)
			o, oCPU = timeCalls(other)
		} else {
			o, oCPU = timeCalls(other)
			m, mCPU = timeCalls(base)
		}
		ratios = append(ratios, float64(o)/float64(m))
		if mCPU > 0 {
			cpuRatios = append(cpuRatios, float64(oCPU)/float64(mCPU))
		}
	}
	reportSpread(b, "ratio", ratios)
	if len(cpuRatios) > 0 {
		reportSpread(b, "cpu-ratio", cpuRatios)
	}
}

// reportSpread reports the median of xs, its quartiles (q1, q3: the
// middle half of the rounds, which the stalls of a shared machine do not
// reach) and its lowest and highest values.
func reportSpread(b *testing.B, unit string, xs []float64) {
	slices.Sort(xs)
	n := len(xs)
	b.ReportMetric(xs[n/2], unit+"-median")
	b.ReportMetric(xs[n/4], unit+"-q1")
	b.ReportMetric(xs[(3*n)/4], unit+"-q3")
	b.ReportMetric(xs[0], unit+"-min")
	b.ReportMetric(xs[n-1], unit+"-max")
}

// BenchmarkDenyCacheHotKey attacks one key on Redis (a private server, on
// its own clock) with 32 callers far over its limit, GCRA(10/s, burst 10),
// for half a second without the deny cache and then half a second with it,
// once per iteration, and reports the store calls per second of each (from
// the server's command statistics), the reduction per round (median,
// lowest, highest), and any admission beyond what the limit allows in the
// time the attack ran (extra-admissions, which must be 0).
func BenchmarkDenyCacheHotKey(b *testing.B) {
	srv := testserver.StartRedis(b)
	client := goredis.NewClient(&goredis.Options{Addr: srv.Addr(), ContextTimeoutEnabled: true, PoolSize: 2 * attackers})
	b.Cleanup(func() { client.Close() })
	store, err := rlredis.New(client)
	if err != nil {
		b.Fatal(err)
	}
	const (
		limit, burst = 10, 10
		length       = 500 * time.Millisecond
	)
	round := 0
	attack := func(opts ...ratelimit.Option) (callsPerSec float64, extra int64) {
		round++
		opts = append(opts, ratelimit.WithName(fmt.Sprint("attack-", round)))
		lim, err := ratelimit.New(store, algorithms.GCRA(limit, time.Second, burst), opts...)
		if err != nil {
			b.Fatal(err)
		}
		lim.Peek(context.Background(), "warm-up")
		before := scriptCalls(b, client)
		var admitted atomic.Int64
		var wg sync.WaitGroup
		start := time.Now()
		deadline := start.Add(length)
		for range attackers {
			wg.Go(func() {
				for time.Now().Before(deadline) {
					if d, _ := lim.Allow(context.Background(), "hot"); d.Allowed {
						admitted.Add(1)
					}
				}
			})
		}
		wg.Wait()
		elapsed := time.Since(start)
		calls := scriptCalls(b, client) - before
		allowed := int64(burst + limit*elapsed.Seconds() + 1)
		return float64(calls) / elapsed.Seconds(), max(admitted.Load()-allowed, 0)
	}
	var off, on, reduction []float64
	var extra int64
	for b.Loop() {
		o, e1 := attack()
		c, e2 := attack(ratelimit.WithDenyCache(1000))
		off, on = append(off, o), append(on, c)
		reduction = append(reduction, 100*(1-c/o))
		extra += e1 + e2
	}
	reportSpread(b, "calls/s-off", off)
	reportSpread(b, "calls/s-on", on)
	reportSpread(b, "%fewer", reduction)
	b.ReportMetric(float64(extra), "extra-admissions")
}

package redis_test

import (
	"context"
	"fmt"
	"os"
	"runtime"
	"slices"
	"strconv"
	"syscall"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"
)

// TestAB is a quick A/B probe for one workload of TestReport: the
// contenders of one group (RATELIMIT_AB_GROUP: redis or valkey; only
// RATELIMIT_AB_ONLY when set, for a profile) on one shape
// (RATELIMIT_AB_SHAPE, such as 10000keys/c32), interleaved rounds
// (RATELIMIT_BENCH_ROUNDS, 9 by default) of RATELIMIT_AB_N decisions
// (TestReport's numbers by default). Per contender it prints the median
// throughput, the median, smallest and largest of its per-round
// throughput ÷ the baseline's, and the medians of the client process's CPU
// (getrusage), the server's CPU in commands (INFO commandstats), and the
// client's allocations and bytes allocated (every goroutine), each per
// decision. Build the test binary of two commits and run them alternately
// to compare them (bench/redis/ab.sh); it runs only when
// RATELIMIT_AB_GROUP is set.
func TestAB(t *testing.T) {
	group := os.Getenv("RATELIMIT_AB_GROUP")
	if group == "" {
		t.Skip("set RATELIMIT_AB_GROUP=redis or valkey")
	}
	rounds := 9
	if v, err := strconv.Atoi(os.Getenv("RATELIMIT_BENCH_ROUNDS")); err == nil && v > 0 {
		rounds = v
	}
	cs, baseline := redisContenders, "redis_rate"
	if group == "valkey" {
		cs, baseline = valkeyContenders, "incr-pexpire"
	}
	if only := os.Getenv("RATELIMIT_AB_ONLY"); only != "" {
		cs = slices.DeleteFunc(cs, func(c contender) bool { return c.name != only })
		baseline = only
	}
	shape := os.Getenv("RATELIMIT_AB_SHAPE")
	i := slices.IndexFunc(shapes, func(s struct {
		name    string
		hot     bool
		callers int
	}) bool {
		return s.name == shape
	})
	if i < 0 {
		t.Fatalf("RATELIMIT_AB_SHAPE=%q: want one of the shapes", shape)
	}
	sh := shapes[i]
	n := 1000
	if sh.callers > 1 {
		n = 5000
	}
	if v, err := strconv.Atoi(os.Getenv("RATELIMIT_AB_N")); err == nil && v > 0 {
		n = v
	}
	decide := make([]decideFunc, len(cs))
	for i, c := range cs {
		decide[i] = c.make(t, prefix())
		run(decide[i], 300, sh.callers, sh.hot)
	}
	addr := redisAddr(t)
	if group == "valkey" {
		addr = valkeyAddr(t)
	}
	stats := goredis.NewClient(&goredis.Options{Addr: addr})
	defer stats.Close()
	rates := make([][]float64, len(cs))
	cpus := make([][]float64, len(cs))  // client CPU µs per decision
	usecs := make([][]float64, len(cs)) // server CPU µs per decision
	allocs := make([][]float64, len(cs))
	bytes := make([][]float64, len(cs))
	for r := 0; r < rounds; r++ {
		for j := range cs {
			i := (j + r) % len(cs)
			stats.ConfigResetStat(context.Background())
			var before, after syscall.Rusage
			var m0, m1 runtime.MemStats
			runtime.ReadMemStats(&m0)
			syscall.Getrusage(syscall.RUSAGE_SELF, &before)
			res := run(decide[i], n, sh.callers, sh.hot)
			syscall.Getrusage(syscall.RUSAGE_SELF, &after)
			runtime.ReadMemStats(&m1)
			allocs[i] = append(allocs[i], float64(m1.Mallocs-m0.Mallocs)/float64(res.ops))
			bytes[i] = append(bytes[i], float64(m1.TotalAlloc-m0.TotalAlloc)/float64(res.ops))
			cpu := time.Duration(after.Utime.Nano() + after.Stime.Nano() - before.Utime.Nano() - before.Stime.Nano())
			rates[i] = append(rates[i], res.perSec())
			cpus[i] = append(cpus[i], float64(cpu.Microseconds())/float64(res.ops))
			usecs[i] = append(usecs[i], serverUsec(t, stats)/float64(res.ops))
		}
	}
	base := slices.IndexFunc(cs, func(c contender) bool { return c.name == baseline })
	for i, c := range cs {
		ratios := make([]float64, rounds)
		for r := range ratios {
			ratios[r] = rates[i][r] / rates[base][r]
		}
		fmt.Printf("AB %s %s %-16s %6.0f/s ratio %.3f (%.2f–%.2f) client %.1f µs/dec server %.1f µs/dec, %.1f allocs %.0f B/dec\n", group, sh.name, c.name, median(rates[i]), median(ratios), slices.Min(ratios), slices.Max(ratios), median(cpus[i]), median(usecs[i]), median(allocs[i]), median(bytes[i]))
	}
}

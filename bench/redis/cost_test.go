package redis_test

import (
	"context"
	"fmt"
	"runtime"
	"slices"
	"strings"
	"testing"

	goredis "github.com/redis/go-redis/v9"
)

// costRounds is the number of interleaved rounds of BenchmarkServerCost.
const costRounds = 7

// BenchmarkServerCost measures what a decision costs the server, the figure
// docs/scaling.md's capacity model starts from, for the SDK's GCRA and token
// bucket beside redis_rate's GCRA and the one-line INCR+PEXPIRE script on
// Redis (go-redis), and the SDK beside the same script on Valkey
// (valkey-go). Each sub-benchmark is one workload (one hot key or 10,000
// keys, 1 or 32 callers); one iteration runs every contender once per round,
// in an order rotated each round, for 7 rounds, and reports per contender
// (the unit's prefix names it) the medians over the rounds of:
//
//   - dec/s: decisions per second;
//   - server-us/dec: the server process's CPU time per decision, user plus
//     system, from INFO cpu (used_cpu_user, used_cpu_sys) before and after
//     the contender's calls: reading and writing the connections included;
//   - cmd-us/dec: the time the server spent running scripts per decision,
//     from INFO commandstats (the usec of EVAL and EVALSHA, after CONFIG
//     RESETSTAT): the script's own cost, the commands it runs included,
//     without the connection handling;
//   - cmds/dec: script runs per decision (the same statistics' calls);
//   - allocs/dec: heap allocations of the whole client process per decision;
//   - x-base: the median over the rounds of the contender's server-us/dec ÷
//     the baseline's in the same round, and x-base-min, x-base-max their
//     range. The baseline is redis_rate on Redis and INCR+PEXPIRE on Valkey.
//
// The INFO and CONFIG commands the measurement sends cost the server a few
// microseconds per contender and round, not per decision. Run it with -benchtime 1x (bash bench/run.sh rediscost).
func BenchmarkServerCost(b *testing.B) {
	pick := func(cs []contender, names ...string) []contender {
		var out []contender
		for _, n := range names {
			i := slices.IndexFunc(cs, func(c contender) bool { return c.name == n })
			if i < 0 {
				b.Fatalf("no contender %q", n)
			}
			out = append(out, cs[i])
		}
		return out
	}
	groups := []struct {
		name     string
		cs       []contender
		baseline string
		addr     func(testing.TB) string
	}{
		{"redis", pick(redisContenders, "sdk-gcra", "sdk-token_bucket", "redis_rate", "incr-pexpire"), "redis_rate", redisAddr},
		{"valkey", pick(valkeyContenders, "sdk-gcra", "sdk-token_bucket", "incr-pexpire"), "incr-pexpire", valkeyAddr},
	}
	for _, g := range groups {
		for _, sh := range shapes {
			b.Run(g.name+"/"+sh.name, func(b *testing.B) {
				stats := goredis.NewClient(&goredis.Options{Addr: g.addr(b)})
				defer stats.Close()
				n := 1000
				if sh.callers > 1 {
					n = 5000
				}
				decide := make([]decideFunc, len(g.cs))
				for i, c := range g.cs {
					decide[i] = c.make(b, prefix())
					run(decide[i], 300, sh.callers, sh.hot) // warm up
				}
				base := slices.IndexFunc(g.cs, func(c contender) bool { return c.name == g.baseline })
				type acc struct{ rate, server, cmd, cmds, allocs, xbase []float64 }
				accs := make([]acc, len(g.cs))
				var failures int64
				b.ResetTimer()
				for range b.N {
					for r := range costRounds {
						server := make([]float64, len(g.cs))
						for j := range g.cs {
							i := (j + r) % len(g.cs) // rotate who goes first
							if err := stats.ConfigResetStat(context.Background()).Err(); err != nil {
								b.Fatalf("CONFIG RESETSTAT: %v", err)
							}
							cpu0 := serverCPU(b, stats)
							var m0, m1 runtime.MemStats
							runtime.ReadMemStats(&m0)
							res := run(decide[i], n, sh.callers, sh.hot)
							runtime.ReadMemStats(&m1)
							cpu1 := serverCPU(b, stats)
							usec, calls := commandStats(b, stats)
							failures += res.failures
							server[i] = (cpu1 - cpu0) / float64(n)
							a := &accs[i]
							a.rate = append(a.rate, res.perSec())
							a.server = append(a.server, server[i])
							a.cmd = append(a.cmd, usec/float64(n))
							a.cmds = append(a.cmds, calls/float64(n))
							a.allocs = append(a.allocs, float64(m1.Mallocs-m0.Mallocs)/float64(n))
						}
						for i := range g.cs {
							accs[i].xbase = append(accs[i].xbase, server[i]/server[base])
						}
					}
				}
				b.StopTimer()
				for i, c := range g.cs {
					a := accs[i]
					b.ReportMetric(median(a.rate), c.name+":dec/s")
					b.ReportMetric(median(a.server), c.name+":server-us/dec")
					b.ReportMetric(median(a.cmd), c.name+":cmd-us/dec")
					b.ReportMetric(median(a.cmds), c.name+":cmds/dec")
					b.ReportMetric(median(a.allocs), c.name+":allocs/dec")
					b.ReportMetric(median(a.xbase), c.name+":x-base")
					b.ReportMetric(slices.Min(a.xbase), c.name+":x-base-min")
					b.ReportMetric(slices.Max(a.xbase), c.name+":x-base-max")
				}
				b.ReportMetric(float64(failures), "failures")
				if failures > 0 {
					b.Errorf("%d calls failed", failures)
				}
			})
		}
	}
}

// serverCPU returns the server process's CPU time so far, user plus system,
// in microseconds (INFO cpu).
func serverCPU(tb testing.TB, c *goredis.Client) float64 {
	info, err := c.Info(context.Background(), "cpu").Result()
	if err != nil {
		tb.Fatalf("INFO cpu: %v", err)
	}
	var sum float64
	found := 0
	for _, line := range strings.Split(info, "\n") {
		k, v, ok := strings.Cut(strings.TrimSpace(line), ":")
		if !ok || (k != "used_cpu_user" && k != "used_cpu_sys") {
			continue
		}
		var s float64
		if _, err := fmt.Sscan(v, &s); err != nil {
			tb.Fatalf("INFO cpu: %s: %v", line, err)
		}
		sum += s * 1e6
		found++
	}
	if found != 2 {
		tb.Fatalf("INFO cpu has no used_cpu_user and used_cpu_sys:\n%s", info)
	}
	return sum
}

// commandStats sums the server's time in microseconds and the calls over
// the script commands (EVAL, EVALSHA, their _RO forms, FCALL) since the
// last CONFIG RESETSTAT (INFO commandstats). Every contender decides with
// one script run; the commands a script runs inside are left out, since
// the script's own time already holds theirs.
func commandStats(tb testing.TB, c *goredis.Client) (usec, calls float64) {
	info, err := c.Info(context.Background(), "commandstats").Result()
	if err != nil {
		tb.Fatalf("INFO commandstats: %v", err)
	}
	for _, line := range strings.Split(info, "\n") {
		name, rest, ok := strings.Cut(strings.TrimSpace(line), ":")
		if !ok || !(strings.HasPrefix(name, "cmdstat_eval") || strings.HasPrefix(name, "cmdstat_fcall")) {
			continue
		}
		for _, f := range strings.Split(rest, ",") {
			k, v, _ := strings.Cut(f, "=")
			var x float64
			switch k {
			case "usec":
				fmt.Sscan(v, &x)
				usec += x
			case "calls":
				fmt.Sscan(v, &x)
				calls += x
			}
		}
	}
	return usec, calls
}

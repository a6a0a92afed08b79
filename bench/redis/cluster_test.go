package redis_test

import (
	"context"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/go-redis/redis_rate/v10"
	goredis "github.com/redis/go-redis/v9"
	vk "github.com/valkey-io/valkey-go"

	"github.com/ratelimitkit/ratelimit/algorithms"
	rlredis "github.com/ratelimitkit/ratelimit/store/redis"
	rlvalkey "github.com/ratelimitkit/ratelimit/store/valkey"
)

// clusterRounds is the number of interleaved rounds of BenchmarkCluster.
const clusterRounds = 7

func clusterAddrs(tb testing.TB) []string {
	a := os.Getenv("RATELIMIT_REDIS_CLUSTER_ADDRS")
	if a == "" {
		tb.Skip("RATELIMIT_REDIS_CLUSTER_ADDRS is not set: run under scripts/with-servers.sh")
	}
	return strings.Split(a, ",")
}

// clusterContenders are the contenders of BenchmarkCluster on a go-redis
// cluster client (redis-*) and a valkey-go cluster client (valkey-*), each
// making its own client, as an application would.
var clusterContenders = []contender{
	{"redis-sdk-gcra", func(tb testing.TB, p string) decideFunc {
		s, err := rlredis.New(goredisCluster(tb), rlredis.WithPrefix(p))
		if err != nil {
			tb.Fatal(err)
		}
		return sdk(tb, s, algorithms.GCRA(rate, time.Second, burst))
	}},
	{"redis_rate", func(tb testing.TB, p string) decideFunc {
		lim := redis_rate.NewLimiter(goredisCluster(tb))
		limit := redis_rate.Limit{Rate: rate, Burst: burst, Period: time.Second}
		return func(ctx context.Context, key string) error {
			_, err := lim.Allow(ctx, p+":"+key, limit)
			return err
		}
	}},
	{"redis-incr-pexpire", func(tb testing.TB, p string) decideFunc {
		c := goredisCluster(tb)
		return func(ctx context.Context, key string) error {
			return goredisIncrScript.Run(ctx, c, []string{p + ":" + key}, 60000).Err()
		}
	}},
	{"valkey-sdk-gcra", func(tb testing.TB, p string) decideFunc {
		s, err := rlvalkey.New(valkeyCluster(tb), rlvalkey.WithPrefix(p))
		if err != nil {
			tb.Fatal(err)
		}
		return sdk(tb, s, algorithms.GCRA(rate, time.Second, burst))
	}},
	{"valkey-incr-pexpire", func(tb testing.TB, p string) decideFunc {
		c := valkeyCluster(tb)
		args := []string{"60000"}
		return func(ctx context.Context, key string) error {
			return incrScript.Exec(ctx, c, []string{p + ":" + key}, args).Error()
		}
	}},
}

func goredisCluster(tb testing.TB) *goredis.ClusterClient {
	c := goredis.NewClusterClient(&goredis.ClusterOptions{Addrs: clusterAddrs(tb), PoolSize: poolSz, MinIdleConns: 32, ContextTimeoutEnabled: true}) // as for goredisClient
	tb.Cleanup(func() { c.Close() })
	return c
}

func valkeyCluster(tb testing.TB) vk.Client {
	c, err := vk.NewClient(vk.ClientOption{InitAddress: clusterAddrs(tb), DisableCache: true})
	if err != nil {
		tb.Fatalf("valkey.NewClient: %v", err)
	}
	tb.Cleanup(c.Close)
	return c
}

// BenchmarkCluster measures decisions on a Redis Cluster (the masters of
// RATELIMIT_REDIS_CLUSTER_ADDRS): the SDK's GCRA through store/redis
// (go-redis) beside redis_rate's GCRA and the one-line INCR+PEXPIRE
// script through the same client, and through store/valkey (valkey-go)
// beside the one-line script through valkey-go. Each sub-benchmark is one
// workload (10,000 keys or one hot key, 32 callers); one iteration runs
// every contender once per round, 5,000 calls, in an order rotated each
// round, for 7 rounds, and reports per contender (the unit's prefix names
// it) the medians over the rounds of dec/s; server-us/dec, the CPU time,
// user plus system, of all the masters together per decision (INFO cpu of
// each); cmd-us/dec and cmds/dec, the masters' time inside scripts and
// their script runs per decision (INFO commandstats after CONFIG
// RESETSTAT, as BenchmarkServerCost); and for the SDK's rows the median over the rounds of the
// SDK's dec/s ÷ the baseline's in the same round (x-redis_rate,
// x-incr: redis_rate and the one-line script on go-redis; x-incr alone on
// valkey-go), with its range (-min, -max). Run it with -benchtime 1x
// (bash bench/run.sh cluster).
func BenchmarkCluster(b *testing.B) {
	addrs := clusterAddrs(b)
	var nodes []*goredis.Client
	for _, a := range addrs {
		c := goredis.NewClient(&goredis.Options{Addr: a})
		b.Cleanup(func() { c.Close() })
		nodes = append(nodes, c)
	}
	cpu := func() float64 {
		var sum float64
		for _, n := range nodes {
			sum += serverCPU(b, n)
		}
		return sum
	}
	resetStats := func() {
		for _, n := range nodes {
			if err := n.ConfigResetStat(context.Background()).Err(); err != nil {
				b.Fatalf("CONFIG RESETSTAT: %v", err)
			}
		}
	}
	scripts := func() (usec, calls float64) {
		for _, n := range nodes {
			u, c := commandStats(b, n)
			usec, calls = usec+u, calls+c
		}
		return usec, calls
	}
	idx := func(name string) int {
		return slices.IndexFunc(clusterContenders, func(c contender) bool { return c.name == name })
	}
	ratios := []struct{ sdk, base, unit string }{
		{"redis-sdk-gcra", "redis_rate", "x-redis_rate"},
		{"redis-sdk-gcra", "redis-incr-pexpire", "x-incr"},
		{"valkey-sdk-gcra", "valkey-incr-pexpire", "x-incr"},
	}
	for _, sh := range []struct {
		name string
		hot  bool
	}{{"10000keys/c32", false}, {"hot/c32", true}} {
		b.Run(sh.name, func(b *testing.B) {
			const n, callers = 5000, 32
			cs := clusterContenders
			decide := make([]decideFunc, len(cs))
			for i, c := range cs {
				decide[i] = c.make(b, prefix())
				run(decide[i], 2000, callers, sh.hot) // warm up: connections, scripts, slots
			}
			rates := make([][]float64, len(cs))
			server := make([][]float64, len(cs))
			inScripts := make([][]float64, len(cs))
			runs := make([][]float64, len(cs))
			xs := make([][]float64, len(ratios))
			var failures int64
			b.ResetTimer()
			for range b.N {
				for r := range clusterRounds {
					rate := make([]float64, len(cs))
					for j := range cs {
						i := (j + r) % len(cs) // rotate who goes first
						resetStats()
						cpu0 := cpu()
						res := run(decide[i], n, callers, sh.hot)
						server[i] = append(server[i], (cpu()-cpu0)/n)
						usec, calls := scripts()
						inScripts[i] = append(inScripts[i], usec/n)
						runs[i] = append(runs[i], calls/n)
						failures += res.failures
						rate[i] = res.perSec()
						rates[i] = append(rates[i], rate[i])
					}
					for k, x := range ratios {
						xs[k] = append(xs[k], rate[idx(x.sdk)]/rate[idx(x.base)])
					}
				}
			}
			b.StopTimer()
			for i, c := range cs {
				b.ReportMetric(median(rates[i]), c.name+":dec/s")
				b.ReportMetric(median(server[i]), c.name+":server-us/dec")
				b.ReportMetric(median(inScripts[i]), c.name+":cmd-us/dec")
				b.ReportMetric(median(runs[i]), c.name+":cmds/dec")
			}
			for k, x := range ratios {
				b.ReportMetric(median(xs[k]), x.sdk+":"+x.unit)
				b.ReportMetric(slices.Min(xs[k]), x.sdk+":"+x.unit+"-min")
				b.ReportMetric(slices.Max(xs[k]), x.sdk+":"+x.unit+"-max")
			}
			b.ReportMetric(float64(failures), "failures")
			if failures > 0 {
				b.Errorf("%d calls failed", failures)
			}
		})
	}
}

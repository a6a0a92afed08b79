package redis_test

import (
	"context"
	"fmt"
	"os"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-redis/redis_rate/v10"
	goredis "github.com/redis/go-redis/v9"
	"github.com/throttled/throttled/v2"
	"github.com/throttled/throttled/v2/store/goredisstore.v9"
	ulule "github.com/ulule/limiter/v3"
	ululeredis "github.com/ulule/limiter/v3/drivers/store/redis"

	"github.com/ratelimitkit/ratelimit"
	"github.com/ratelimitkit/ratelimit/algorithms"
	"github.com/ratelimitkit/ratelimit/clock"
	"github.com/ratelimitkit/ratelimit/store"
	rlredis "github.com/ratelimitkit/ratelimit/store/redis"
	rlvalkey "github.com/ratelimitkit/ratelimit/store/valkey"
)

// TestReport runs every contender of a group in interleaved rounds (so
// that drifting load on a shared machine hits all of them alike) and prints
// a markdown table of the medians over the rounds of decisions/s, p99
// latency and server CPU per decision, the failures, and the ratios the
// issue's bars are about: the throughput ratio is the median, over the
// rounds, of the contender's decisions/s in a round ÷ the baseline's in the
// same round, with the smallest and largest such ratio. It runs only with
// RATELIMIT_BENCH_REPORT=1; RATELIMIT_BENCH_ROUNDS overrides the 15 rounds.
func TestReport(t *testing.T) {
	if os.Getenv("RATELIMIT_BENCH_REPORT") == "" {
		t.Skip("set RATELIMIT_BENCH_REPORT=1 to print the comparison table")
	}
	rounds := 15
	if v := os.Getenv("RATELIMIT_BENCH_ROUNDS"); v != "" {
		if _, err := fmt.Sscan(v, &rounds); err != nil || rounds < 1 {
			t.Fatalf("RATELIMIT_BENCH_ROUNDS=%q: want a positive integer", v)
		}
	}
	groups := []struct {
		name     string
		cs       []contender
		baseline string
		addr     string
	}{
		{"Redis (go-redis v9, one client, pool 64)", redisContenders, "redis_rate", redisAddr(t)},
		{"Valkey (valkey-go, one client)", valkeyContenders, "incr-pexpire", valkeyAddr(t)},
	}
	var out strings.Builder
	for _, g := range groups {
		fmt.Fprintf(&out, "\n%s, %d rounds. Throughput ratio: the median over the rounds of decisions/s ÷ %s's in the same round, (smallest–largest); p99 ratio: median p99 ÷ %s's.\n\n", g.name, rounds, g.baseline, g.baseline)
		stats := goredis.NewClient(&goredis.Options{Addr: g.addr})
		defer stats.Close()
		fmt.Fprintf(&out, "| workload | contender | decisions/s | p99 | failures | server µs/decision | throughput ratio (range) | p99 ratio |\n|---|---|---:|---:|---:|---:|---:|---:|\n")
		for _, sh := range shapes {
			n := 1000
			if sh.callers > 1 {
				n = 5000
			}
			decide := make([]decideFunc, len(g.cs))
			for i, c := range g.cs {
				decide[i] = c.make(t, prefix())
				run(decide[i], 300, sh.callers, sh.hot) // warm up
			}
			// Per contender, each round's throughput, p99 and server time;
			// the table shows their medians, which a burst of load from
			// elsewhere on a shared machine moves much less than a mean.
			type acc struct {
				rates, p99s, usecs []float64
				failures           int64
			}
			accs := make([]acc, len(g.cs))
			for r := 0; r < rounds; r++ {
				for j := range g.cs {
					i := (j + r) % len(g.cs) // rotate who goes first
					stats.ConfigResetStat(context.Background())
					res, lat := runLat(decide[i], n, sh.callers, sh.hot)
					usec := serverUsec(t, stats)
					slices.Sort(lat)
					accs[i].rates = append(accs[i].rates, res.perSec())
					accs[i].p99s = append(accs[i].p99s, float64(lat[len(lat)*99/100]))
					accs[i].usecs = append(accs[i].usecs, usec/float64(res.ops))
					accs[i].failures += res.failures
				}
			}
			base := slices.IndexFunc(g.cs, func(c contender) bool { return c.name == g.baseline })
			for i, c := range g.cs {
				ratios := make([]float64, rounds)
				for r := range ratios {
					ratios[r] = accs[i].rates[r] / accs[base].rates[r]
				}
				p99 := median(accs[i].p99s)
				fmt.Fprintf(&out, "| %s | %s | %.0f | %v | %d | %.1f | %.2f (%.2f–%.2f) | %.2f |\n", sh.name, c.name, median(accs[i].rates),
					time.Duration(p99).Round(time.Microsecond), accs[i].failures, median(accs[i].usecs),
					median(ratios), slices.Min(ratios), slices.Max(ratios), p99/median(accs[base].p99s))
			}
		}
	}
	publish(t, out.String())
}

// publish logs a report's table and, when RATELIMIT_BENCH_OUT names a
// file, appends it there: bench/run.sh splices that file into
// docs/benchmarks.md.
func publish(t *testing.T, table string) {
	t.Log(table)
	path := os.Getenv("RATELIMIT_BENCH_OUT")
	if path == "" {
		return
	}
	f, err := os.OpenFile(path, os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if _, err := f.WriteString(table + "\n"); err != nil {
		t.Fatal(err)
	}
}

func median(v []float64) float64 {
	s := slices.Clone(v)
	slices.Sort(s)
	return s[len(s)/2]
}

// serverUsec sums the server's CPU time in microseconds over every command
// since the last CONFIG RESETSTAT (INFO commandstats).
func serverUsec(t *testing.T, c *goredis.Client) float64 {
	info, err := c.Info(context.Background(), "commandstats").Result()
	if err != nil {
		t.Fatalf("INFO commandstats: %v", err)
	}
	var sum float64
	for _, line := range strings.Split(info, "\n") {
		if !strings.HasPrefix(line, "cmdstat_") || strings.HasPrefix(line, "cmdstat_info") || strings.HasPrefix(line, "cmdstat_config") {
			continue
		}
		for _, f := range strings.Split(line[strings.IndexByte(line, ':')+1:], ",") {
			if v, ok := strings.CutPrefix(f, "usec="); ok {
				var u float64
				fmt.Sscan(v, &u)
				sum += u
			}
		}
	}
	return sum
}

// runLat is run that also returns every latency.
func runLat(decide decideFunc, n, callers int, hot bool) (result, []time.Duration) {
	ctx := context.Background()
	var next, failures atomic.Int64
	lat := make([][]time.Duration, callers)
	var wg sync.WaitGroup
	start := time.Now()
	for c := 0; c < callers; c++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			mine := make([]time.Duration, 0, n/callers+1)
			for {
				i := next.Add(1) - 1
				if i >= int64(n) {
					break
				}
				key := keys[0]
				if !hot {
					key = keys[(i*7919)%nKeys]
				}
				t0 := time.Now()
				if err := decide(ctx, key); err != nil {
					failures.Add(1)
				}
				mine = append(mine, time.Since(t0))
			}
			lat[c] = mine
		}()
	}
	wg.Wait()
	return result{ops: n, elapsed: time.Since(start), failures: failures.Load()}, slices.Concat(lat...)
}

// TestOverAdmission sends 32 concurrent callers at one hot key for every
// algorithm on both stores, with the limiter's clock frozen (the store on
// the limiter's clock), and requires exactly the limit admitted. The peers,
// which read the server's clock, get a policy whose refill during the test
// is negligible (limit per hour), and are reported, not judged.
func TestOverAdmission(t *testing.T) {
	const limit, callers, each = 500, 32, 40 // 1280 requests for 500 slots
	frozen := clock.NewFake(time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC))
	algs := []algorithms.Algorithm{
		algorithms.FixedWindow(limit, time.Hour),
		algorithms.SlidingLog(limit, time.Hour),
		algorithms.SlidingWindow(limit, time.Hour),
		algorithms.TokenBucket(limit, time.Hour, limit),
		algorithms.LeakyBucket(limit, time.Hour, limit),
		algorithms.GCRA(limit, time.Hour, limit),
	}
	count := func(decide func(ctx context.Context) (bool, error)) (admitted, failures int64) {
		var a, f atomic.Int64
		var wg sync.WaitGroup
		for c := 0; c < callers; c++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for i := 0; i < each; i++ {
					ok, err := decide(context.Background())
					switch {
					case err != nil:
						f.Add(1)
					case ok:
						a.Add(1)
					}
				}
			}()
		}
		wg.Wait()
		return a.Load(), f.Load()
	}
	var out strings.Builder
	out.WriteString("\n| store | algorithm | admitted | limit | over-admitted | failed calls |\n|---|---|---:|---:|---:|---:|\n")
	stores := []struct {
		name string
		make func(p string) store.Store
	}{
		{"store/redis", func(p string) store.Store {
			s, err := rlredis.New(goredisClient(t), rlredis.WithPrefix(p), rlredis.WithServerClock(false))
			if err != nil {
				t.Fatal(err)
			}
			return s
		}},
		{"store/valkey", func(p string) store.Store {
			s, err := rlvalkey.New(valkeyClient(t), rlvalkey.WithPrefix(p), rlvalkey.WithServerClock(false))
			if err != nil {
				t.Fatal(err)
			}
			return s
		}},
	}
	for _, st := range stores {
		for _, a := range algs {
			lim, err := ratelimit.New(st.make(prefix()), a, ratelimit.WithClock(frozen))
			if err != nil {
				t.Fatal(err)
			}
			admitted, failures := count(func(ctx context.Context) (bool, error) {
				d, err := lim.Allow(ctx, "hot")
				return d.Allowed, err
			})
			fmt.Fprintf(&out, "| %s | %s | %d | %d | %d | %d |\n", st.name, a.Name(), admitted, limit, max(admitted-limit, 0), failures)
			if admitted != limit || failures != 0 {
				t.Errorf("%s %v: %d callers × %d on one key at a frozen time admitted %d with %d failures, want exactly %d and none",
					st.name, a, callers, each, admitted, failures, limit)
			}
		}
	}
	p := prefix()
	rr := redis_rate.NewLimiter(goredisClient(t))
	admitted, failures := count(func(ctx context.Context) (bool, error) {
		r, err := rr.Allow(ctx, p+":hot", redis_rate.PerHour(limit))
		return err == nil && r.Allowed > 0, err
	})
	fmt.Fprintf(&out, "| redis_rate | GCRA | %d | %d | %d | %d |\n", admitted, limit, max(admitted-limit, 0), failures)
	st, err := goredisstore.NewCtx(goredisClient(t), p+":")
	if err != nil {
		t.Fatal(err)
	}
	// throttled admits MaxBurst+1 at once.
	th, err := throttled.NewGCRARateLimiterCtx(st, throttled.RateQuota{MaxRate: throttled.PerHour(limit), MaxBurst: limit - 1})
	if err != nil {
		t.Fatal(err)
	}
	admitted, failures = count(func(ctx context.Context) (bool, error) {
		limited, _, err := th.RateLimitCtx(ctx, "hot", 1)
		return err == nil && !limited, err
	})
	fmt.Fprintf(&out, "| throttled | GCRA | %d | %d | %d | %d |\n", admitted, limit, max(admitted-limit, 0), failures)
	ust, err := ululeredis.NewStoreWithOptions(goredisClient(t), ulule.StoreOptions{Prefix: p + "-ulule"})
	if err != nil {
		t.Fatal(err)
	}
	ul := ulule.New(ust, ulule.Rate{Period: time.Hour, Limit: limit})
	admitted, failures = count(func(ctx context.Context) (bool, error) {
		c, err := ul.Get(ctx, "hot")
		return err == nil && !c.Reached, err
	})
	fmt.Fprintf(&out, "| ulule | fixed window | %d | %d | %d | %d |\n", admitted, limit, max(admitted-limit, 0), failures)
	publish(t, out.String())
}

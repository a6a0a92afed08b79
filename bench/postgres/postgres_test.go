package postgres_test

import (
	"context"
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/ratelimitkit/ratelimit"
	"github.com/ratelimitkit/ratelimit/algorithms"
	"github.com/ratelimitkit/ratelimit/clock"
	"github.com/ratelimitkit/ratelimit/store/postgres"
)

// The store accepts a pool.
var _ postgres.DB = (*pgxpool.Pool)(nil)

// callers is the exact number of goroutines that make decisions at once.
const callers = 16

// keyCount is the number of distinct keys of the spread benchmarks.
const keyCount = 10000

func pool(b *testing.B) *pgxpool.Pool {
	b.Helper()
	return poolWith(b, nil)
}

// poolWith is pool with the given run-time parameters set on every
// connection (such as synchronous_commit).
func poolWith(b *testing.B, params map[string]string) *pgxpool.Pool {
	b.Helper()
	url := os.Getenv("RATELIMIT_POSTGRES_URL")
	if url == "" {
		b.Skip("RATELIMIT_POSTGRES_URL is not set: run under scripts/with-servers.sh")
	}
	cfg, err := pgxpool.ParseConfig(url)
	if err != nil {
		b.Fatal(err)
	}
	cfg.MaxConns = callers
	cfg.MinConns = callers
	for k, v := range params {
		cfg.ConnConfig.RuntimeParams[k] = v
	}
	p, err := pgxpool.NewWithConfig(context.Background(), cfg)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(p.Close)
	return p
}

var seq atomic.Int64

// table returns a fresh table name, dropped with its function at the end.
func table(b *testing.B, p *pgxpool.Pool) string {
	b.Helper()
	name := fmt.Sprintf("rl_bench_%d_%d", os.Getpid(), seq.Add(1))
	b.Cleanup(func() {
		ctx := context.Background()
		_, _ = p.Exec(ctx, "DROP TABLE IF EXISTS "+pgx.Identifier{name}.Sanitize())
		for _, alg := range []string{"fixed_window", "sliding_log", "sliding_window", "token_bucket", "leaky_bucket", "gcra"} {
			_, _ = p.Exec(ctx, "DROP FUNCTION IF EXISTS "+pgx.Identifier{name + "_decide_" + alg}.Sanitize())
		}
	})
	return name
}

// run calls fn b.N times in total from exactly callers goroutines and
// reports decisions per second.
func run(b *testing.B, fn func(i int) error) {
	b.Helper()
	b.ReportAllocs()
	b.ResetTimer()
	if err := spreadCalls(b.N, fn); err != nil {
		b.Fatal(err)
	}
	b.StopTimer()
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "decisions/s")
}

// spread calls fn n times in total from exactly callers goroutines.
func spreadCalls(n int, fn func(i int) error) error {
	var next atomic.Int64
	var wg sync.WaitGroup
	var failed atomic.Int64
	var firstErr atomic.Value
	for g := 0; g < callers; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				i := next.Add(1) - 1
				if i >= int64(n) {
					return
				}
				if err := fn(int(i)); err != nil {
					failed.Add(1)
					firstErr.CompareAndSwap(nil, err)
				}
			}
		}()
	}
	wg.Wait()
	if f := failed.Load(); f > 0 {
		return fmt.Errorf("%d of %d calls failed; first: %v", f, n, firstErr.Load())
	}
	return nil
}

// baseline is the bare single-statement upsert counter the store is
// compared with, on its own table of the same pool.
func baseline(b *testing.B, p *pgxpool.Pool, spreadKeys bool) func(i int) error {
	b.Helper()
	ctx := context.Background()
	t := pgx.Identifier{table(b, p)}.Sanitize()
	if _, err := p.Exec(ctx, "CREATE TABLE "+t+" (k text PRIMARY KEY, n bigint NOT NULL)"); err != nil {
		b.Fatal(err)
	}
	q := "INSERT INTO " + t + " AS c (k, n) VALUES ($1, 1) ON CONFLICT (k) DO UPDATE SET n = c.n + 1 RETURNING n"
	return func(i int) error {
		var n int64
		return p.QueryRow(ctx, q, keyFor(spreadKeys, i)).Scan(&n)
	}
}

// limiter returns a limiter for alg on a migrated store (server clock) on a
// fresh table of p.
func limiter(b *testing.B, p *pgxpool.Pool, alg algorithms.Algorithm) *ratelimit.Limiter {
	b.Helper()
	s, err := postgres.New(p, postgres.WithTable(table(b, p)))
	if err != nil {
		b.Fatal(err)
	}
	if err := s.Migrate(context.Background()); err != nil {
		b.Fatal(err)
	}
	lim, err := ratelimit.New(s, alg)
	if err != nil {
		b.Fatal(err)
	}
	return lim
}

// keys are the 10,000 keys of the spread benchmarks.
var keys = func() []string {
	k := make([]string, keyCount)
	for i := range k {
		k[i] = "user-" + strconv.Itoa(i)
	}
	return k
}()

func keyFor(spread bool, i int) string {
	if !spread {
		return "hot"
	}
	return keys[(i*7919)%keyCount]
}

// algs are the algorithms benchmarked, with limits no benchmark reaches, so
// that every decision admits and writes, like the baseline; the sliding log,
// whose state grows with its limit, keeps at most about 100 entries.
func algs() []algorithms.Algorithm {
	return []algorithms.Algorithm{
		algorithms.GCRA(1_000_000, time.Second, 1_000_000),
		algorithms.TokenBucket(1_000_000, time.Second, 1_000_000),
		algorithms.FixedWindow(1_000_000_000, time.Second),
		algorithms.SlidingWindow(1_000_000_000, time.Second),
		algorithms.LeakyBucket(1_000_000, time.Second, 1_000_000),
		algorithms.SlidingLog(100_000, 20*time.Millisecond),
	}
}

// BenchmarkPostgres compares decisions per second of the store (server
// clock, one statement per decision) with a bare upsert counter on the same
// pool, with 16 concurrent callers on one hot key and on 10,000 keys.
func BenchmarkPostgres(b *testing.B) {
	p := pool(b)
	ctx := context.Background()
	for _, spread := range []bool{false, true} {
		name := "hot-key"
		if spread {
			name = "10k-keys"
		}
		b.Run(name, func(b *testing.B) {
			b.Run("baseline-upsert", func(b *testing.B) {
				run(b, baseline(b, p, spread))
			})
			for _, alg := range algs() {
				b.Run(alg.Name(), func(b *testing.B) {
					lim := limiter(b, p, alg)
					var denied atomic.Int64
					decide := func(i int) error {
						d, err := lim.Allow(ctx, keyFor(spread, i))
						if err == nil && !d.Allowed {
							denied.Add(1)
						}
						return err
					}
					// The baseline runs the same number of calls right
					// before and after, on the same pool, so that the
					// ratio compares like with like on a machine whose
					// load drifts.
					base := baseline(b, p, spread)
					timed := func(fn func(int) error) time.Duration {
						start := time.Now()
						if err := spreadCalls(b.N, fn); err != nil {
							b.Fatal(err)
						}
						return time.Since(start)
					}
					b.ReportAllocs()
					b.ResetTimer()
					b.StopTimer()
					before := timed(base)
					b.StartTimer()
					start := time.Now()
					if err := spreadCalls(b.N, decide); err != nil {
						b.Fatal(err)
					}
					ours := time.Since(start)
					b.StopTimer()
					after := timed(base)
					b.ReportMetric(float64(b.N)/ours.Seconds(), "decisions/s")
					b.ReportMetric(float64(b.N)/((before+after)/2).Seconds(), "baseline/s")
					b.ReportMetric(((before+after)/2).Seconds()/ours.Seconds(), "ratio")
					b.ReportMetric(float64(denied.Load())/float64(b.N), "denied/op")
				})
			}
		})
	}
}

// BenchmarkPostgresOverAdmission counts what 16 concurrent callers get
// admitted on one hot key with the clock standing still (the limiter's fake
// clock, WithServerClock(false)): exactly the limit, never more. Each iteration
// uses a new key; every caller asks more often than the limit allows.
func BenchmarkPostgresOverAdmission(b *testing.B) {
	p := pool(b)
	ctx := context.Background()
	const limit = 100
	for _, alg := range []algorithms.Algorithm{
		algorithms.GCRA(limit, time.Hour, limit),
		algorithms.TokenBucket(limit, time.Hour, limit),
		algorithms.FixedWindow(limit, time.Hour),
		algorithms.SlidingWindow(limit, time.Hour),
		algorithms.LeakyBucket(limit, time.Hour, limit),
		algorithms.SlidingLog(limit, time.Hour),
	} {
		b.Run(alg.Name(), func(b *testing.B) {
			s, err := postgres.New(p, postgres.WithTable(table(b, p)), postgres.WithServerClock(false))
			if err != nil {
				b.Fatal(err)
			}
			if err := s.Migrate(ctx); err != nil {
				b.Fatal(err)
			}
			lim, err := ratelimit.New(s, alg, ratelimit.WithClock(clock.NewFake(time.Date(2040, 1, 1, 0, 0, 0, 0, time.UTC))))
			if err != nil {
				b.Fatal(err)
			}
			var over, admittedTotal int64
			b.ResetTimer()
			for n := 0; n < b.N; n++ {
				key := fmt.Sprintf("hot-%d", n)
				var admitted atomic.Int64
				var wg sync.WaitGroup
				start := make(chan struct{})
				for g := 0; g < callers; g++ {
					wg.Add(1)
					go func() {
						defer wg.Done()
						<-start
						for i := 0; i < 2*limit/callers+1; i++ {
							d, err := lim.Allow(ctx, key)
							if err != nil {
								b.Error(err)
								return
							}
							if d.Allowed {
								admitted.Add(1)
							}
						}
					}()
				}
				close(start)
				wg.Wait()
				if a := admitted.Load(); a != limit {
					b.Errorf("%d callers on one key admitted %d, want exactly %d", callers, a, limit)
				}
				admittedTotal += admitted.Load()
				over += max(admitted.Load()-limit, 0)
			}
			b.ReportMetric(float64(admittedTotal)/float64(b.N), "admitted/key")
			b.ReportMetric(float64(over)/float64(b.N), "over-admitted/key")
		})
	}
}

// rounds is the number of interleaved rounds of BenchmarkPostgresRounds,
// and roundCalls the calls per side and round.
const (
	rounds     = 5
	roundCalls = 3000
)

// BenchmarkPostgresRounds is the comparison the figures come from:
// GCRA and the token bucket (server clock) against the bare upsert, 16
// callers, on one hot key and on 10,000 keys, under each
// synchronous_commit setting, in rounds that alternate which side runs
// first. It reports the median of the per-round throughput ratios (the
// store's decisions per second over the upsert's) with their range, and the
// same for the server's CPU time per call: the time the pool's backends
// spent on a CPU (the first field of /proc/<pid>/schedstat, in nanoseconds,
// summed over the pool's 16 backends), which needs the server on this
// machine. It also reports the medians over the rounds of both sides'
// rates and of their database CPU time per call, in microseconds, which
// docs/scaling.md's capacity model starts from. Run it with -benchtime 1x:
// each iteration is every round (bash bench/run.sh postgres).
func BenchmarkPostgresRounds(b *testing.B) {
	ctx := context.Background()
	for _, commit := range []string{"on", "off"} {
		for _, spread := range []bool{false, true} {
			work := "hot-key"
			if spread {
				work = "10k-keys"
			}
			for _, alg := range algs()[:2] {
				b.Run("sync-"+commit+"/"+work+"/"+alg.Name(), func(b *testing.B) {
					p := poolWith(b, map[string]string{"synchronous_commit": commit})
					pids := backends(b, p)
					lim := limiter(b, p, alg)
					decide := func(i int) error {
						d, err := lim.Allow(ctx, keyFor(spread, i))
						if err == nil && !d.Allowed {
							return fmt.Errorf("denied: the benchmark's limit is too low")
						}
						return err
					}
					base := baseline(b, p, spread)
					// measure runs fn roundCalls times and returns its wall
					// time and the backends' CPU time.
					measure := func(fn func(int) error) (wall, cpu time.Duration) {
						c0 := cpuTime(b, pids)
						start := time.Now()
						if err := spreadCalls(roundCalls, fn); err != nil {
							b.Fatal(err)
						}
						wall = time.Since(start)
						return wall, cpuTime(b, pids) - c0
					}
					// Warm both sides (connections, plans, rows) first.
					measure(base)
					measure(decide)
					for n := 0; n < b.N; n++ {
						var speed, cpu, dRate, bRate, dCPU, bCPU []float64
						for r := 0; r < rounds; r++ {
							var bw, bc, dw, dc time.Duration
							if r%2 == 0 {
								bw, bc = measure(base)
								dw, dc = measure(decide)
							} else {
								dw, dc = measure(decide)
								bw, bc = measure(base)
							}
							speed = append(speed, bw.Seconds()/dw.Seconds())
							cpu = append(cpu, dc.Seconds()/bc.Seconds())
							dRate = append(dRate, roundCalls/dw.Seconds())
							bRate = append(bRate, roundCalls/bw.Seconds())
							dCPU = append(dCPU, float64(dc.Microseconds())/roundCalls)
							bCPU = append(bCPU, float64(bc.Microseconds())/roundCalls)
						}
						report(b, "x-upsert", speed)
						report(b, "cpu-x-upsert", cpu)
						// The absolute figures docs/scaling.md's capacity
						// model starts from: medians over the rounds.
						b.ReportMetric(median(dRate), "decisions/s")
						b.ReportMetric(median(bRate), "upserts/s")
						b.ReportMetric(median(dCPU), "db-cpu-us/decision")
						b.ReportMetric(median(bCPU), "db-cpu-us/upsert")
					}
				})
			}
		}
	}
}

// report reports the median, least and greatest of vs under name.
func report(b *testing.B, name string, vs []float64) {
	slices.Sort(vs)
	b.ReportMetric(vs[len(vs)/2], name+"-median")
	b.ReportMetric(vs[0], name+"-min")
	b.ReportMetric(vs[len(vs)-1], name+"-max")
}

// backends returns the server process IDs of all of p's connections.
func backends(b *testing.B, p *pgxpool.Pool) []int {
	b.Helper()
	ctx := context.Background()
	conns := make([]*pgxpool.Conn, 0, callers)
	defer func() {
		for _, c := range conns {
			c.Release()
		}
	}()
	var pids []int
	for range callers {
		c, err := p.Acquire(ctx)
		if err != nil {
			b.Fatal(err)
		}
		conns = append(conns, c)
		var pid int
		if err := c.QueryRow(ctx, "SELECT pg_backend_pid()").Scan(&pid); err != nil {
			b.Fatal(err)
		}
		pids = append(pids, pid)
	}
	return pids
}

// cpuTime is the CPU time the processes pids have used, from
// /proc/<pid>/schedstat.
func cpuTime(b *testing.B, pids []int) time.Duration {
	b.Helper()
	var sum time.Duration
	for _, pid := range pids {
		raw, err := os.ReadFile(fmt.Sprintf("/proc/%d/schedstat", pid))
		if err != nil {
			b.Fatalf("server CPU time: %v (the server must run on this machine)", err)
		}
		ns, err := strconv.ParseInt(strings.Fields(string(raw))[0], 10, 64)
		if err != nil {
			b.Fatal(err)
		}
		sum += time.Duration(ns)
	}
	return sum
}

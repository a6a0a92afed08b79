// Package lease_test measures the SDK's leases: uncontended TryAcquire +
// Release on Redis beside github.com/bsm/redislock's Obtain + Release on the
// same server, contention on one key on every store, and takeover after a
// holder stops renewing. The figures in docs/benchmarks.md come from
// TestLeaseReport (RATELIMIT_BENCH_REPORT=1), run by bench/lease/run.sh.
package lease_test

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

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/bsm/redislock"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	goredis "github.com/redis/go-redis/v9"
	vk "github.com/valkey-io/valkey-go"

	benchmemory "github.com/ratelimitkit/ratelimit/bench/memory"
	"github.com/ratelimitkit/ratelimit/internal/testserver"
	"github.com/ratelimitkit/ratelimit/lease"
	"github.com/ratelimitkit/ratelimit/store"
	"github.com/ratelimitkit/ratelimit/store/dynamo"
	"github.com/ratelimitkit/ratelimit/store/memory"
	"github.com/ratelimitkit/ratelimit/store/postgres"
	rlredis "github.com/ratelimitkit/ratelimit/store/redis"
	rlvalkey "github.com/ratelimitkit/ratelimit/store/valkey"
)

var seq atomic.Int64

func unique(prefix string) string {
	return fmt.Sprintf("%s%d_%d", prefix, time.Now().UnixNano()%1e9, seq.Add(1))
}

func env(tb testing.TB, name string) string {
	v := os.Getenv(name)
	if v == "" {
		tb.Skipf("%s is not set: run under scripts/with-servers.sh", name)
	}
	return v
}

func redisClient(tb testing.TB) *goredis.Client {
	c := goredis.NewClient(&goredis.Options{Addr: env(tb, "RATELIMIT_REDIS_ADDR"), PoolSize: 64, ContextTimeoutEnabled: true})
	tb.Cleanup(func() { c.Close() })
	return c
}

// updateOnly hides the store's leasewire.Runner, so the locker uses Update.
type updateOnly struct{ store.Store }

// stores are the stores the lease runs on, each made fresh (own prefix or
// table) with the server's clock where it has one.
var stores = []struct {
	name string
	make func(tb testing.TB) store.Store
}{
	{"memory", func(tb testing.TB) store.Store { return memory.MustNew() }},
	{"redis", func(tb testing.TB) store.Store {
		s, err := rlredis.New(redisClient(tb), rlredis.WithPrefix(unique("bench-lease-")))
		if err != nil {
			tb.Fatal(err)
		}
		return s
	}},
	{"redis (Update path)", func(tb testing.TB) store.Store {
		s, err := rlredis.New(redisClient(tb), rlredis.WithPrefix(unique("bench-lease-")))
		if err != nil {
			tb.Fatal(err)
		}
		return updateOnly{s}
	}},
	{"valkey", func(tb testing.TB) store.Store {
		c, err := vk.NewClient(vk.ClientOption{InitAddress: []string{env(tb, "RATELIMIT_VALKEY_ADDR")}, DisableCache: true})
		if err != nil {
			tb.Fatal(err)
		}
		tb.Cleanup(c.Close)
		s, err := rlvalkey.New(c, rlvalkey.WithPrefix(unique("bench-lease-")))
		if err != nil {
			tb.Fatal(err)
		}
		return s
	}},
	{"postgres", func(tb testing.TB) store.Store {
		ctx := context.Background()
		p, err := pgxpool.New(ctx, env(tb, "RATELIMIT_POSTGRES_URL"))
		if err != nil {
			tb.Fatal(err)
		}
		tb.Cleanup(p.Close)
		table := unique("bench_lease_")
		s, err := postgres.New(p, postgres.WithTable(table))
		if err != nil {
			tb.Fatal(err)
		}
		if err := s.Migrate(ctx); err != nil {
			tb.Fatal(err)
		}
		tb.Cleanup(func() {
			for _, stmt := range []string{"DROP TABLE IF EXISTS " + pgx.Identifier{table}.Sanitize(),
				"DROP FUNCTION IF EXISTS " + pgx.Identifier{table + "_lease"}.Sanitize()} {
				if _, err := p.Exec(context.Background(), stmt); err != nil {
					tb.Error(err)
				}
			}
		})
		return s
	}},
	{"dynamodb (dynalite)", func(tb testing.TB) store.Store {
		ctx := context.Background()
		client := dynamodb.NewFromConfig(aws.Config{
			Region:      "us-east-1",
			Credentials: credentials.NewStaticCredentialsProvider("test", "test", ""),
		}, func(o *dynamodb.Options) { o.BaseEndpoint = aws.String(env(tb, "RATELIMIT_DYNAMODB_ENDPOINT")) })
		table := unique("bench-lease-")
		if _, err := dynamo.CreateTable(ctx, client, table); err != nil {
			tb.Fatal(err)
		}
		tb.Cleanup(func() {
			if _, err := client.DeleteTable(context.Background(), &dynamodb.DeleteTableInput{TableName: &table}); err != nil {
				tb.Error(err)
			}
		})
		s, err := dynamo.New(client, dynamo.WithTable(table))
		if err != nil {
			tb.Fatal(err)
		}
		return s
	}},
}

// cycle is one uncontended TryAcquire + Release (or its peer's Obtain +
// Release) on key.
type cycle func(ctx context.Context, key string) error

func sdkCycle(tb testing.TB, s store.Store) cycle {
	lk, err := lease.New(s, 10*time.Second)
	if err != nil {
		tb.Fatal(err)
	}
	return func(ctx context.Context, key string) error {
		le, err := lk.TryAcquire(ctx, key)
		if err != nil {
			return err
		}
		return le.Release(ctx)
	}
}

func redislockCycle(tb testing.TB, c *goredis.Client) cycle {
	lk := redislock.New(c)
	prefix := unique("bench-redislock-")
	return func(ctx context.Context, key string) error {
		l, err := lk.Obtain(ctx, prefix+key, 10*time.Second, nil)
		if err != nil {
			return err
		}
		return l.Release(ctx)
	}
}

// BenchmarkUncontended is one TryAcquire + Release per op, a fresh key per
// op from a set of 1024, beside redislock on the same server.
func BenchmarkUncontended(b *testing.B) {
	c := redisClient(b)
	for _, cs := range []struct {
		name string
		make func() cycle
	}{
		{"lease/redis", func() cycle { return sdkCycle(b, stores[1].make(b)) }},
		{"lease/redis-update-path", func() cycle { return sdkCycle(b, stores[2].make(b)) }},
		{"redislock", func() cycle { return redislockCycle(b, c) }},
	} {
		b.Run(cs.name, func(b *testing.B) {
			fn := cs.make()
			ctx := context.Background()
			b.ReportAllocs()
			i := 0
			for b.Loop() {
				if err := fn(ctx, fmt.Sprintf("k%d", i%1024)); err != nil {
					b.Fatal(err)
				}
				i++
			}
		})
	}
}

// timeCycles runs n cycles on distinct keys and returns cycles per second.
func timeCycles(tb testing.TB, fn cycle, n int, round int) float64 {
	ctx := context.Background()
	start := time.Now()
	for i := 0; i < n; i++ {
		if err := fn(ctx, fmt.Sprintf("r%d-k%d", round, i%256)); err != nil {
			tb.Fatal(err)
		}
	}
	return float64(n) / time.Since(start).Seconds()
}

// contended runs workers goroutines that each take the lease on one key
// (Acquire, polling every poll) for hold, count times, and reports the
// acquisitions per second, overlaps and fence inversions. With shared, the
// goroutines share one Locker, as in one process; otherwise each has its
// own, as if each were a process of its own.
func contended(tb testing.TB, s store.Store, shared bool, workers, count int, hold, poll time.Duration) (perSec float64, overlaps, inversions, errs int64) {
	key := unique("contended-")
	var inside, lastFence atomic.Int64
	var wg sync.WaitGroup
	one, err := lease.New(s, 10*time.Second, lease.WithPollInterval(poll))
	if err != nil {
		tb.Fatal(err)
	}
	start := time.Now()
	for w := 0; w < workers; w++ {
		lk := one
		if !shared {
			if lk, err = lease.New(s, 10*time.Second, lease.WithPollInterval(poll)); err != nil {
				tb.Fatal(err)
			}
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			ctx := context.Background()
			for i := 0; i < count; i++ {
				le, err := lk.Acquire(ctx, key)
				if err != nil {
					atomic.AddInt64(&errs, 1)
					continue
				}
				if inside.Add(1) != 1 {
					atomic.AddInt64(&overlaps, 1)
				}
				if prev := lastFence.Swap(le.Fence()); prev >= le.Fence() {
					atomic.AddInt64(&inversions, 1)
				}
				time.Sleep(hold)
				inside.Add(-1)
				if err := le.Release(ctx); err != nil {
					atomic.AddInt64(&errs, 1)
				}
			}
		}()
	}
	wg.Wait()
	return float64(workers*count) / time.Since(start).Seconds(), overlaps, inversions, errs
}

// takeover measures how long after a holder's acquire was sent another
// worker, already waiting in Acquire, gets the key when the holder stops
// renewing (it neither extends nor releases).
func takeover(tb testing.TB, s store.Store, ttl, poll time.Duration) time.Duration {
	ctx := context.Background()
	key := unique("takeover-")
	lk, err := lease.New(s, ttl, lease.WithPollInterval(poll), lease.WithMargin(ttl/10))
	if err != nil {
		tb.Fatal(err)
	}
	sent := time.Now()
	if _, err := lk.TryAcquire(ctx, key); err != nil {
		tb.Fatal(err)
	}
	// The holder now stops: no Extend, no Release.
	if _, err := lk.Acquire(ctx, key); err != nil {
		tb.Fatal(err)
	}
	return time.Since(sent)
}

// scriptStats returns the calls and usec of EVALSHA and EVAL so far, from
// INFO commandstats.
func scriptStats(tb testing.TB, c *goredis.Client) (calls, usec int64) {
	info, err := c.Info(context.Background(), "commandstats").Result()
	if err != nil {
		tb.Fatal(err)
	}
	for _, line := range strings.Split(info, "\n") {
		name, fields, ok := strings.Cut(strings.TrimSpace(line), ":")
		if name != "cmdstat_evalsha" && name != "cmdstat_eval" || !ok {
			continue
		}
		for _, f := range strings.Split(fields, ",") {
			k, v, _ := strings.Cut(f, "=")
			n, err := strconv.ParseInt(v, 10, 64)
			switch {
			case k != "calls" && k != "usec":
			case err != nil:
				tb.Fatalf("INFO commandstats: %q: %v", line, err)
			case k == "calls":
				calls += n
			default:
				usec += n
			}
		}
	}
	return calls, usec
}

func median(v []float64) float64 {
	s := slices.Clone(v)
	slices.Sort(s)
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}

// TestLeaseReport prints the tables of docs/benchmarks.md's lease section.
// It runs only with RATELIMIT_BENCH_REPORT=1.
func TestLeaseReport(t *testing.T) {
	if os.Getenv("RATELIMIT_BENCH_REPORT") == "" {
		t.Skip("set RATELIMIT_BENCH_REPORT=1 to print the lease tables")
	}
	var out strings.Builder

	t.Run("uncontended", func(t *testing.T) {
		// Uncontended, on one server and one client. The contenders take
		// turns cycle by cycle (rotating who goes first), so a burst of
		// load from elsewhere hits all alike; each round's figure is the
		// median cycle time, the ratio is per round (redislock's median
		// time ÷ the contender's, so above 1 is faster), and the table
		// shows the median ratio and its range over the rounds.
		const rounds, n = 21, 200
		c := redisClient(t)
		sdkStore, err := rlredis.New(c, rlredis.WithPrefix(unique("bench-lease-")))
		if err != nil {
			t.Fatal(err)
		}
		contenders := []struct {
			name string
			fn   cycle
		}{
			{"redislock Obtain+Release", redislockCycle(t, c)},
			{"lease TryAcquire+Release (Lua form)", sdkCycle(t, sdkStore)},
			{"lease TryAcquire+Release (Update path)", sdkCycle(t, updateOnly{sdkStore})},
		}
		ctx := context.Background()
		for i, cs := range contenders {
			timeCycles(t, cs.fn, 500, -1-i) // warm up
		}
		medians := make([][]float64, len(contenders)) // per contender, per round, µs
		for r := 0; r < rounds; r++ {
			times := make([][]float64, len(contenders))
			for k := 0; k < n; k++ {
				key := fmt.Sprintf("r%d-k%d", r, k%256)
				for j := range contenders {
					i := (j + k) % len(contenders)
					start := time.Now()
					if err := contenders[i].fn(ctx, key); err != nil {
						t.Fatal(err)
					}
					times[i] = append(times[i], float64(time.Since(start).Microseconds()))
				}
			}
			for i := range contenders {
				medians[i] = append(medians[i], median(times[i]))
			}
		}
		fmt.Fprintf(&out, "\nUncontended on Redis (one go-redis client, same server; %d rounds of %d cycles, the contenders taking turns cycle by cycle; ratio = redislock's median cycle time ÷ the contender's, per round)\n\n", rounds, n)
		fmt.Fprintf(&out, "| contender | median cycle (µs) | ratio to redislock: median | min | max |\n|---|---:|---:|---:|---:|\n")
		for i, cs := range contenders {
			ratios := make([]float64, rounds)
			for r := range ratios {
				ratios[r] = medians[0][r] / medians[i][r]
			}
			fmt.Fprintf(&out, "| %s | %.0f | %.2f | %.2f | %.2f |\n", cs.name, median(medians[i]), median(ratios), slices.Min(ratios), slices.Max(ratios))
		}

		// The same contenders from 16 goroutines at once, each on keys
		// of its own: per round, each contender in turn (rotating who goes
		// first) runs 16 goroutines of n/4 cycles, and the ratio is
		// redislock's elapsed time ÷ the contender's (above 1 is faster).
		const workers = 16
		elapsed := make([][]float64, len(contenders))
		for r := 0; r < rounds; r++ {
			for j := range contenders {
				i := (j + r) % len(contenders)
				var wg sync.WaitGroup
				errs := make(chan error, workers)
				start := time.Now()
				for w := 0; w < workers; w++ {
					wg.Add(1)
					go func() {
						defer wg.Done()
						for k := 0; k < n/4; k++ {
							if err := contenders[i].fn(ctx, fmt.Sprintf("p-r%d-w%d-k%d", r, w, k)); err != nil {
								errs <- err
								return
							}
						}
					}()
				}
				wg.Wait()
				elapsed[i] = append(elapsed[i], float64(time.Since(start).Microseconds()))
				close(errs)
				for err := range errs {
					t.Fatal(err)
				}
			}
		}
		fmt.Fprintf(&out, "\n%d goroutines at once, each on keys of its own (%d rounds of %d cycles per goroutine, the contenders taking turns round by round; ratio = redislock's elapsed time ÷ the contender's, per round)\n\n", workers, rounds, n/4)
		fmt.Fprintf(&out, "| contender | cycles/s | ratio to redislock: median | min | max |\n|---|---:|---:|---:|---:|\n")
		for i, cs := range contenders {
			ratios := make([]float64, rounds)
			for r := range ratios {
				ratios[r] = elapsed[0][r] / elapsed[i][r]
			}
			fmt.Fprintf(&out, "| %s | %.0f | %.2f | %.2f | %.2f |\n", cs.name, float64(workers*(n/4))/median(elapsed[i])*1e6, median(ratios), slices.Min(ratios), slices.Max(ratios))
		}
	})
	t.Run("cost", func(t *testing.T) {
		// Where a cycle's time goes, on a private redis-server that only
		// this test talks to, so INFO commandstats counts its commands
		// alone: round trips (EVALSHA and EVAL calls) and server time
		// (their usec, which includes the commands a script runs) per
		// operation, and the client's CPU time and allocations per cycle.
		// Rounds alternate who goes first; the table gives medians over
		// the rounds.
		const rounds, n = 11, 500
		private := testserver.StartRedis(t)
		c := goredis.NewClient(&goredis.Options{Addr: private.Addr(), ContextTimeoutEnabled: true}) // as docs/stores/redis.md says; both sides share it
		t.Cleanup(func() { c.Close() })
		ctx := context.Background()
		s, err := rlredis.New(c, rlredis.WithPrefix(unique("bench-lease-")))
		if err != nil {
			t.Fatal(err)
		}
		lk, err := lease.New(s, 10*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		rl := redislock.New(c)
		rlPrefix := unique("bench-redislock-")
		type side struct {
			name             string
			acquire, release func(keys []string) error
			cycle            cycle
		}
		sides := []side{
			{name: "redislock Obtain / Release", cycle: redislockCycle(t, c)},
			{name: "lease TryAcquire / Release (Lua form)", cycle: sdkCycle(t, s)},
		}
		var locks []*redislock.Lock
		sides[0].acquire = func(keys []string) error {
			locks = locks[:0]
			for _, k := range keys {
				l, err := rl.Obtain(ctx, rlPrefix+k, 10*time.Second, nil)
				if err != nil {
					return err
				}
				locks = append(locks, l)
			}
			return nil
		}
		sides[0].release = func([]string) error {
			for _, l := range locks {
				if err := l.Release(ctx); err != nil {
					return err
				}
			}
			return nil
		}
		var leases []*lease.Lease
		sides[1].acquire = func(keys []string) error {
			leases = leases[:0]
			for _, k := range keys {
				le, err := lk.TryAcquire(ctx, k)
				if err != nil {
					return err
				}
				leases = append(leases, le)
			}
			return nil
		}
		sides[1].release = func([]string) error {
			for _, le := range leases {
				if err := le.Release(ctx); err != nil {
					return err
				}
			}
			return nil
		}
		type figures struct{ trips, usec [2][]float64 } // per op (acquire, release), per round
		figs := make([]figures, len(sides))
		for r := 0; r < rounds; r++ {
			keys := make([]string, n)
			for i := range keys {
				keys[i] = fmt.Sprintf("cost-r%d-k%d", r, i)
			}
			for j := range sides {
				i := (j + r) % len(sides)
				for op, fn := range []func([]string) error{sides[i].acquire, sides[i].release} {
					calls0, usec0 := scriptStats(t, c)
					if err := fn(keys); err != nil {
						t.Fatal(err)
					}
					calls1, usec1 := scriptStats(t, c)
					figs[i].trips[op] = append(figs[i].trips[op], float64(calls1-calls0)/n)
					figs[i].usec[op] = append(figs[i].usec[op], float64(usec1-usec0)/float64(calls1-calls0))
				}
			}
		}
		fmt.Fprintf(&out, "\nWhere the time goes (a private redis-server only this test uses; %d rounds of %d acquires then %d releases per contender, on fresh keys; medians over the rounds; server µs = INFO commandstats usec per EVALSHA/EVAL, the commands a script runs included; client CPU = getrusage of this process over %d cycles per round)\n\n", rounds, n, n, n)
		// The client's CPU time (the process's, user and system) per
		// cycle, in rounds that alternate who goes first.
		cpu := make([][]float64, len(sides))
		for r := 0; r < rounds; r++ {
			for j := range sides {
				i := (j + r) % len(sides)
				start := benchmemory.CPUTime()
				for k := 0; k < n; k++ {
					if err := sides[i].cycle(ctx, fmt.Sprintf("cpu-r%d-k%d", r, k)); err != nil {
						t.Fatal(err)
					}
				}
				cpu[i] = append(cpu[i], float64((benchmemory.CPUTime()-start).Microseconds())/n)
			}
		}
		fmt.Fprintf(&out, "| contender | round trips per acquire | per release | server µs per acquire | per release | client CPU µs per cycle | client allocs per cycle |\n|---|---:|---:|---:|---:|---:|---:|\n")
		for i, sd := range sides {
			k := 0
			allocs := testing.AllocsPerRun(500, func() {
				k++
				if err := sd.cycle(ctx, fmt.Sprintf("allocs-%d", k)); err != nil {
					t.Fatal(err)
				}
			})
			f := figs[i]
			fmt.Fprintf(&out, "| %s | %.2f | %.2f | %.1f | %.1f | %.1f | %.0f |\n", sd.name, median(f.trips[0]), median(f.trips[1]), median(f.usec[0]), median(f.usec[1]), median(cpu[i]), allocs)
		}
	})
	t.Run("contended", func(t *testing.T) {
		// Contended: 32 goroutines, one key, 100µs critical section.
		const workers, count, hold, poll = 32, 8, 100 * time.Microsecond, 2 * time.Millisecond
		fmt.Fprintf(&out, "\nContended: %d goroutines, one key, each taking the lease %d times and holding it %v; Acquire polls every %v (jittered)\n\n", workers, count, hold, poll)
		fmt.Fprintf(&out, "| store | lockers | acquisitions/s | overlaps | fence inversions | errors |\n|---|---|---:|---:|---:|---:|\n")
		for _, st := range stores {
			for _, shared := range []bool{true, false} {
				lockers := fmt.Sprintf("%d (one per goroutine)", workers)
				if shared {
					lockers = "1 (shared)"
				}
				perSec, ov, inv, errs := contended(t, st.make(t), shared, workers, count, hold, poll)
				fmt.Fprintf(&out, "| %s | %s | %.0f | %d | %d | %d |\n", st.name, lockers, perSec, ov, inv, errs)
				if ov != 0 || inv != 0 || errs != 0 {
					t.Errorf("%s: %d overlaps, %d fence inversions, %d errors; want 0", st.name, ov, inv, errs)
				}
			}
		}

	})
	t.Run("takeover", func(t *testing.T) {
		// Takeover after a holder stops renewing.
		const ttl, tpoll, reps = 500 * time.Millisecond, 50 * time.Millisecond, 5
		fmt.Fprintf(&out, "\nTakeover: a holder takes a lease of TTL %v and stops; a waiter in Acquire (poll %v) gets it after (from the holder's acquire being sent; %d runs)\n\n", ttl, tpoll, reps)
		fmt.Fprintf(&out, "| store | median | max | bar: TTL + poll = %v |\n|---|---:|---:|---|\n", ttl+tpoll)
		for _, st := range stores {
			s := st.make(t)
			var ds []float64
			for r := 0; r < reps; r++ {
				ds = append(ds, float64(takeover(t, s, ttl, tpoll)))
			}
			worst := time.Duration(slices.Max(ds))
			verdict := "met"
			if worst > ttl+tpoll {
				verdict = "**not met**"
			}
			fmt.Fprintf(&out, "| %s | %v | %v | %s |\n", st.name, time.Duration(median(ds)).Round(time.Millisecond), worst.Round(time.Millisecond), verdict)
		}
	})
	fmt.Println(out.String())
}

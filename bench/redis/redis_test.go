package redis_test

import (
	"context"
	"fmt"
	"os"
	"slices"
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
	vk "github.com/valkey-io/valkey-go"

	"github.com/ratelimitkit/ratelimit"
	"github.com/ratelimitkit/ratelimit/algorithms"
	"github.com/ratelimitkit/ratelimit/store"
	rlredis "github.com/ratelimitkit/ratelimit/store/redis"
	rlvalkey "github.com/ratelimitkit/ratelimit/store/valkey"
)

// The policy every contender applies: high enough that (almost) every call
// is admitted, so all of them do the same work on every call.
const (
	rate   = 1_000_000 // per second
	burst  = 1_000_000
	nKeys  = 10_000
	poolSz = 64 // connections in the go-redis pool, for every contender
)

var keys = func() []string {
	k := make([]string, nKeys)
	for i := range k {
		k[i] = fmt.Sprintf("user-%05d", i)
	}
	return k
}()

// decideFunc makes one decision for key and reports whether the call
// failed.
type decideFunc func(ctx context.Context, key string) error

// contender is one implementation under test.
type contender struct {
	name string
	make func(tb testing.TB, prefix string) decideFunc
}

var prefixSeq atomic.Int64

func prefix() string { return fmt.Sprintf("bench-%d-%d", time.Now().UnixNano(), prefixSeq.Add(1)) }

func redisAddr(tb testing.TB) string {
	a := os.Getenv("RATELIMIT_REDIS_ADDR")
	if a == "" {
		tb.Skip("RATELIMIT_REDIS_ADDR is not set: run under scripts/with-servers.sh")
	}
	return a
}

func valkeyAddr(tb testing.TB) string {
	a := os.Getenv("RATELIMIT_VALKEY_ADDR")
	if a == "" {
		tb.Skip("RATELIMIT_VALKEY_ADDR is not set: run under scripts/with-servers.sh")
	}
	return a
}

var (
	clientsMu sync.Mutex
	goClient  *goredis.Client
	vkClient  vk.Client
)

// goredisClient is the one go-redis client every Redis contender shares,
// with ContextTimeoutEnabled as docs/stores/redis.md tells users to create
// it (without it the store runs each call on a goroutine of its own, so
// that the limiter's store budget still bounds it). The peers, which pass
// contexts without deadlines, run alike with or without it.
// RATELIMIT_BENCH_CONTEXT_TIMEOUT=0 creates it without, to measure what a
// user who leaves go-redis's default pays.
func goredisClient(tb testing.TB) *goredis.Client {
	clientsMu.Lock()
	defer clientsMu.Unlock()
	if goClient == nil {
		ctxTimeout := os.Getenv("RATELIMIT_BENCH_CONTEXT_TIMEOUT") != "0"
		goClient = goredis.NewClient(&goredis.Options{Addr: redisAddr(tb), PoolSize: poolSz, MinIdleConns: 32, ContextTimeoutEnabled: ctxTimeout})
	}
	return goClient
}

// valkeyClient is the one valkey-go client every Valkey contender shares.
func valkeyClient(tb testing.TB) vk.Client {
	clientsMu.Lock()
	defer clientsMu.Unlock()
	if vkClient == nil {
		c, err := vk.NewClient(vk.ClientOption{InitAddress: []string{valkeyAddr(tb)}, DisableCache: true})
		if err != nil {
			tb.Fatalf("valkey.NewClient: %v", err)
		}
		vkClient = c
	}
	return vkClient
}

func sdk(tb testing.TB, s store.Store, alg algorithms.Algorithm) decideFunc {
	lim, err := ratelimit.New(s, alg)
	if err != nil {
		tb.Fatal(err)
	}
	return func(ctx context.Context, key string) error {
		_, err := lim.Allow(ctx, key)
		return err
	}
}

func redisStore(tb testing.TB, p string) store.Store {
	s, err := rlredis.New(goredisClient(tb), rlredis.WithPrefix(p))
	if err != nil {
		tb.Fatal(err)
	}
	return s
}

func valkeyStore(tb testing.TB, p string) store.Store {
	s, err := rlvalkey.New(valkeyClient(tb), rlvalkey.WithPrefix(p))
	if err != nil {
		tb.Fatal(err)
	}
	return s
}

var redisContenders = []contender{
	{"sdk-gcra", func(tb testing.TB, p string) decideFunc {
		return sdk(tb, redisStore(tb, p), algorithms.GCRA(rate, time.Second, burst))
	}},
	{"sdk-token_bucket", func(tb testing.TB, p string) decideFunc {
		return sdk(tb, redisStore(tb, p), algorithms.TokenBucket(rate, time.Second, burst))
	}},
	// The other built-ins with a generated form, so that every algorithm
	// is held to redis_rate (the sliding log has a section of its own).
	{"sdk-leaky_bucket", func(tb testing.TB, p string) decideFunc {
		return sdk(tb, redisStore(tb, p), algorithms.LeakyBucket(rate, time.Second, burst))
	}},
	{"sdk-fixed_window", func(tb testing.TB, p string) decideFunc {
		return sdk(tb, redisStore(tb, p), algorithms.FixedWindow(rate, time.Second))
	}},
	{"sdk-sliding_window", func(tb testing.TB, p string) decideFunc {
		return sdk(tb, redisStore(tb, p), algorithms.SlidingWindow(rate, time.Second))
	}},
	{"redis_rate", func(tb testing.TB, p string) decideFunc {
		lim := redis_rate.NewLimiter(goredisClient(tb))
		limit := redis_rate.Limit{Rate: rate, Burst: burst, Period: time.Second}
		return func(ctx context.Context, key string) error {
			_, err := lim.Allow(ctx, p+":"+key, limit)
			return err
		}
	}},
	{"throttled", func(tb testing.TB, p string) decideFunc {
		st, err := goredisstore.NewCtx(goredisClient(tb), p+":")
		if err != nil {
			tb.Fatal(err)
		}
		lim, err := throttled.NewGCRARateLimiterCtx(st, throttled.RateQuota{MaxRate: throttled.PerSec(rate), MaxBurst: burst})
		if err != nil {
			tb.Fatal(err)
		}
		return func(ctx context.Context, key string) error {
			_, _, err := lim.RateLimitCtx(ctx, key, 1)
			return err
		}
	}},
	{"ulule", func(tb testing.TB, p string) decideFunc {
		st, err := ululeredis.NewStoreWithOptions(goredisClient(tb), ulule.StoreOptions{Prefix: p})
		if err != nil {
			tb.Fatal(err)
		}
		lim := ulule.New(st, ulule.Rate{Period: time.Hour, Limit: rate * 3600})
		return func(ctx context.Context, key string) error {
			_, err := lim.Get(ctx, key)
			return err
		}
	}},
	{"incr-pexpire", func(tb testing.TB, p string) decideFunc {
		c := goredisClient(tb)
		return func(ctx context.Context, key string) error {
			return goredisIncrScript.Run(ctx, c, []string{p + ":" + key}, 60000).Err()
		}
	}},
}

// incrSource is the simplest possible one-script round trip: a fixed-window
// counter with no limit check, the floor of what a decision can cost.
const incrSource = `local v = redis.call('INCR', KEYS[1])
redis.call('PEXPIRE', KEYS[1], ARGV[1])
return v`

// incrScript and goredisIncrScript run it by SHA through valkey-go and
// go-redis.
var (
	incrScript        = vk.NewLuaScript(incrSource)
	goredisIncrScript = goredis.NewScript(incrSource)
)

var valkeyContenders = []contender{
	{"sdk-gcra", func(tb testing.TB, p string) decideFunc {
		return sdk(tb, valkeyStore(tb, p), algorithms.GCRA(rate, time.Second, burst))
	}},
	{"sdk-token_bucket", func(tb testing.TB, p string) decideFunc {
		return sdk(tb, valkeyStore(tb, p), algorithms.TokenBucket(rate, time.Second, burst))
	}},
	{"incr-pexpire", func(tb testing.TB, p string) decideFunc {
		c := valkeyClient(tb)
		args := []string{"60000"}
		return func(ctx context.Context, key string) error {
			return incrScript.Exec(ctx, c, []string{p + ":" + key}, args).Error()
		}
	}},
}

// result is one measured run.
type result struct {
	ops      int
	elapsed  time.Duration
	p99      time.Duration
	failures int64
}

func (r result) perSec() float64 { return float64(r.ops) / r.elapsed.Seconds() }

// run makes n decisions with exactly callers goroutines, on one hot key or
// on nKeys keys in turn, and measures throughput, p99 latency and failures.
func run(decide decideFunc, n, callers int, hot bool) result {
	ctx := context.Background()
	var next atomic.Int64
	var failures atomic.Int64
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
					key = keys[i%nKeys]
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
	elapsed := time.Since(start)
	all := slices.Concat(lat...)
	slices.Sort(all)
	var p99 time.Duration
	if len(all) > 0 {
		p99 = all[min(len(all)-1, len(all)*99/100)]
	}
	return result{ops: n, elapsed: elapsed, p99: p99, failures: failures.Load()}
}

// shapes are the workloads: key spread × callers.
var shapes = []struct {
	name    string
	hot     bool
	callers int
}{
	{"hot/c1", true, 1}, {"hot/c32", true, 32},
	{"10000keys/c1", false, 1}, {"10000keys/c32", false, 32},
}

func bench(b *testing.B, cs []contender) {
	for _, sh := range shapes {
		for _, c := range cs {
			b.Run(sh.name+"/"+c.name, func(b *testing.B) {
				decide := c.make(b, prefix())
				// Warm up: scripts loaded, connections open.
				run(decide, 200, sh.callers, sh.hot)
				b.ResetTimer()
				r := run(decide, b.N, sh.callers, sh.hot)
				b.StopTimer()
				b.ReportMetric(r.perSec(), "decisions/s")
				b.ReportMetric(float64(r.p99.Microseconds()), "p99-µs")
				b.ReportMetric(float64(r.failures), "failures")
			})
		}
	}
}

// BenchmarkRedis compares store/redis (GCRA and token bucket) with
// redis_rate, throttled, ulule/limiter's Redis store and the INCR+PEXPIRE
// script on one go-redis client.
func BenchmarkRedis(b *testing.B) { bench(b, redisContenders) }

// BenchmarkValkey compares store/valkey with a bare INCR+PEXPIRE script on
// one valkey-go client.
func BenchmarkValkey(b *testing.B) { bench(b, valkeyContenders) }

package memory_test

import (
	"context"
	"fmt"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/time/rate"

	"github.com/ratelimitkit/ratelimit"
	"github.com/ratelimitkit/ratelimit/algorithms"
	"github.com/ratelimitkit/ratelimit/bench/memory"
	memstore "github.com/ratelimitkit/ratelimit/store/memory"
)

// manyKeys is the number of distinct keys in the many-key benchmarks.
const manyKeys = 100_000

// keys are the many-key benchmarks' key strings, made once so that building
// them is not measured.
var keys = func() []string {
	k := make([]string, manyKeys)
	for i := range k {
		k[i] = fmt.Sprintf("user-%06d", i)
	}
	return k
}()

// A mode is a workload: admit, where the limit is high enough that (almost)
// every call is admitted, or deny, where all but a key's first call is
// denied. Each gives the SDK's algorithms and x/time/rate the same policy.
type mode struct {
	name string
	algs []algorithms.Algorithm
	// limit and burst configure the rate.Limiters compared with them.
	limit rate.Limit
	burst int
}

var modes = []mode{
	{
		// Deep buckets and long windows: nothing is denied during a run,
		// and every key's state outlives the time between two calls on
		// it, so the benchmark measures decisions on state the store
		// holds.
		name: "admit",
		algs: []algorithms.Algorithm{
			algorithms.FixedWindow(1e9, time.Hour),
			// The log keeps an entry per admitted call, so a window that
			// admits everything must be short to keep the log small.
			algorithms.SlidingLog(1e9, time.Microsecond),
			algorithms.SlidingWindow(1e9, time.Hour),
			algorithms.TokenBucket(1, time.Second, 1e9),
			algorithms.LeakyBucket(1, time.Second, 1e9),
			algorithms.GCRA(1, time.Second, 1e9),
		},
		limit: 1,
		burst: 1e9,
	},
	{
		name: "deny",
		algs: []algorithms.Algorithm{
			algorithms.FixedWindow(1, time.Hour),
			algorithms.SlidingLog(1, time.Hour),
			algorithms.SlidingWindow(1, time.Hour),
			algorithms.TokenBucket(1, time.Hour, 1),
			algorithms.LeakyBucket(1, time.Hour, 1),
			algorithms.GCRA(1, time.Hour, 1),
		},
		limit: rate.Every(time.Hour),
		burst: 1,
	},
}

// BenchmarkHotKey is every goroutine calling Allow on one key: each SDK
// algorithm on the memory store (sdk), right after one rate.Limiter
// (x-time-rate) with the same policy, so that the two sides of each
// comparison are measured seconds apart.
func BenchmarkHotKey(b *testing.B) {
	for _, m := range modes {
		for _, alg := range m.algs {
			b.Run(m.name+"/"+alg.Name(), func(b *testing.B) {
				b.Run("x-time-rate", func(b *testing.B) {
					lim := rate.NewLimiter(m.limit, m.burst)
					lim.Allow()
					parallel(b, func(pb *testing.PB) {
						for pb.Next() {
							lim.Allow()
						}
					})
				})
				b.Run("sdk", func(b *testing.B) {
					lim := newLimiter(b, alg)
					ctx := context.Background()
					if _, err := lim.Allow(ctx, "hot"); err != nil {
						b.Fatal(err)
					}
					parallel(b, func(pb *testing.PB) {
						for pb.Next() {
							lim.Allow(ctx, "hot")
						}
					})
				})
			})
		}
	}
}

// BenchmarkManyKeys spreads calls over 100,000 warmed keys, each goroutine
// walking the keys from its own offset: each SDK algorithm on the memory
// store (sdk), right after rate.Limiters with the same policy in a sync.Map
// and in a mutex-guarded map, the two ways users keep one rate.Limiter per
// key.
func BenchmarkManyKeys(b *testing.B) {
	for _, m := range modes {
		for _, alg := range m.algs {
			b.Run(m.name+"/"+alg.Name(), func(b *testing.B) {
				b.Run("x-time-rate-syncmap", func(b *testing.B) {
					var limiters sync.Map
					allow := func(key string) bool {
						v, ok := limiters.Load(key)
						if !ok {
							v, _ = limiters.LoadOrStore(key, rate.NewLimiter(m.limit, m.burst))
						}
						return v.(*rate.Limiter).Allow()
					}
					walk(b, func(key string) { allow(key) })
				})
				b.Run("x-time-rate-mutexmap", func(b *testing.B) {
					var mu sync.Mutex
					limiters := make(map[string]*rate.Limiter)
					allow := func(key string) bool {
						mu.Lock()
						lim := limiters[key]
						if lim == nil {
							lim = rate.NewLimiter(m.limit, m.burst)
							limiters[key] = lim
						}
						mu.Unlock()
						return lim.Allow()
					}
					walk(b, func(key string) { allow(key) })
				})
				b.Run("sdk", func(b *testing.B) {
					lim := newLimiter(b, alg)
					ctx := context.Background()
					walk(b, func(key string) { lim.Allow(ctx, key) })
				})
			})
		}
	}
}

func newLimiter(b *testing.B, alg algorithms.Algorithm) *ratelimit.Limiter {
	b.Helper()
	lim, err := ratelimit.New(memstore.MustNew(), alg)
	if err != nil {
		b.Fatal(err)
	}
	return lim
}

// walk warms every key with one call, then runs allow in parallel, each
// goroutine walking keys from its own offset.
func walk(b *testing.B, allow func(key string)) {
	for _, k := range keys {
		allow(k)
	}
	var goroutines atomic.Int64
	parallel(b, func(pb *testing.PB) {
		i := int(goroutines.Add(1)-1) * 7919 % len(keys)
		for pb.Next() {
			allow(keys[i])
			if i++; i == len(keys) {
				i = 0
			}
		}
	})
}

// parallel runs body with b.RunParallel, reporting allocations and, beside
// ns/op, the process's CPU time per call as cpu-ns/op.
func parallel(b *testing.B, body func(*testing.PB)) {
	b.ReportAllocs()
	b.ResetTimer()
	start := memory.CPUTime()
	b.RunParallel(body)
	b.StopTimer()
	if used := memory.CPUTime() - start; used > 0 {
		b.ReportMetric(float64(used)/float64(b.N), "cpu-ns/op")
	}
}

// BenchmarkFootprint measures the heap a map of rate.Limiters holds per
// key, for comparison with the memory store's own BenchmarkFootprint (in
// store/memory): the HeapAlloc growth, after a garbage collection, from an
// empty map to one holding every key, divided by the number of keys. Key
// strings are made beforehand and not counted.
//
//	go test -run '^$' -bench Footprint -benchtime 1x ./memory/
func BenchmarkFootprint(b *testing.B) {
	keys := make([]string, 1_000_000)
	for i := range keys {
		keys[i] = fmt.Sprintf("user-%07d", i)
	}
	b.Run("x-time-rate-syncmap", func(b *testing.B) {
		var perKey float64
		for range b.N {
			before := heapAlloc()
			var limiters sync.Map
			for _, k := range keys {
				limiters.Store(k, rate.NewLimiter(1, 1))
			}
			perKey = float64(heapAlloc()-before) / float64(len(keys))
			runtime.KeepAlive(&limiters)
		}
		b.ReportMetric(perKey, "bytes/key")
	})
	b.Run("x-time-rate-mutexmap", func(b *testing.B) {
		var perKey float64
		for range b.N {
			before := heapAlloc()
			limiters := make(map[string]*rate.Limiter)
			for _, k := range keys {
				limiters[k] = rate.NewLimiter(1, 1)
			}
			perKey = float64(heapAlloc()-before) / float64(len(keys))
			runtime.KeepAlive(limiters)
		}
		b.ReportMetric(perKey, "bytes/key")
	})
}

func heapAlloc() int64 {
	var m runtime.MemStats
	runtime.GC()
	runtime.GC()
	runtime.ReadMemStats(&m)
	return int64(m.HeapAlloc)
}

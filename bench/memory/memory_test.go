package memory_test

import (
	"context"
	"fmt"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	sethvargo "github.com/sethvargo/go-limiter"
	"github.com/sethvargo/go-limiter/memorystore"
	ulule "github.com/ulule/limiter/v3"
	ulmemory "github.com/ulule/limiter/v3/drivers/store/memory"
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
	// tokens per interval configure the peers whose only policy is a
	// number of requests per interval: sethvargo/go-limiter's memorystore
	// (a token bucket refilled in whole intervals) and ulule/limiter's
	// memory store (a fixed window).
	tokens   int64
	interval time.Duration
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
		limit:    1,
		burst:    1e9,
		tokens:   1e9,
		interval: time.Hour,
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
		limit:    rate.Every(time.Hour),
		burst:    1,
		tokens:   1,
		interval: time.Hour,
	},
}

// A peer is another library's in-memory limiter, given a mode's policy:
// start returns its decision for a key and a function that releases it.
type peer struct {
	name  string
	start func(b *testing.B, m mode) (allow func(key string), stop func())
}

// xTimeRate is one rate.Limiter for every key, with no key to look up: the
// hot key's x/time/rate baseline, as issue 13 measured it, although it does
// less work per call than any keyed limiter (the keyed x/time/rate peers
// are shown beside it, without a bar).
var xTimeRate = peer{"x-time-rate", func(b *testing.B, m mode) (func(string), func()) {
	lim := rate.NewLimiter(m.limit, m.burst)
	return func(string) { lim.Allow() }, func() {}
}}

// xTimeRateSyncMap and xTimeRateMutexMap keep one rate.Limiter per key, the
// two ways users do: in a sync.Map (Load, LoadOrStore on a miss) and in a
// map under one sync.Mutex.
var xTimeRateSyncMap = peer{"x-time-rate-syncmap", func(b *testing.B, m mode) (func(string), func()) {
	var limiters sync.Map
	return func(key string) {
		v, ok := limiters.Load(key)
		if !ok {
			v, _ = limiters.LoadOrStore(key, rate.NewLimiter(m.limit, m.burst))
		}
		v.(*rate.Limiter).Allow()
	}, func() {}
}}

var xTimeRateMutexMap = peer{"x-time-rate-mutexmap", func(b *testing.B, m mode) (func(string), func()) {
	var mu sync.Mutex
	limiters := make(map[string]*rate.Limiter)
	return func(key string) {
		mu.Lock()
		lim := limiters[key]
		if lim == nil {
			lim = rate.NewLimiter(m.limit, m.burst)
			limiters[key] = lim
		}
		mu.Unlock()
		lim.Allow()
	}, func() {}
}}

// sethvargoMemory is github.com/sethvargo/go-limiter's memorystore, the
// fastest in-memory peer: a map under a RWMutex, a mutex per key.
var sethvargoMemory = peer{"sethvargo", func(b *testing.B, m mode) (func(string), func()) {
	store, err := memorystore.New(&memorystore.Config{Tokens: uint64(m.tokens), Interval: m.interval})
	if err != nil {
		b.Fatal(err)
	}
	var _ sethvargo.Store = store
	ctx := context.Background()
	return func(key string) { store.Take(ctx, key) }, func() { store.Close(ctx) }
}}

// ululeMemory is github.com/ulule/limiter's memory store, a fixed window.
var ululeMemory = peer{"ulule", func(b *testing.B, m mode) (func(string), func()) {
	lim := ulule.New(ulmemory.NewStore(), ulule.Rate{Period: m.interval, Limit: m.tokens})
	ctx := context.Background()
	return func(key string) { lim.Get(ctx, key) }, func() {}
}}

// BenchmarkHotKey is every goroutine calling Allow on one key: each SDK
// algorithm on the memory store (sdk), right after each peer with the same
// policy, so that the sides of each comparison are measured seconds apart
// in one process. Every peer but x-time-rate does what the SDK does per
// call, one key lookup and one decision: rate.Limiters in a sync.Map and in
// a mutex-guarded map (as in BenchmarkManyKeys), sethvargo/go-limiter and
// ulule/limiter; x-time-rate is a single rate.Limiter with no key, the
// baseline the bar names (bench/memory/ratios).
func BenchmarkHotKey(b *testing.B) {
	peers := []peer{xTimeRateSyncMap, xTimeRateMutexMap, sethvargoMemory, xTimeRate, ululeMemory}
	for _, m := range modes {
		for _, alg := range m.algs {
			b.Run(m.name+"/"+alg.Name(), func(b *testing.B) {
				for _, p := range peers {
					b.Run(p.name, func(b *testing.B) {
						allow, stop := p.start(b, m)
						defer stop()
						allow("hot")
						parallel(b, func(pb *testing.PB) {
							for pb.Next() {
								allow("hot")
							}
						})
					})
				}
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
// store (sdk), right after the peers with the same policy: rate.Limiters in
// a sync.Map and in a mutex-guarded map (the two ways users keep one
// rate.Limiter per key), sethvargo/go-limiter and ulule/limiter.
func BenchmarkManyKeys(b *testing.B) {
	peers := []peer{xTimeRateSyncMap, xTimeRateMutexMap, sethvargoMemory, ululeMemory}
	for _, m := range modes {
		for _, alg := range m.algs {
			b.Run(m.name+"/"+alg.Name(), func(b *testing.B) {
				for _, p := range peers {
					b.Run(p.name, func(b *testing.B) {
						allow, stop := p.start(b, m)
						defer stop()
						walk(b, allow)
					})
				}
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
// ns/op, the process's CPU time per call as cpu-ns/op. It collects the
// garbage first, so that the collector's work for what the setup (warming
// the keys) allocated is not counted to the calls: the process's CPU time
// includes the collector's.
func parallel(b *testing.B, body func(*testing.PB)) {
	b.ReportAllocs()
	runtime.GC()
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

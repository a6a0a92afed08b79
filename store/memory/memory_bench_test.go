package memory_test

import (
	"context"
	"fmt"
	"runtime"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ratelimitkit/ratelimit"
	"github.com/ratelimitkit/ratelimit/algorithms"
	"github.com/ratelimitkit/ratelimit/store/memory"
)

// The side-by-side comparison with golang.org/x/time/rate lives in the
// bench module (bench/memory); these benchmarks need nothing but the SDK.

// benchKeys is the number of distinct keys in the many-key benchmarks.
const benchKeys = 100_000

// keyStrings returns n distinct keys, made before any measurement.
func keyStrings(n int) []string {
	k := make([]string, n)
	for i := range k {
		k[i] = fmt.Sprintf("user-%07d", i)
	}
	return k
}

// A workload is a set of algorithms whose decisions in a benchmark run are
// all alike.
type workload struct {
	name string
	algs []algorithms.Algorithm
}

var workloads = []workload{
	{
		// Deep buckets and long windows: nothing is denied during a run,
		// and every key's state outlives the time between two calls on it.
		name: "admit",
		algs: []algorithms.Algorithm{
			algorithms.FixedWindow(1e9, time.Hour),
			// The log keeps an entry per admitted call; a short window
			// keeps it to a few entries.
			algorithms.SlidingLog(1e9, time.Microsecond),
			algorithms.SlidingWindow(1e9, time.Hour),
			algorithms.TokenBucket(1, time.Second, 1e9),
			algorithms.LeakyBucket(1, time.Second, 1e9),
			algorithms.GCRA(1, time.Second, 1e9),
		},
	},
	{
		// One call per key and period: every call but a key's first is
		// denied.
		name: "deny",
		algs: []algorithms.Algorithm{
			algorithms.FixedWindow(1, time.Hour),
			algorithms.SlidingLog(1, time.Hour),
			algorithms.SlidingWindow(1, time.Hour),
			algorithms.TokenBucket(1, time.Hour, 1),
			algorithms.LeakyBucket(1, time.Hour, 1),
			algorithms.GCRA(1, time.Hour, 1),
		},
	},
	{
		// Fast refill: a key's state has expired by the time it is called
		// again, so every call decides from no state, as on a new key.
		name: "expired",
		algs: []algorithms.Algorithm{
			algorithms.FixedWindow(1e9, time.Microsecond),
			algorithms.SlidingLog(1e9, time.Microsecond),
			algorithms.SlidingWindow(1e9, time.Microsecond),
			algorithms.TokenBucket(1e9, time.Second, 1e6),
			algorithms.LeakyBucket(1e9, time.Second, 1e6),
			algorithms.GCRA(1e9, time.Second, 1e6),
		},
	},
}

// BenchmarkAllow measures Limiter.Allow on the memory store: every
// goroutine on one hot key, and 100,000 warmed keys, each goroutine walking
// them from its own offset.
func BenchmarkAllow(b *testing.B) {
	keys := keyStrings(benchKeys)
	for _, w := range workloads {
		for _, alg := range w.algs {
			b.Run(w.name+"/hot/"+alg.Name(), func(b *testing.B) {
				benchAllow(b, alg, []string{"hot"})
			})
			b.Run(w.name+"/100k/"+alg.Name(), func(b *testing.B) {
				benchAllow(b, alg, keys)
			})
		}
	}
}

func benchAllow(b *testing.B, alg algorithms.Algorithm, keys []string) {
	lim, err := ratelimit.New(memory.MustNew(), alg)
	if err != nil {
		b.Fatal(err)
	}
	ctx := context.Background()
	for _, k := range keys {
		if _, err := lim.Allow(ctx, k); err != nil {
			b.Fatal(err)
		}
	}
	var goroutines atomic.Int64
	b.ReportAllocs()
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		i := int(goroutines.Add(1)-1) * 7919 % len(keys)
		for pb.Next() {
			lim.Allow(ctx, keys[i])
			if i++; i == len(keys) {
				i = 0
			}
		}
	})
}

// BenchmarkFootprint measures the heap the store holds per key: the
// HeapAlloc growth, after a garbage collection, from an empty store to one
// holding n keys, divided by n. Key strings are made beforehand; the
// store's own copy of each is counted. The sliding log is measured with
// one entry per key and with a full log of 10 entries.
//
// Run it once per size: go test -run '^$' -bench Footprint -benchtime 1x
func BenchmarkFootprint(b *testing.B) {
	algs := []struct {
		name  string
		alg   algorithms.Algorithm
		calls int // calls per key
	}{
		{"fixed_window", algorithms.FixedWindow(10, time.Hour), 1},
		{"sliding_log_1_entry", algorithms.SlidingLog(10, time.Hour), 1},
		{"sliding_log_10_entries", algorithms.SlidingLog(10, time.Hour), 10},
		{"sliding_window", algorithms.SlidingWindow(10, time.Hour), 1},
		{"token_bucket", algorithms.TokenBucket(10, time.Hour, 10), 1},
		{"leaky_bucket", algorithms.LeakyBucket(10, time.Hour, 10), 1},
		{"gcra", algorithms.GCRA(10, time.Hour, 10), 1},
	}
	for _, n := range []int{100_000, 1_000_000} {
		keys := keyStrings(n)
		for _, a := range algs {
			b.Run(fmt.Sprintf("keys=%d/%s", n, a.name), func(b *testing.B) {
				ctx := context.Background()
				var perKey float64
				for range b.N {
					// Room to spare, so nothing is evicted.
					lim, err := ratelimit.New(memory.MustNew(memory.WithMaxKeys(4*n)), a.alg)
					if err != nil {
						b.Fatal(err)
					}
					before := heapAlloc()
					for _, k := range keys {
						for range a.calls {
							if _, err := lim.Allow(ctx, k); err != nil {
								b.Fatal(err)
							}
						}
					}
					after := heapAlloc()
					if got := lim.Store().(*memory.Store).Len(); got != n {
						b.Fatalf("store holds %d keys, want %d", got, n)
					}
					perKey = float64(after-before) / float64(n)
					runtime.KeepAlive(lim)
				}
				b.ReportMetric(perKey, "bytes/key")
			})
		}
	}
}

func heapAlloc() int64 {
	var m runtime.MemStats
	runtime.GC()
	runtime.GC()
	runtime.ReadMemStats(&m)
	return int64(m.HeapAlloc)
}

package memory_test

import (
	"context"
	"testing"
	"time"

	"github.com/ratelimitkit/ratelimit/algorithms"
	"github.com/ratelimitkit/ratelimit/store"
	"github.com/ratelimitkit/ratelimit/store/memory"
)

// logDecider returns a function that decides a request of cost 1 with alg
// on one key of a new store, through the store's Decide, the clock
// advancing step µs per call, after 2,000 calls that fill the log.
func logDecider(tb testing.TB, alg algorithms.Algorithm, step int64) func() algorithms.Decision {
	s := memory.MustNew()
	key := store.Key{Namespace: "bench", ID: "hot"}
	ctx := context.Background()
	now := int64(1_900_000_000_000_000)
	decide := func() algorithms.Decision {
		now += step
		d, err := s.Decide(ctx, key, alg, algorithms.Request{Now: now, Cost: 1})
		if err != nil {
			tb.Fatalf("%v: Decide at %d: %v", alg, now, err)
		}
		return d
	}
	for range 2000 {
		decide()
	}
	return decide
}

// BenchmarkSlidingLogFull measures a sliding log with a limit of 1,000 on
// one key whose log is full, the clock advancing 1 µs per call:
//   - admit: a period of 1,000 µs, so each call's entry replaces the one
//     that has just left the window (every call admitted and written);
//   - deny: a period of an hour, so every call is denied and its retry
//     time read from the oldest entry.
func BenchmarkSlidingLogFull(b *testing.B) {
	for _, c := range []struct {
		name   string
		period time.Duration
	}{{"admit", time.Millisecond}, {"deny", time.Hour}} {
		b.Run(c.name, func(b *testing.B) {
			decide := logDecider(b, algorithms.SlidingLog(1000, c.period), 1)
			b.ReportAllocs()
			for b.Loop() {
				if d := decide(); d.Allowed != (c.name == "admit") {
					b.Fatalf("decision %+v", d)
				}
			}
		})
	}
}

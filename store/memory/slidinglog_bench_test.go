package memory_test

import (
	"context"
	"testing"
	"time"

	"github.com/ratelimitkit/ratelimit"
	"github.com/ratelimitkit/ratelimit/algorithms"
	"github.com/ratelimitkit/ratelimit/store/memory"
)

// BenchmarkSlidingLogFull measures a sliding log with a limit of 1,000 on
// one key whose log is full, through the store's Decide with a clock that
// advances 1 µs per call:
//   - admit: a period of 1,000 µs, so each call's entry replaces the one
//     that has just left the window (every call admitted and written);
//   - deny: a period of an hour, so every call after the first 1,000 is
//     denied and its retry time read from the oldest entry.
func BenchmarkSlidingLogFull(b *testing.B) {
	for _, c := range []struct {
		name   string
		period time.Duration
	}{{"admit", time.Millisecond}, {"deny", time.Hour}} {
		b.Run(c.name, func(b *testing.B) {
			s := memory.MustNew()
			alg := algorithms.SlidingLog(1000, c.period)
			key := ratelimit.Key{Namespace: "bench", ID: "hot"}
			ctx := context.Background()
			now := int64(1_900_000_000_000_000)
			for range 1000 {
				now++
				if _, err := s.Decide(ctx, key, alg, algorithms.Request{Now: now, Cost: 1}); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportAllocs()
			for b.Loop() {
				now++
				d, err := s.Decide(ctx, key, alg, algorithms.Request{Now: now, Cost: 1})
				if err != nil || d.Allowed != (c.name == "admit") {
					b.Fatalf("Decide at %d = %+v, %v", now, d, err)
				}
			}
		})
	}
}

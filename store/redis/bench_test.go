package redis_test

import (
	"context"
	"testing"
	"time"

	"github.com/ratelimitkit/ratelimit"
	"github.com/ratelimitkit/ratelimit/algorithms"
	"github.com/ratelimitkit/ratelimit/store/redis"
)

// BenchmarkDecide measures one limiter decision through the store on the
// standalone server, alone and from many goroutines at once (which share
// pipelined round trips): go test -bench Decide -benchmem, and
// -memprofile to see where the client's allocations go.
func BenchmarkDecide(b *testing.B) {
	c := standalone(b)
	for _, alg := range []algorithms.Algorithm{algorithms.GCRA(1e6, time.Second, 1e6), algorithms.TokenBucket(1e6, time.Second, 1e6)} {
		s, err := redis.New(c, redis.WithPrefix(uniquePrefix()))
		if err != nil {
			b.Fatal(err)
		}
		lim, err := ratelimit.New(s, alg)
		if err != nil {
			b.Fatal(err)
		}
		ctx := context.Background()
		b.Run(alg.Name()+"/serial", func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if _, err := lim.Allow(ctx, "k"); err != nil {
					b.Fatal(err)
				}
			}
		})
		b.Run(alg.Name()+"/parallel", func(b *testing.B) {
			b.ReportAllocs()
			b.SetParallelism(16)
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					if _, err := lim.Allow(ctx, "k"); err != nil {
						b.Error(err)
						return
					}
				}
			})
		})
	}
}

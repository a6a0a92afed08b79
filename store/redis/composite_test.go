package redis_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/ratelimitkit/ratelimit"
	"github.com/ratelimitkit/ratelimit/algorithms"
	"github.com/ratelimitkit/ratelimit/internal/testserver"
	"github.com/ratelimitkit/ratelimit/store/redis"
)

// TestCompositeOneRoundTrip checks that a composite decides in one round
// trip whatever its parts, the sliding log included (whose part the
// composite Lua form holds, written by hand): a decision on a new key, an
// admission on a key with state, and a denial each send exactly one
// command or pipeline, counted by a hook on the store's own client.
func TestCompositeOneRoundTrip(t *testing.T) {
	c := goredis.NewClient(&goredis.Options{Addr: testserver.RedisAddr(t)})
	t.Cleanup(func() { c.Close() })
	s := mustNew(t, c, redis.WithPrefix(fmt.Sprint("rt-composite-", time.Now().UnixNano())), redis.WithServerClock(false))
	ctx := context.Background()
	for _, alg := range []algorithms.Algorithm{
		algorithms.All(algorithms.SlidingLog(2, time.Hour), algorithms.FixedWindow(10, time.Hour)),
		algorithms.All(algorithms.GCRA(2, time.Hour, 2), algorithms.SlidingLog(5, time.Hour), algorithms.TokenBucket(5, time.Hour, 5)),
	} {
		lim, err := ratelimit.New(s, alg)
		if err != nil {
			t.Fatal(err)
		}
		// The script is loaded by a first call on another key.
		if _, err := lim.Allow(ctx, "warm"); err != nil {
			t.Fatal(err)
		}
		var rt roundTrips
		c.AddHook(&rt)
		for i, want := range []bool{true, true, false} {
			before := rt.n.Load()
			d, err := lim.Allow(ctx, "k")
			if err != nil {
				t.Fatal(err)
			}
			if d.Allowed != want {
				t.Errorf("%v: decision %d on one key allowed = %v, want %v", alg, i+1, d.Allowed, want)
			}
			if n := rt.n.Load() - before; n != 1 {
				t.Errorf("%v: decision %d on one key took %d round trips, want 1", alg, i+1, n)
			}
		}
		c = goredis.NewClient(&goredis.Options{Addr: testserver.RedisAddr(t)}) // a client without the hook
		t.Cleanup(func() { c.Close() })
		s = mustNew(t, c, redis.WithPrefix(fmt.Sprint("rt-composite-", time.Now().UnixNano())), redis.WithServerClock(false))
	}
}

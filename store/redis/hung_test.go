package redis_test

import (
	"fmt"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/ratelimitkit/ratelimit/internal/redisengine/storetest"
	"github.com/ratelimitkit/ratelimit/store"
	"github.com/ratelimitkit/ratelimit/store/redis"
)

// TestHungServerBoundsEveryCaller runs storetest.Hung (every caller on a
// frozen server gets its context's error within its deadline; nothing is
// left running after the thaw), whether or not the go-redis client honours
// context deadlines itself (ContextTimeoutEnabled).
func TestHungServerBoundsEveryCaller(t *testing.T) {
	for _, honours := range []bool{true, false} {
		t.Run(fmt.Sprintf("ContextTimeoutEnabled=%v", honours), func(t *testing.T) {
			storetest.Hung(t, func(t *testing.T, addr string) (store.Store, func()) {
				c := goredis.NewClient(&goredis.Options{Addr: addr, ContextTimeoutEnabled: honours, ReadTimeout: 3 * time.Second})
				s, err := redis.New(c)
				if err != nil {
					c.Close()
					t.Fatal(err)
				}
				return s, func() { c.Close() }
			}, func(s store.Store) int { return redis.Queued(s.(*redis.Store)) })
		})
	}
}

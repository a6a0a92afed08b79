package redis_test

import (
	"context"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/ratelimitkit/ratelimit/conformance"
	"github.com/ratelimitkit/ratelimit/internal/redisengine"
	"github.com/ratelimitkit/ratelimit/internal/redisengine/storetest"
	"github.com/ratelimitkit/ratelimit/internal/testserver"
	"github.com/ratelimitkit/ratelimit/store"
	"github.com/ratelimitkit/ratelimit/store/redis"
)

func target(c goredis.UniversalClient) storetest.Target {
	return storetest.Target{
		NewStore: func(t *testing.T, prefix string, serverClock bool) store.Store {
			s, err := redis.New(c, redis.WithPrefix(prefix), redis.WithServerClock(serverClock))
			if err != nil {
				t.Fatalf("redis.New: %v", err)
			}
			return s
		},
		Expiries: func(prefix string) func(ctx context.Context) ([]conformance.Expiry, error) {
			return expiries(c, prefix)
		},
		FlushScripts: func(ctx context.Context) error {
			return forEachNode(ctx, c, func(ctx context.Context, n *goredis.Client) error {
				return n.ScriptFlush(ctx).Err()
			})
		},
		State: func(s store.Store) func(context.Context, store.Key) ([]byte, int64, error) {
			return redis.State(s.(*redis.Store))
		},
		Set: func(ctx context.Context, key, value string) error {
			return c.Set(ctx, key, value, time.Minute).Err()
		},
	}
}

// servers runs fn against the standalone server and the cluster.
func servers(t *testing.T, fn func(t *testing.T, tg storetest.Target)) {
	t.Run("standalone", func(t *testing.T) { fn(t, target(standalone(t))) })
	t.Run("cluster", func(t *testing.T) { fn(t, target(cluster(t))) })
}

func TestNoKeyWithoutTTL(t *testing.T) {
	servers(t, func(t *testing.T, tg storetest.Target) { storetest.NoKeyWithoutTTL(t, tg, uniquePrefix()) })
}

func TestServerClock(t *testing.T) {
	servers(t, func(t *testing.T, tg storetest.Target) { storetest.ServerClock(t, tg, uniquePrefix()) })
}

func TestScriptFlush(t *testing.T) {
	servers(t, func(t *testing.T, tg storetest.Target) { storetest.ScriptFlush(t, tg, uniquePrefix()) })
}

func TestUnsupported(t *testing.T) {
	servers(t, func(t *testing.T, tg storetest.Target) { storetest.Unsupported(t, tg, uniquePrefix()) })
}

func TestCorrupt(t *testing.T) {
	servers(t, func(t *testing.T, tg storetest.Target) { storetest.Corrupt(t, tg, uniquePrefix()) })
}

func TestFailure(t *testing.T) {
	storetest.Failure(t, "redis", func(t *testing.T, addr string) (store.Store, func()) {
		c := goredis.NewClient(&goredis.Options{Addr: addr, ContextTimeoutEnabled: true})
		s, err := redis.New(c)
		if err != nil {
			t.Fatal(err)
		}
		return s, func() { c.Close() }
	})
}

// TestOneSlot checks on the cluster that every key of one decision lies in
// one hash slot, whatever bytes the user's key holds, by asking the server.
func TestOneSlot(t *testing.T) {
	c := cluster(t)
	ctx := context.Background()
	for _, id := range []string{"plain", "{user}", "a}b{c", "}{", "{}", "%7B", "\x00\xff", "ünï-🔑", " "} {
		k := redisengine.StateKey("rl", store.Key{Namespace: "api:gcra", ID: id})
		a, err := c.ClusterKeySlot(ctx, k).Result()
		if err != nil {
			t.Fatal(err)
		}
		b, err := c.ClusterKeySlot(ctx, k+redisengine.UpdateSuffix).Result()
		if err != nil {
			t.Fatal(err)
		}
		if a != b {
			t.Errorf("key %q: slot %d for %q, %d for %q (rule: one decision, one slot)", id, a, k, b, k+redisengine.UpdateSuffix)
		}
	}
}

func TestLimiterClockSlack(t *testing.T) {
	servers(t, func(t *testing.T, tg storetest.Target) { storetest.LimiterClockSlack(t, tg, uniquePrefix()) })
}

// frozen is the conformance harness's Freeze: a store on a private
// redis-server (testserver.StartRedis) and a function that freezes the
// server with SIGSTOP, so that the FaultHungStore group holds every Limiter
// and lease call to its bound on a server that really stopped answering.
// The server is thawed and stopped when t ends.
func frozen(t *testing.T) (store.Store, func()) {
	r := testserver.StartRedis(t)
	c := goredis.NewClient(&goredis.Options{Addr: r.Addr(), ContextTimeoutEnabled: true})
	t.Cleanup(func() { c.Close() })
	s, err := redis.New(c, redis.WithPrefix(uniquePrefix()), redis.WithServerClock(false))
	if err != nil {
		t.Fatalf("redis.New: %v", err)
	}
	return s, r.Freeze
}

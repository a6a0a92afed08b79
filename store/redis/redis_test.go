package redis_test

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/ratelimitkit/ratelimit/conformance"
	"github.com/ratelimitkit/ratelimit/internal/redisengine/storetest"
	"github.com/ratelimitkit/ratelimit/internal/testserver"
	"github.com/ratelimitkit/ratelimit/store"
	"github.com/ratelimitkit/ratelimit/store/redis"
)

var prefixes atomic.Int64

// uniquePrefix returns a key prefix no other test uses.
func uniquePrefix() string {
	return fmt.Sprintf("rltest-%d-%d", time.Now().UnixNano(), prefixes.Add(1))
}

// standalone returns a client of the standalone server, closed after t.
func standalone(t testing.TB) goredis.UniversalClient {
	t.Helper()
	c := goredis.NewClient(&goredis.Options{Addr: testserver.RedisAddr(t), ContextTimeoutEnabled: true})
	t.Cleanup(func() { c.Close() })
	return c
}

// cluster returns a client of the Redis Cluster, closed after t.
func cluster(t testing.TB) goredis.UniversalClient {
	t.Helper()
	c := goredis.NewClusterClient(&goredis.ClusterOptions{Addrs: testserver.RedisClusterAddrs(t), ContextTimeoutEnabled: true})
	t.Cleanup(func() { c.Close() })
	return c
}

// ring returns a client of a one-shard Ring on the standalone server, closed
// after t: a Ring is a UniversalClient that shards keys on the client side.
func ring(t testing.TB) goredis.UniversalClient {
	t.Helper()
	c := goredis.NewRing(&goredis.RingOptions{Addrs: map[string]string{"one": testserver.RedisAddr(t)}, ContextTimeoutEnabled: true})
	t.Cleanup(func() { c.Close() })
	return c
}

// forEachNode calls fn with a client of every master of c.
func forEachNode(ctx context.Context, c goredis.UniversalClient, fn func(ctx context.Context, n *goredis.Client) error) error {
	var mu sync.Mutex
	serial := func(ctx context.Context, n *goredis.Client) error {
		mu.Lock()
		defer mu.Unlock()
		return fn(ctx, n)
	}
	switch cc := c.(type) {
	case *goredis.ClusterClient:
		return cc.ForEachMaster(ctx, serial)
	case *goredis.Ring:
		return cc.ForEachShard(ctx, serial)
	}
	return fn(ctx, c.(*goredis.Client))
}

// expiries lists every key under prefix with its PTTL.
func expiries(c goredis.UniversalClient, prefix string) func(ctx context.Context) ([]conformance.Expiry, error) {
	return func(ctx context.Context) ([]conformance.Expiry, error) {
		var list []conformance.Expiry
		err := forEachNode(ctx, c, func(ctx context.Context, n *goredis.Client) error {
			it := n.Scan(ctx, 0, prefix+":*", 1000).Iterator()
			for it.Next(ctx) {
				k := it.Val()
				now := time.Now()
				ttl, err := n.PTTL(ctx, k).Result()
				if err != nil {
					return err
				}
				switch {
				case ttl == -1:
					list = append(list, conformance.Expiry{Key: k, Never: true})
				case ttl >= 0:
					list = append(list, conformance.Expiry{Key: k, At: now.Add(ttl)})
				}
			}
			return it.Err()
		})
		return list, err
	}
}

// harnessOn returns a conformance factory for stores on c, each with its own
// prefix and the server clock off (storetest.Harness). Its Twin is a store
// on a new client from newClient, with the same prefix; its Freeze is
// freeze (nil: the fault group that needs one skips).
func harnessOn(c goredis.UniversalClient, newClient func(testing.TB) goredis.UniversalClient, freeze func(*testing.T) (store.Store, func())) func(t *testing.T) conformance.Harness {
	return func(t *testing.T) conformance.Harness {
		h := storetest.Harness(t, target(c), uniquePrefix(), func(t testing.TB) storetest.Target { return target(newClient(t)) })
		h.Freeze = freeze
		return h
	}
}

func TestConformanceStandalone(t *testing.T) {
	conformance.Run(t, harnessOn(standalone(t), standalone, frozen)) // real faults on a private server
}

func TestConformanceCluster(t *testing.T) {
	conformance.Run(t, harnessOn(cluster(t), cluster, frozenCluster))
}

func TestConformanceRing(t *testing.T) {
	conformance.Run(t, harnessOn(ring(t), ring, frozenRing))
}

// frozenCluster is the Cluster harness's Freeze: a store on a cluster
// client of its own whose connections to every node, those it opens after
// the freeze included, a testserver.Freezer freezes (the shared cluster's
// nodes cannot be stopped: other tests use them).
func frozenCluster(t *testing.T) (store.Store, func()) {
	f := testserver.NewFreezer(t)
	c := goredis.NewClusterClient(&goredis.ClusterOptions{Addrs: testserver.RedisClusterAddrs(t), ContextTimeoutEnabled: true, Dialer: f.Dial})
	t.Cleanup(func() { c.Close() })
	s, err := redis.New(c, redis.WithPrefix(uniquePrefix()), redis.WithServerClock(false))
	if err != nil {
		t.Fatalf("redis.New: %v", err)
	}
	return s, f.Freeze
}

// frozenRing is the Ring harness's Freeze: a store on a one-shard ring of
// a private redis-server (testserver.StartRedis), frozen with SIGSTOP.
func frozenRing(t *testing.T) (store.Store, func()) {
	r := testserver.StartRedis(t)
	c := goredis.NewRing(&goredis.RingOptions{Addrs: map[string]string{"one": r.Addr()}, ContextTimeoutEnabled: true})
	t.Cleanup(func() { c.Close() })
	s, err := redis.New(c, redis.WithPrefix(uniquePrefix()), redis.WithServerClock(false))
	if err != nil {
		t.Fatalf("redis.New: %v", err)
	}
	return s, r.Freeze
}

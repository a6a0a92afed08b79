package valkey_test

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	vk "github.com/valkey-io/valkey-go"

	"github.com/ratelimitkit/ratelimit/conformance"
	"github.com/ratelimitkit/ratelimit/internal/redisengine/storetest"
	"github.com/ratelimitkit/ratelimit/internal/testserver"
	"github.com/ratelimitkit/ratelimit/store"
)

var prefixes atomic.Int64

// uniquePrefix returns a key prefix no other test uses.
func uniquePrefix() string {
	return fmt.Sprintf("rltest-vk-%d-%d", time.Now().UnixNano(), prefixes.Add(1))
}

func newClient(t testing.TB, addrs ...string) vk.Client {
	t.Helper()
	c, err := vk.NewClient(vk.ClientOption{InitAddress: addrs, DisableCache: true})
	if err != nil {
		t.Fatalf("valkey.NewClient(%v): %v", addrs, err)
	}
	t.Cleanup(c.Close)
	return c
}

// standalone returns a client of the standalone server, closed after t.
func standalone(t testing.TB) vk.Client { return newClient(t, testserver.ValkeyAddr(t)) }

// cluster returns a client of the Redis Cluster, closed after t.
func cluster(t testing.TB) vk.Client { return newClient(t, testserver.RedisClusterAddrs(t)...) }

// expiries lists every key under prefix with its PTTL, on every node.
func expiries(c vk.Client, prefix string) func(ctx context.Context) ([]conformance.Expiry, error) {
	return func(ctx context.Context) ([]conformance.Expiry, error) {
		var list []conformance.Expiry
		for _, n := range c.Nodes() {
			var cursor uint64
			for {
				e, err := n.Do(ctx, n.B().Scan().Cursor(cursor).Match(prefix+":*").Count(1000).Build()).AsScanEntry()
				if err != nil {
					return nil, err
				}
				for _, k := range e.Elements {
					now := time.Now()
					ttl, err := n.Do(ctx, n.B().Pttl().Key(k).Build()).AsInt64()
					if err != nil {
						return nil, err
					}
					switch {
					case ttl == -1:
						list = append(list, conformance.Expiry{Key: k, Never: true})
					case ttl >= 0:
						list = append(list, conformance.Expiry{Key: k, At: now.Add(time.Duration(ttl) * time.Millisecond)})
					}
				}
				if cursor = e.Cursor; cursor == 0 {
					break
				}
			}
		}
		return list, nil
	}
}

// harnessOn returns a conformance factory for stores on c, each with its own
// prefix and the server clock off (storetest.Harness). Its Twin is a store
// on a new client from newClient, with the same prefix; its Freeze is
// freeze (nil: the fault group that needs one skips).
func harnessOn(c vk.Client, newClient func(testing.TB) vk.Client, freeze func(*testing.T) (store.Store, func())) func(t *testing.T) conformance.Harness {
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
	conformance.Run(t, harnessOn(cluster(t), cluster, nil))
}

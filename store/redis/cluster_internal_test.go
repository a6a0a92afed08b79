package redis

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/ratelimitkit/ratelimit"
	"github.com/ratelimitkit/ratelimit/algorithms"
	"github.com/ratelimitkit/ratelimit/internal/redisengine"
	"github.com/ratelimitkit/ratelimit/internal/redisengine/storetest"
	"github.com/ratelimitkit/ratelimit/internal/testserver"
)

// wrongNode is a backend whose Router names, for every key of an odd slot,
// a master that does not serve it: what a client sees for a moment after a
// resharding or a failover, before its view of the cluster catches up. So
// a run holds keys its master serves and keys it does not.
type wrongNode struct {
	backend
	missed atomic.Int64
}

func (w *wrongNode) Node(key string) any {
	cc := w.c.(*goredis.ClusterClient)
	own, err := cc.MasterForKey(context.Background(), key)
	if err != nil {
		return nil
	}
	if redisengine.ClusterSlot(key)%2 == 0 {
		return own
	}
	var mu sync.Mutex
	var other *goredis.Client
	_ = cc.ForEachMaster(context.Background(), func(_ context.Context, n *goredis.Client) error {
		mu.Lock()
		defer mu.Unlock()
		if n.Options().Addr != own.Options().Addr {
			other = n
		}
		return nil
	})
	if other == nil {
		return nil
	}
	return other
}

func (w *wrongNode) Missed() { w.missed.Add(1) }

// TestClusterStaleNode checks that a run sent to a node that does not
// serve some of its keys decides nothing there for them: their decisions
// go again through the cluster client to the node that serves the key, the
// others' are decided in the run, each key admits exactly its limit, and
// no key is written on a node that does not serve its slot.
func TestClusterStaleNode(t *testing.T) {
	c := goredis.NewClusterClient(&goredis.ClusterOptions{Addrs: testserver.RedisClusterAddrs(t), ContextTimeoutEnabled: true})
	t.Cleanup(func() { c.Close() })
	ctx := context.Background()
	if err := c.ForEachMaster(ctx, func(ctx context.Context, n *goredis.Client) error { return n.Ping(ctx).Err() }); err != nil {
		t.Fatal(err)
	}
	w := &wrongNode{backend: backend{c: c}}
	prefix := fmt.Sprintf("rltest-stale-%d", time.Now().UnixNano())
	e, err := redisengine.New("redis", w, redisengine.WithPrefix(prefix))
	if err != nil {
		t.Fatal(err)
	}
	lim, err := ratelimit.New(&Store{engine: e, client: c}, algorithms.GCRA(4, time.Hour, 4))
	if err != nil {
		t.Fatal(err)
	}
	const keys, perKey, limit, callers = 100, 8, 4, 32
	storetest.AdmitsExactly(t, lim, keys, perKey, limit, callers)
	if w.missed.Load() == 0 {
		t.Error("no run met a key its node does not serve: the test sent none to a wrong node")
	}
	var written atomic.Int64
	err = c.ForEachMaster(ctx, func(ctx context.Context, n *goredis.Client) error {
		it := n.Scan(ctx, 0, prefix+":*", 1000).Iterator()
		for it.Next(ctx) {
			own, err := c.MasterForKey(ctx, it.Val())
			if err != nil {
				return err
			}
			if own.Options().Addr != n.Options().Addr {
				return fmt.Errorf("key %s written on %s, whose slot %s serves", it.Val(), n.Options().Addr, own.Options().Addr)
			}
			written.Add(1)
		}
		return it.Err()
	})
	if err != nil {
		t.Fatal(err)
	}
	if n := written.Load(); n != keys {
		t.Errorf("%d keys written, want %d", n, keys)
	}
}

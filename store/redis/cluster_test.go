package redis_test

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/ratelimitkit/ratelimit"
	"github.com/ratelimitkit/ratelimit/algorithms"
	"github.com/ratelimitkit/ratelimit/internal/redisengine"
	"github.com/ratelimitkit/ratelimit/internal/redisengine/storetest"
	"github.com/ratelimitkit/ratelimit/internal/testserver"
	"github.com/ratelimitkit/ratelimit/store/redis"
)

// scriptCounter is a go-redis hook, on every node of a cluster client,
// that counts the script runs (EVALSHA, EVAL) the nodes are sent, alone or
// in pipelines.
type scriptCounter struct{ runs atomic.Int64 }

func (s *scriptCounter) DialHook(next goredis.DialHook) goredis.DialHook { return next }

func (s *scriptCounter) ProcessHook(next goredis.ProcessHook) goredis.ProcessHook {
	return func(ctx context.Context, cmd goredis.Cmder) error {
		s.count(cmd)
		return next(ctx, cmd)
	}
}

func (s *scriptCounter) ProcessPipelineHook(next goredis.ProcessPipelineHook) goredis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []goredis.Cmder) error {
		for _, c := range cmds {
			s.count(c)
		}
		return next(ctx, cmds)
	}
}

func (s *scriptCounter) count(c goredis.Cmder) {
	if n := c.Name(); n == "evalsha" || n == "eval" {
		s.runs.Add(1)
	}
}

// masterOf returns which master of the cluster c serves a key: the index
// of its slot range's master in CLUSTER SLOTS, as c sees it now.
func masterOf(t *testing.T, c goredis.UniversalClient) func(key string) int {
	t.Helper()
	ranges, err := c.ClusterSlots(context.Background()).Result()
	if err != nil {
		t.Fatal(err)
	}
	addrs := map[string]int{}
	return func(key string) int {
		slot := redisengine.ClusterSlot(key)
		for _, r := range ranges {
			if slot >= r.Start && slot <= r.End {
				a := r.Nodes[0].Addr
				if _, ok := addrs[a]; !ok {
					addrs[a] = len(addrs)
				}
				return addrs[a]
			}
		}
		t.Fatalf("no master serves slot %d", slot)
		return -1
	}
}

// TestClusterNodeRuns checks that on a cluster the decisions of a batch on
// keys of many slots share one script run per node, not one per slot (10
// decisions on each of 300 keys, which lie in about 300 slots, by 32
// callers), and that each key still admits exactly its limit.
func TestClusterNodeRuns(t *testing.T) {
	var counter scriptCounter
	c := goredis.NewClusterClient(&goredis.ClusterOptions{Addrs: testserver.RedisClusterAddrs(t), ContextTimeoutEnabled: true})
	c.OnNewNode(func(n *goredis.Client) { n.AddHook(&counter) })
	t.Cleanup(func() { c.Close() })
	s, err := redis.New(c, redis.WithPrefix(uniquePrefix()))
	if err != nil {
		t.Fatal(err)
	}
	const keys, perKey, limit, callers = 300, 10, 5, 32
	lim, err := ratelimit.New(s, algorithms.FixedWindow(limit, time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	storetest.AdmitsExactly(t, lim, keys, perKey, limit, callers)
	runs := counter.runs.Load()
	t.Logf("%d script runs for %d decisions", runs, keys*perKey)
	// One run per slot would be about one per decision; one per node and
	// batch of about 32 decisions over 3 nodes is about 0.1.
	if per := float64(runs) / (keys * perKey); per > 0.5 {
		t.Errorf("%d script runs for %d decisions (%.2f a decision), want at most 0.5: the decisions on one node do not share runs", runs, keys*perKey, per)
	}
}

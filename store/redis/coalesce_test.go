package redis_test

import (
	"context"
	"testing"
	"time"

	"github.com/ratelimitkit/ratelimit/algorithms"
	"github.com/ratelimitkit/ratelimit/internal/redisengine/storetest"
	"github.com/ratelimitkit/ratelimit/store"
	"github.com/ratelimitkit/ratelimit/store/redis"
)

// TestCoalescedEqualSequential runs storetest.Coalesced on the standalone
// server and the cluster, for every algorithm with a coalesced form and for
// one key decided with two sets of numbers, and storetest.CoalescedKeys:
// decisions queued behind a batch in flight are decided in one script run
// per algorithm (any keys on the standalone server, and on the cluster
// any keys of one master, whose decisions queue behind the held one), each
// exactly as one after another; and storetest.CoalescedLeases on the
// standalone server.
func TestCoalescedEqualSequential(t *testing.T) {
	for _, onCluster := range []bool{false, true} {
		server := map[bool]string{false: "standalone", true: "cluster"}[onCluster]
		run := func(t *testing.T, alg, other algorithms.Algorithm, leases bool) {
			g := newGate()
			c := hooked(t, g, onCluster)
			q := storetest.Queue{
				Hold: func(t *testing.T) func() {
					g.hold.Store(true)
					return func() {
						select {
						case <-g.held:
						case <-time.After(10 * time.Second):
							t.Fatal("the held decision never reached the server")
						}
						g.release <- struct{}{}
					}
				},
				Queued:  func(s store.Store) int { return redis.Queued(s.(*redis.Store)) },
				Scripts: func() int64 { return g.single.Load() + g.piped.Load() },
				State: func(s store.Store) func(context.Context, store.Key) ([]byte, int64, error) {
					return redis.State(s.(*redis.Store))
				},
				Slot: func(string) int { return 0 },
			}
			if onCluster {
				q.Node = masterOf(t, c)
			}
			if leases {
				storetest.CoalescedLeases(t, target(c), q)
				return
			}
			if alg == nil {
				storetest.CoalescedKeys(t, target(c), q)
				return
			}
			storetest.Coalesced(t, target(c), q, alg, other)
		}
		for _, alg := range storetest.CoalescedAlgorithms() {
			t.Run(server+"/"+alg.Name(), func(t *testing.T) { run(t, alg, nil, false) })
		}
		t.Run(server+"/mixed numbers", func(t *testing.T) {
			run(t, algorithms.GCRA(5, time.Second, 5), algorithms.GCRA(6, time.Second, 6), false)
		})
		t.Run(server+"/many keys", func(t *testing.T) { run(t, nil, nil, false) })
		if !onCluster { // lease keys of different slots share no run
			t.Run(server+"/leases", func(t *testing.T) { run(t, nil, nil, true) })
		}
	}
}

package valkey_test

import (
	"context"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/ratelimitkit/ratelimit/algorithms"
	"github.com/ratelimitkit/ratelimit/internal/redisengine/storetest"
	"github.com/ratelimitkit/ratelimit/internal/testserver"
	"github.com/ratelimitkit/ratelimit/store"
	"github.com/ratelimitkit/ratelimit/store/valkey"
)

// TestCoalescedEqualSequential runs storetest.Coalesced on a private
// server, which the test freezes to hold a decision in flight, for every
// algorithm with a coalesced form and for one key decided with two sets of
// numbers, storetest.CoalescedKeys and storetest.CoalescedLeases. The server's own count of EVALSHA calls says how many script
// runs the decisions cost.
func TestCoalescedEqualSequential(t *testing.T) {
	srv := testserver.StartRedis(t)
	c := newClient(t, srv.Addr())
	q := storetest.Queue{
		Hold: func(t *testing.T) func() {
			srv.Freeze()
			return func() {
				time.Sleep(50 * time.Millisecond) // the queued decisions all in one batch
				srv.Thaw()
			}
		},
		Queued: func(s store.Store) int { return valkey.Queued(s.(*valkey.Store)) },
		Scripts: func() int64 {
			info, err := c.Do(context.Background(), c.B().Info().Section("commandstats").Build()).ToString()
			if err != nil {
				t.Fatal(err)
			}
			for _, l := range strings.Split(info, "\n") {
				if rest, ok := strings.CutPrefix(l, "cmdstat_evalsha:calls="); ok {
					n, _, _ := strings.Cut(rest, ",")
					v, err := strconv.ParseInt(n, 10, 64)
					if err != nil {
						t.Fatal(err)
					}
					return v
				}
			}
			return 0
		},
		State: func(s store.Store) func(context.Context, store.Key) ([]byte, int64, error) {
			return valkey.State(s.(*valkey.Store))
		},
		Slot: func(string) int { return 0 },
	}
	for _, alg := range storetest.CoalescedAlgorithms() {
		t.Run(alg.Name(), func(t *testing.T) { storetest.Coalesced(t, target(c), q, alg, nil) })
	}
	t.Run("mixed numbers", func(t *testing.T) {
		storetest.Coalesced(t, target(c), q, algorithms.GCRA(5, time.Second, 5), algorithms.GCRA(6, time.Second, 6))
	})
	t.Run("many keys", func(t *testing.T) { storetest.CoalescedKeys(t, target(c), q) })
	t.Run("leases", func(t *testing.T) { storetest.CoalescedLeases(t, target(c), q) })
}

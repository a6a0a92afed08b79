package valkey_test

import (
	"context"
	"testing"
	"time"

	"github.com/ratelimitkit/ratelimit"
	"github.com/ratelimitkit/ratelimit/algorithms"
	"github.com/ratelimitkit/ratelimit/internal/redisengine/storetest"
	"github.com/ratelimitkit/ratelimit/store/valkey"
)

// TestClusterNodeRuns checks that on a cluster the store sends the
// decisions of a batch on keys of many slots to each master as one script
// run (once it has read the cluster's slots), and that each key still
// admits exactly its limit: 10 decisions on each of 300 keys, by 32
// callers.
func TestClusterNodeRuns(t *testing.T) {
	s, err := valkey.New(cluster(t), valkey.WithPrefix(uniquePrefix()))
	if err != nil {
		t.Fatal(err)
	}
	const keys, perKey, limit, callers = 300, 10, 5, 32
	lim, err := ratelimit.New(s, algorithms.FixedWindow(limit, time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for valkey.Routed(s) == 0 { // the slots are read in the background
		if _, err := lim.Allow(context.Background(), "warm"); err != nil {
			t.Fatal(err)
		}
		if time.Now().After(deadline) {
			t.Fatal("the store never read the cluster's slots")
		}
		time.Sleep(10 * time.Millisecond)
	}
	storetest.AdmitsExactly(t, lim, keys, perKey, limit, callers)
	if n := valkey.Routed(s); n < 2 {
		t.Errorf("the store's decisions went through %d masters' batchers, want one per master", n)
	}
}

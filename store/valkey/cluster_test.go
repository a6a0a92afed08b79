package valkey_test

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ratelimitkit/ratelimit"
	"github.com/ratelimitkit/ratelimit/algorithms"
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
	var next atomic.Int64
	var admitted [keys]atomic.Int64
	var wg sync.WaitGroup
	errs := make(chan error, callers)
	for range callers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				i := next.Add(1) - 1
				if i >= keys*perKey {
					return
				}
				d, err := lim.Allow(context.Background(), fmt.Sprintf("k%d", i%keys))
				if err != nil {
					errs <- err
					return
				}
				if d.Allowed {
					admitted[i%keys].Add(1)
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	for k := range keys {
		if got := admitted[k].Load(); got != limit {
			t.Errorf("key k%d: %d of %d decisions admitted, want exactly %d", k, got, perKey, limit)
		}
	}
	if n := valkey.Routed(s); n < 2 {
		t.Errorf("the store's decisions went through %d masters' batchers, want one per master", n)
	}
}

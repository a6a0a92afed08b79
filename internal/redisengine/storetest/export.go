package storetest

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/ratelimitkit/ratelimit"
	"github.com/ratelimitkit/ratelimit/algorithms"
	"github.com/ratelimitkit/ratelimit/internal/testserver"
	"github.com/ratelimitkit/ratelimit/statefile"
	"github.com/ratelimitkit/ratelimit/store"
)

// ExportBounded checks that Count (an Export) on a server that accepts
// connections and never answers (SIGSTOP) fails with a deadline error
// within about one round trip's budget (redisengine.ExportTimeout, 1 s),
// on each of the stores newStores returns, and that it works again once
// the server answers.
//
// newStores returns stores on clients of addr, all under one prefix; the
// first decides 50 keys before the freeze.
func ExportBounded(t *testing.T, newStores func(t *testing.T, addr string) []store.Store) {
	srv := testserver.StartRedis(t)
	stores := newStores(t, srv.Addr())
	ctx := context.Background()
	lim, err := ratelimit.New(stores[0], algorithms.GCRA(10, time.Hour, 10), ratelimit.WithName("api"))
	if err != nil {
		t.Fatal(err)
	}
	for i := range 50 {
		if _, err := lim.Allow(ctx, fmt.Sprint("user-", i)); err != nil {
			t.Fatal(err)
		}
	}
	if n, err := statefile.Count(ctx, lim.Store(), lim.Namespace(), time.Now()); n != 50 || err != nil {
		t.Fatalf("Count = %d, %v; want 50", n, err)
	}
	for _, st := range stores {
		srv.Freeze()
		start := time.Now()
		n, err := statefile.Count(ctx, st, "", time.Now())
		took := time.Since(start)
		srv.Thaw()
		if !errors.Is(err, context.DeadlineExceeded) || took > 2500*time.Millisecond {
			t.Errorf("Count on a frozen server = %d, %v after %v; want a deadline error within about 1s", n, err, took)
		}
		t.Logf("Count on a frozen server failed after %v: %v", took.Round(time.Millisecond), err)
	}
	// The frozen calls' replies may still be in flight on old connections.
	deadline := time.Now().Add(10 * time.Second)
	for {
		n, err := statefile.Count(ctx, lim.Store(), lim.Namespace(), time.Now())
		if err == nil && n == 50 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("Count after the thaw = %d, %v; want 50", n, err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

package storetest

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"sync"
	"testing"
	"time"

	"github.com/ratelimitkit/ratelimit"
	"github.com/ratelimitkit/ratelimit/algorithms"
	"github.com/ratelimitkit/ratelimit/internal/testserver"
	"github.com/ratelimitkit/ratelimit/store"
)

// Hung checks that on a server frozen with SIGSTOP (a redis-server of the
// test's own), 64 concurrent callers with deadlines from 100ms to 450ms
// each get their context's error within their own deadline and a little
// slack, whether they send a call alone, ride in a batch, or queue behind
// a batch that hangs; and that after the server thaws the batcher goes idle
// (queued(s) is -1) and leaves no goroutine behind.
//
// newStore returns a store on a new client of addr, and a function that
// closes the client.
func Hung(t *testing.T, newStore func(t *testing.T, addr string) (store.Store, func()), queued func(store.Store) int) {
	srv := testserver.StartRedis(t)
	s, closeClient := newStore(t, srv.Addr())
	defer closeClient()
	// No budget of the limiter's: each caller's own deadline is the only
	// bound.
	lim, err := ratelimit.New(s, algorithms.GCRA(1000, time.Second, 1000), ratelimit.WithStoreTimeout(0))
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	for i := range 64 { // connections and scripts in place
		if _, err := lim.Allow(ctx, fmt.Sprintf("k%d", i)); err != nil {
			t.Fatal(err)
		}
	}
	before := runtime.NumGoroutine()
	srv.Freeze()
	thawed := false
	defer func() {
		if !thawed {
			srv.Thaw()
		}
	}()
	const slack = 250 * time.Millisecond // a loaded machine under -race
	var wg sync.WaitGroup
	for i := range 64 {
		bound := 100*time.Millisecond + time.Duration(i%8)*50*time.Millisecond
		wg.Go(func() {
			cctx, cancel := context.WithTimeout(ctx, bound)
			defer cancel()
			start := time.Now()
			_, err := lim.Allow(cctx, fmt.Sprintf("k%d", i))
			took := time.Since(start)
			if !errors.Is(err, context.DeadlineExceeded) {
				t.Errorf("caller %d: lim.Allow with a %v deadline on a frozen server: error %v, want its context's", i, bound, err)
			}
			if took > bound+slack {
				t.Errorf("caller %d: lim.Allow with a %v deadline on a frozen server returned after %v, want within %v", i, bound, took, bound+slack)
			}
		})
	}
	wg.Wait()
	srv.Thaw()
	thawed = true
	// The abandoned calls end with the server's replies (or the client's
	// read timeout); then nothing of the store's runs.
	deadline := time.Now().Add(10 * time.Second)
	for queued(s) != -1 || runtime.NumGoroutine() > before {
		if time.Now().After(deadline) {
			buf := make([]byte, 1<<16)
			t.Fatalf("10s after the thaw: batcher queue %d, %d goroutines, %d before the freeze:\n%s", queued(s), runtime.NumGoroutine(), before, buf[:runtime.Stack(buf, true)])
		}
		time.Sleep(10 * time.Millisecond)
	}
	if _, err := lim.Allow(ctx, "k0"); err != nil {
		t.Errorf("lim.Allow after the thaw: %v", err)
	}
}

package redis_test

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"sync"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/ratelimitkit/ratelimit"
	"github.com/ratelimitkit/ratelimit/algorithms"
	"github.com/ratelimitkit/ratelimit/internal/testserver"
	"github.com/ratelimitkit/ratelimit/store/redis"
)

// TestHungServerBoundsEveryCaller: on a Redis process frozen with SIGSTOP,
// 64 concurrent callers with deadlines from 100ms to 450ms each get their
// context's error within their own deadline and a little slack, whether
// they send a call alone, ride in a batch, or queue behind a batch that
// hangs, and whether or not the go-redis client honours context deadlines
// itself (ContextTimeoutEnabled). After the server thaws, the batcher goes
// idle and leaves no goroutine behind.
func TestHungServerBoundsEveryCaller(t *testing.T) {
	for _, honours := range []bool{true, false} {
		t.Run(fmt.Sprintf("ContextTimeoutEnabled=%v", honours), func(t *testing.T) {
			srv := testserver.StartRedis(t)
			c := goredis.NewClient(&goredis.Options{Addr: srv.Addr(), ContextTimeoutEnabled: honours, ReadTimeout: 3 * time.Second})
			defer c.Close()
			store, err := redis.New(c)
			if err != nil {
				t.Fatal(err)
			}
			// No budget of the limiter's: each caller's own deadline is the
			// only bound.
			lim, err := ratelimit.New(store, algorithms.GCRA(1000, time.Second, 1000), ratelimit.WithStoreTimeout(0))
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
			// The abandoned calls end with the server's replies (or the
			// client's read timeout); then nothing of the store's runs.
			deadline := time.Now().Add(10 * time.Second)
			for redis.Queued(store) != -1 || runtime.NumGoroutine() > before {
				if time.Now().After(deadline) {
					buf := make([]byte, 1<<16)
					t.Fatalf("10s after the thaw: batcher queue %d, %d goroutines, %d before the freeze:\n%s", redis.Queued(store), runtime.NumGoroutine(), before, buf[:runtime.Stack(buf, true)])
				}
				time.Sleep(10 * time.Millisecond)
			}
			if _, err := lim.Allow(ctx, "k0"); err != nil {
				t.Errorf("lim.Allow after the thaw: %v", err)
			}
		})
	}
}

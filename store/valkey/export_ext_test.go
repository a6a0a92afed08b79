package valkey_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	vk "github.com/valkey-io/valkey-go"

	"github.com/ratelimitkit/ratelimit"
	"github.com/ratelimitkit/ratelimit/algorithms"
	"github.com/ratelimitkit/ratelimit/internal/testserver"
	"github.com/ratelimitkit/ratelimit/statefile"
	"github.com/ratelimitkit/ratelimit/store/valkey"
)

// TestExportBoundedOnFrozenServer checks that Count on a server that
// accepts connections and never answers (SIGSTOP) fails within about one
// round trip's budget (1 s), and works again once it answers.
func TestExportBoundedOnFrozenServer(t *testing.T) {
	srv := testserver.StartRedis(t)
	c, err := vk.NewClient(vk.ClientOption{InitAddress: []string{srv.Addr()}, DisableCache: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	s, err := valkey.New(c, valkey.WithPrefix("frozen"))
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	lim, err := ratelimit.New(s, algorithms.GCRA(10, time.Hour, 10), ratelimit.WithName("api"))
	if err != nil {
		t.Fatal(err)
	}
	for i := range 50 {
		if _, err := lim.Allow(ctx, fmt.Sprint("user-", i)); err != nil {
			t.Fatal(err)
		}
	}
	srv.Freeze()
	start := time.Now()
	n, err := statefile.Count(ctx, lim.Store(), lim.Namespace(), time.Now())
	took := time.Since(start)
	srv.Thaw()
	if !errors.Is(err, context.DeadlineExceeded) || took > 2500*time.Millisecond {
		t.Errorf("Count on a frozen server = %d, %v after %v; want a deadline error within about 1s", n, err, took)
	}
	t.Logf("Count on a frozen server failed after %v: %v", took.Round(time.Millisecond), err)
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

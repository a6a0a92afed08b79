package grpclimit_test

import (
	"context"
	"sync"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"
	"google.golang.org/grpc/codes"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"

	"github.com/ratelimitkit/ratelimit"
	"github.com/ratelimitkit/ratelimit/algorithms"
	"github.com/ratelimitkit/ratelimit/httplimit"
	"github.com/ratelimitkit/ratelimit/internal/testserver"
	"github.com/ratelimitkit/ratelimit/store/redis"
)

// TestHungStore: with a limiter of no options, concurrent calls through
// the interceptor on a store that hangs (a Redis process frozen with
// SIGSTOP) are answered Unavailable, with a retry delay, within the
// limiter's default store budget and a little slack.
func TestHungStore(t *testing.T) {
	srv := testserver.StartRedis(t)
	c := goredis.NewClient(&goredis.Options{Addr: srv.Addr(), ContextTimeoutEnabled: true})
	defer c.Close()
	store, err := redis.New(c)
	if err != nil {
		t.Fatal(err)
	}
	lim, err := ratelimit.New(store, algorithms.GCRA(1000, time.Second, 1000))
	if err != nil {
		t.Fatal(err)
	}
	client := start(t, []httplimit.Rule{{Limiter: lim}})
	if _, err := client.Check(context.Background(), &healthpb.HealthCheckRequest{}); err != nil {
		t.Fatalf("Check with the store up: %v", err)
	}
	srv.Freeze()
	defer srv.Thaw()
	const slack = 700 * time.Millisecond // a loaded machine under -race
	var wg sync.WaitGroup
	for range 20 {
		wg.Go(func() {
			ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second) // the test's own bound
			defer cancel()
			start := time.Now()
			_, err := client.Check(ctx, &healthpb.HealthCheckRequest{})
			took := time.Since(start)
			if status.Code(err) != codes.Unavailable || retryDelay(err) <= 0 {
				t.Errorf("Check on a frozen store: %v (retry %v), want Unavailable with a RetryInfo", err, retryDelay(err))
			}
			if took > defaultStoreTimeout+slack {
				t.Errorf("Check on a frozen store answered after %v, want within the store budget %v + %v", took, defaultStoreTimeout, slack)
			}
		})
	}
	wg.Wait()
}

// defaultStoreTimeout is the store budget of a limiter without
// ratelimit.WithStoreTimeout (one second).
const defaultStoreTimeout = time.Second

package grpclimit_test

import (
	"context"
	"net/http"
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
//
// On a machine whose cores are busy with other work, the process may not
// run for a while, and then every timer that fell due meanwhile fires at
// once: at a load of 15 on two cores, 20 calls whose budgets ran out at
// 1.0s all answered at 1.24s, their decisions (the limiter's call, from
// the key to the error hook) having ended together at 1.23s, the time the
// process ran again. That is not a wait of the SDK's, and the test counts
// it out: a goroutine that sleeps a millisecond at a time measures how late
// the process wakes (lateness), and each bound is the budget, the slack and
// the worst lateness seen during the calls. Each call's decision is
// bounded apart from its answer, so a failure says which of the two was
// late.
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
	var mu sync.Mutex
	began := map[*http.Request]time.Time{}
	var decisions []time.Duration
	client := start(t, []httplimit.Rule{{Limiter: lim, Key: func(r *http.Request) (string, error) {
		mu.Lock()
		began[r] = time.Now()
		mu.Unlock()
		return "k", nil
	}}}, httplimit.WithErrorHook(func(r *http.Request, _ error) {
		mu.Lock()
		if b, ok := began[r]; ok {
			decisions = append(decisions, time.Since(b))
		}
		mu.Unlock()
	}))
	if _, err := client.Check(context.Background(), &healthpb.HealthCheckRequest{}); err != nil {
		t.Fatalf("Check with the store up: %v", err)
	}
	srv.Freeze()
	defer srv.Thaw()
	late := startLateness()
	const (
		decisionSlack = 300 * time.Millisecond // the store's answer after its budget, under -race
		slack         = 700 * time.Millisecond // and the gRPC round trip
	)
	var wg sync.WaitGroup
	answers := make([]time.Duration, 20)
	errs := make([]error, 20)
	for i := range answers {
		wg.Go(func() {
			ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second) // the test's own bound
			defer cancel()
			start := time.Now()
			_, errs[i] = client.Check(ctx, &healthpb.HealthCheckRequest{})
			answers[i] = time.Since(start)
		})
	}
	wg.Wait()
	lateness := late()
	for i, err := range errs {
		if status.Code(err) != codes.Unavailable || retryDelay(err) <= 0 {
			t.Errorf("Check on a frozen store: %v (retry %v), want Unavailable with a RetryInfo", err, retryDelay(err))
		}
		if answers[i] > defaultStoreTimeout+slack+lateness {
			t.Errorf("Check on a frozen store answered after %v, want within the store budget %v + %v + the process's worst lateness %v", answers[i], defaultStoreTimeout, slack, lateness)
		}
	}
	mu.Lock()
	defer mu.Unlock()
	if len(decisions) != len(answers) {
		t.Errorf("the error hook saw %d failed decisions, want %d", len(decisions), len(answers))
	}
	for _, d := range decisions {
		if d > defaultStoreTimeout+decisionSlack+lateness {
			t.Errorf("a decision on a frozen store took %v, want within the store budget %v + %v + the process's worst lateness %v", d, defaultStoreTimeout, decisionSlack, lateness)
		}
	}
	if t.Failed() {
		t.Logf("answers %v; decisions %v; worst lateness %v", answers, decisions, lateness)
	}
}

// startLateness starts measuring how late this process wakes from a
// millisecond's sleep, and returns the function that stops and returns the
// worst lateness seen.
func startLateness() func() time.Duration {
	stop := make(chan struct{})
	done := make(chan time.Duration, 1)
	go func() {
		var worst time.Duration
		for {
			select {
			case <-stop:
				done <- worst
				return
			default:
			}
			t0 := time.Now()
			time.Sleep(time.Millisecond)
			worst = max(worst, time.Since(t0)-time.Millisecond)
		}
	}()
	return func() time.Duration {
		close(stop)
		return <-done
	}
}

// defaultStoreTimeout is the store budget of a limiter without
// ratelimit.WithStoreTimeout (one second).
const defaultStoreTimeout = time.Second

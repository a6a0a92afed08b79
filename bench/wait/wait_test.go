// Package wait_test measures Limiter.Wait's achieved rate beside
// golang.org/x/time/rate's Wait: one caller pacing itself with Wait, burst
// 1, 50 per second, for every algorithm, on the memory store and on Redis.
//
//	cd bench && go test -count=1 -run TestWaitRate -v ./wait/
//
// RATELIMIT_BENCH_WAIT_SECONDS (default 6) sets each round's span and
// RATELIMIT_BENCH_WAIT_ROUNDS (default 1) the rounds. Every waiter of a
// round (the SDK's on each store and algorithm, and an x/time/rate waiter
// beside each) runs at once, over the same span, so all meet the same
// timers and the same load. Redis is skipped unless RATELIMIT_REDIS_ADDR is
// set. Beside each row's Wait runs the old Wait (pollWait: decide, sleep
// RetryAfter, decide again) on another key of the same limiter. The test
// fails when a Wait of the SDK reaches less than 0.97 of its rate in any
// round.
package wait_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"
	"golang.org/x/time/rate"

	"github.com/ratelimitkit/ratelimit"
	"github.com/ratelimitkit/ratelimit/algorithms"
	"github.com/ratelimitkit/ratelimit/store"
	"github.com/ratelimitkit/ratelimit/store/memory"
	rlredis "github.com/ratelimitkit/ratelimit/store/redis"
)

// bar is the least share of its rate a waiter of the SDK must reach.
const bar = 0.97

// policy is one algorithm and its rate in units per second.
type policy struct {
	name string
	alg  algorithms.Algorithm
	rate float64
}

// policies are the six algorithms at burst 1 and 50 per second (a window
// algorithm's rate is its limit per period: one per 20ms), the leaky
// bucket with room to queue one turn ahead, and the window algorithms at
// five per 100ms, where a late timer costs less.
var policies = []policy{
	{"token bucket (50/s, burst 1)", algorithms.TokenBucket(50, time.Second, 1), 50},
	{"GCRA (50/s, burst 1)", algorithms.GCRA(50, time.Second, 1), 50},
	{"leaky bucket (50/s, capacity 1)", algorithms.LeakyBucket(50, time.Second, 1), 50},
	{"leaky bucket (50/s, capacity 2)", algorithms.LeakyBucket(50, time.Second, 2), 50},
	{"fixed window (1 per 20ms)", algorithms.FixedWindow(1, 20*time.Millisecond), 50},
	{"sliding window (1 per 20ms)", algorithms.SlidingWindow(1, 20*time.Millisecond), 50},
	{"sliding log (1 per 20ms)", algorithms.SlidingLog(1, 20*time.Millisecond), 50},
	{"fixed window (5 per 100ms)", algorithms.FixedWindow(5, 100*time.Millisecond), 50},
	{"sliding window (5 per 100ms)", algorithms.SlidingWindow(5, 100*time.Millisecond), 50},
	{"sliding log (5 per 100ms)", algorithms.SlidingLog(5, 100*time.Millisecond), 50},
}

func envInt(name string, def int) int {
	if v, err := strconv.Atoi(os.Getenv(name)); err == nil && v > 0 {
		return v
	}
	return def
}

// waiter is one row: a limiter of the SDK, and what its waiter and the
// x/time/rate waiter beside it achieved.
type waiter struct {
	store, name string
	rate        float64
	lim         *ratelimit.Limiter
	// got, pollGot and peerGot are the calls admitted in each round: by
	// the SDK's Wait, by pollWait and by x/time/rate's Wait.
	got, pollGot, peerGot []int
}

// pollWait is the SDK's Wait as it was before it booked its turn: decide,
// sleep RetryAfter, decide again (and sleep an admitted request's Delay),
// giving up when the sleep would outlast ctx's deadline.
func pollWait(ctx context.Context, lim *ratelimit.Limiter, key string) error {
	for {
		d, err := lim.Allow(ctx, key)
		if err != nil {
			return err
		}
		wait := d.RetryAfter
		if d.Allowed {
			wait = d.Delay
		}
		if wait > 0 {
			if deadline, ok := ctx.Deadline(); ok && time.Now().Add(wait).After(deadline) {
				return context.DeadlineExceeded
			}
			select {
			case <-time.After(wait):
			case <-ctx.Done():
				return ctx.Err()
			}
		}
		if d.Allowed {
			return nil
		}
	}
}

// pace calls wait until ctx's deadline and returns how many calls it made.
func pace(ctx context.Context, wait func(context.Context) error) (int, error) {
	n := 0
	for {
		if err := wait(ctx); err != nil {
			if errors.Is(err, context.DeadlineExceeded) {
				return n, nil
			}
			return n, err
		}
		n++
	}
}

func TestWaitRate(t *testing.T) {
	if testing.Short() {
		t.Skip("measures for seconds")
	}
	span := time.Duration(envInt("RATELIMIT_BENCH_WAIT_SECONDS", 6)) * time.Second
	rounds := envInt("RATELIMIT_BENCH_WAIT_ROUNDS", 1)
	stores := []struct {
		name string
		make func(prefix string) store.Store
	}{{"memory", func(string) store.Store { return memory.MustNew() }}}
	if addr := os.Getenv("RATELIMIT_REDIS_ADDR"); addr != "" {
		client := goredis.NewClient(&goredis.Options{Addr: addr, ContextTimeoutEnabled: true})
		t.Cleanup(func() { client.Close() })
		stores = append(stores, struct {
			name string
			make func(prefix string) store.Store
		}{"redis", func(prefix string) store.Store {
			s, err := rlredis.New(client, rlredis.WithPrefix(prefix))
			if err != nil {
				t.Fatal(err)
			}
			return s
		}})
	} else {
		t.Log("RATELIMIT_REDIS_ADDR is not set: memory store only")
	}
	prefix := fmt.Sprintf("bench-wait-%d", time.Now().UnixNano())
	var waiters []*waiter
	for _, s := range stores {
		for i, p := range policies {
			lim, err := ratelimit.New(s.make(prefix), p.alg, ratelimit.WithName(fmt.Sprintf("wait%d", i)))
			if err != nil {
				t.Fatal(err)
			}
			waiters = append(waiters, &waiter{store: s.name, name: p.name, rate: p.rate, lim: lim})
		}
	}
	for r := range rounds {
		start := time.Now()
		ctx, cancel := context.WithDeadline(context.Background(), start.Add(span))
		var wg sync.WaitGroup
		errs := make(chan error, 3*len(waiters))
		got := make([]int, len(waiters))
		pollGot := make([]int, len(waiters))
		peerGot := make([]int, len(waiters))
		key := fmt.Sprint("k", r) // a fresh key each round
		for i, w := range waiters {
			peer := rate.NewLimiter(rate.Limit(w.rate), 1)
			wg.Add(3)
			go func() {
				defer wg.Done()
				n, err := pace(ctx, func(ctx context.Context) error { _, err := w.lim.Wait(ctx, key); return err })
				got[i] = n
				if err != nil {
					errs <- fmt.Errorf("%s, %s: %w", w.store, w.name, err)
				}
			}()
			go func() {
				defer wg.Done()
				n, err := pace(ctx, func(ctx context.Context) error { return pollWait(ctx, w.lim, "poll-"+key) })
				pollGot[i] = n
				if err != nil {
					errs <- fmt.Errorf("%s, %s, polling: %w", w.store, w.name, err)
				}
			}()
			go func() {
				defer wg.Done()
				n, _ := pace(ctx, func(ctx context.Context) error { return peer.Wait(ctx) })
				peerGot[i] = n
			}()
		}
		wg.Wait()
		cancel()
		close(errs)
		for err := range errs {
			t.Error(err)
		}
		for i, w := range waiters {
			w.got = append(w.got, got[i])
			w.pollGot = append(w.pollGot, pollGot[i])
			w.peerGot = append(w.peerGot, peerGot[i])
		}
	}
	secs := span.Seconds()
	t.Logf("Wait, one caller per column and row, %v per round, %d round(s), every caller at once: the SDK's Wait, the old polling Wait (on another key of the same limiter) and x/time/rate's NewLimiter(50, 1).Wait; /s and share of the rate", span, rounds)
	t.Logf("uptime: %s", uptime())
	t.Logf("| store | algorithm | round | Wait | share | polling (old Wait) | share | x/time/rate | share |")
	t.Logf("|---|---|---|---|---|---|---|---|---|")
	for _, w := range waiters {
		for r := range w.got {
			sdk, poll, peer := float64(w.got[r])/secs, float64(w.pollGot[r])/secs, float64(w.peerGot[r])/secs
			t.Logf("| %s | %s | %d | %.2f | %.3f | %.2f | %.3f | %.2f | %.3f |", w.store, w.name, r+1, sdk, sdk/w.rate, poll, poll/w.rate, peer, peer/w.rate)
			if sdk/w.rate < bar {
				t.Errorf("%s, %s, round %d: Wait reached %.2f/s, %.3f of %.0f/s; the bar is %.2f", w.store, w.name, r+1, sdk, sdk/w.rate, w.rate, bar)
			}
		}
	}
}

// uptime is the machine's load as uptime prints it, or why not.
func uptime() string {
	out, err := exec.Command("uptime").Output()
	if err != nil {
		return err.Error()
	}
	return strings.TrimSpace(string(out))
}

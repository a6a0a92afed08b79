package ratelimit_test

import (
	"context"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/ratelimitkit/ratelimit"
	"github.com/ratelimitkit/ratelimit/algorithms"
	"github.com/ratelimitkit/ratelimit/clock"
)

// scriptCalls returns how many scripts (EVALSHA and EVAL: the store's
// decisions) the server has run, from its own command statistics.
func scriptCalls(tb testing.TB, c *goredis.Client) int64 {
	tb.Helper()
	info, err := c.Info(context.Background(), "commandstats").Result()
	if err != nil {
		tb.Fatal(err)
	}
	var n int64
	for _, line := range strings.Split(info, "\n") {
		name, stats, ok := strings.Cut(strings.TrimSpace(line), ":")
		if !ok || (name != "cmdstat_evalsha" && name != "cmdstat_eval") {
			continue
		}
		for _, f := range strings.Split(stats, ",") {
			if v, ok := strings.CutPrefix(f, "calls="); ok {
				calls, err := strconv.ParseInt(v, 10, 64)
				if err != nil {
					tb.Fatalf("commandstats line %q: %v", line, err)
				}
				n += calls
			}
		}
	}
	return n
}

// attackers is the number of concurrent callers on the hot key.
const attackers = 32

// TestDenyCacheHotKey attacks one key on Redis with 32 callers far over its
// limit, with and without the deny cache, on a fake clock that stands still
// within a round: the admissions must be the same, and the store, asked
// through its own command statistics, must run at least 90% fewer scripts.
func TestDenyCacheHotKey(t *testing.T) {
	_, store, client := privateRedis(t, false)
	const rounds, perCaller = 20, 50
	type result struct{ admitted, calls int64 }
	attack := func(name string, opts ...ratelimit.Option) result {
		fake := clock.NewFake(epoch)
		opts = append(opts, ratelimit.WithName(name), ratelimit.WithClock(fake))
		lim, err := ratelimit.New(store, algorithms.GCRA(10, time.Second, 10), opts...)
		if err != nil {
			t.Fatal(err)
		}
		lim.Peek(context.Background(), "warm-up") // the server loads the script
		before := scriptCalls(t, client)
		var admitted atomic.Int64
		for range rounds {
			var wg sync.WaitGroup
			for range attackers {
				wg.Go(func() {
					for range perCaller {
						d, err := lim.Allow(context.Background(), "hot")
						if err != nil {
							t.Error(err)
							return
						}
						if d.Allowed {
							admitted.Add(1)
						}
					}
				})
			}
			wg.Wait()
			fake.Advance(100 * time.Millisecond) // one more request's worth
		}
		return result{admitted.Load(), scriptCalls(t, client) - before}
	}
	off := attack("off")
	on := attack("on", ratelimit.WithDenyCache(1000))
	if want := int64(10 + rounds - 1); off.admitted != want || on.admitted != want {
		t.Errorf("admitted %d without the deny cache and %d with it, want %d both (burst 10, then one per round)", off.admitted, on.admitted, want)
	}
	// Concurrent decisions on one key coalesce into one script run (see
	// docs/stores/redis.md), so without the deny cache the server runs at
	// most one script per request, and at least one per round.
	if off.calls > rounds*attackers*perCaller || off.calls < rounds {
		t.Errorf("without the deny cache the server ran %d scripts, want between %d and one per request, %d", off.calls, rounds, rounds*attackers*perCaller)
	}
	reduction := 1 - float64(on.calls)/float64(off.calls)
	t.Logf("store calls: %d without the deny cache, %d with it: %.1f%% fewer", off.calls, on.calls, 100*reduction)
	if reduction < 0.9 {
		t.Errorf("the deny cache cut store calls by %.1f%% (%d → %d), want at least 90%%", 100*reduction, off.calls, on.calls)
	}
}

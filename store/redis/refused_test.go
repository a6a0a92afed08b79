package redis_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"syscall"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/ratelimitkit/ratelimit"
	"github.com/ratelimitkit/ratelimit/algorithms"
	"github.com/ratelimitkit/ratelimit/internal/redisengine/storetest"
	"github.com/ratelimitkit/ratelimit/store"
	"github.com/ratelimitkit/ratelimit/store/redis"
)

// documentedOptions are the client options docs/stores/redis.md and the
// package's doc show.
func documentedOptions(addr string) *goredis.Options {
	return &goredis.Options{Addr: addr, ContextTimeoutEnabled: true, DialerRetries: 1, MaxRetries: -1}
}

// onClient returns a storetest constructor of stores on the client newClient
// returns for an address, closed after the test.
func onClient(newClient func(addr string) goredis.UniversalClient) func(t *testing.T, addr string) (store.Store, error) {
	return func(t *testing.T, addr string) (store.Store, error) {
		c := newClient(addr)
		t.Cleanup(func() { c.Close() })
		return redis.New(c)
	}
}

// TestRefusedConnection points the documented client at a port nothing
// listens on: every call answers within 100ms with an error that says
// "connection refused". Before the fix the documented client (without
// DialerRetries: 1) took the limiter's whole 1s budget and said it timed
// out; a client that retries commands (MaxRetries, 3 by default; the
// max-retries-5 case) took 40-160ms a call before the store sent its
// commands once.
func TestRefusedConnection(t *testing.T) {
	t.Run("documented", func(t *testing.T) {
		storetest.Refused(t, "redis", onClient(func(addr string) goredis.UniversalClient {
			return goredis.NewClient(documentedOptions(addr))
		}))
	})
	t.Run("max-retries-5", func(t *testing.T) {
		storetest.Refused(t, "redis", onClient(func(addr string) goredis.UniversalClient {
			o := documentedOptions(addr)
			o.MaxRetries = 5
			return goredis.NewClient(o)
		}))
	})
	t.Run("cluster", func(t *testing.T) {
		storetest.Refused(t, "redis", onClient(func(addr string) goredis.UniversalClient {
			return goredis.NewClusterClient(&goredis.ClusterOptions{Addrs: []string{addr}, ContextTimeoutEnabled: true, DialerRetries: 1, MaxRetries: -1})
		}))
	})
	t.Run("ring", func(t *testing.T) {
		storetest.Refused(t, "redis", onClient(func(addr string) goredis.UniversalClient {
			return goredis.NewRing(&goredis.RingOptions{Addrs: map[string]string{"one": addr}, ContextTimeoutEnabled: true, DialerRetries: 1, MaxRetries: -1})
		}))
	})
}

// TestServerKilled kills a private server under load: from the kill on,
// every call answers within 100ms, and decisions come back after a restart.
func TestServerKilled(t *testing.T) {
	storetest.Killed(t, func(t *testing.T, addr string) store.Store {
		s, err := onClient(func(addr string) goredis.UniversalClient { return goredis.NewClient(documentedOptions(addr)) })(t, addr)
		if err != nil {
			t.Fatal(err)
		}
		return s
	})
}

// TestRefusedGoRedisDefaults: a client with go-redis's defaults (five
// dials 100ms apart, three retries) is not the documented one, but a
// refused connection must still come back as that, within the limiter's
// 1s budget: before the store sent its commands once, the first calls
// each took the whole budget and said "store call exceeded its 1s
// budget ... context deadline exceeded".
func TestRefusedGoRedisDefaults(t *testing.T) {
	for _, timeoutEnabled := range []bool{true, false} {
		c := goredis.NewClient(&goredis.Options{Addr: storetest.ClosedPort(t), ContextTimeoutEnabled: timeoutEnabled})
		t.Cleanup(func() { c.Close() })
		s, err := redis.New(c)
		if err != nil {
			t.Fatal(err)
		}
		lim, err := ratelimit.New(s, algorithms.GCRA(10, time.Second, 5), ratelimit.WithName("defaults"))
		if err != nil {
			t.Fatal(err)
		}
		for i := range 3 {
			start := time.Now()
			_, err := lim.Allow(context.Background(), "k")
			took := time.Since(start)
			// Five dials, four sleeps of 100ms: 400ms, and room for a
			// loaded machine, still under the budget.
			if took > 800*time.Millisecond || errors.Is(err, context.DeadlineExceeded) ||
				!errors.Is(err, syscall.ECONNREFUSED) || !strings.Contains(fmt.Sprint(err), "connection refused") {
				t.Errorf("ContextTimeoutEnabled %v: Allow %d took %v: %v; want connection refused within 800ms", timeoutEnabled, i, took, err)
			}
			t.Logf("ContextTimeoutEnabled %v: Allow %d took %v", timeoutEnabled, i, took)
		}
	}
}

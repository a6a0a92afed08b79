package valkey_test

import (
	"context"
	"testing"
	"time"

	vk "github.com/valkey-io/valkey-go"

	"github.com/ratelimitkit/ratelimit/conformance"
	"github.com/ratelimitkit/ratelimit/internal/redisengine/storetest"
	"github.com/ratelimitkit/ratelimit/internal/testserver"
	"github.com/ratelimitkit/ratelimit/store"
	"github.com/ratelimitkit/ratelimit/store/valkey"
)

func target(c vk.Client) storetest.Target {
	return storetest.Target{
		NewStore: func(t *testing.T, prefix string, serverClock bool) store.Store {
			s, err := valkey.New(c, valkey.WithPrefix(prefix), valkey.WithServerClock(serverClock))
			if err != nil {
				t.Fatalf("valkey.New: %v", err)
			}
			return s
		},
		Expiries: func(prefix string) func(ctx context.Context) ([]conformance.Expiry, error) {
			return expiries(c, prefix)
		},
		FlushScripts: func(ctx context.Context) error {
			for _, n := range c.Nodes() {
				if err := n.Do(ctx, n.B().ScriptFlush().Build()).Error(); err != nil {
					return err
				}
			}
			return nil
		},
		State: func(s store.Store) func(context.Context, store.Key) ([]byte, int64, error) {
			return valkey.State(s.(*valkey.Store))
		},
		Set: func(ctx context.Context, key, value string) error {
			return c.Do(ctx, c.B().Set().Key(key).Value(value).Px(time.Minute).Build()).Error()
		},
	}
}

// servers runs fn against the standalone server and the cluster.
func servers(t *testing.T, fn func(t *testing.T, tg storetest.Target)) {
	t.Run("standalone", func(t *testing.T) { fn(t, target(standalone(t))) })
	t.Run("cluster", func(t *testing.T) { fn(t, target(cluster(t))) })
}

func TestNoKeyWithoutTTL(t *testing.T) {
	servers(t, func(t *testing.T, tg storetest.Target) { storetest.NoKeyWithoutTTL(t, tg, uniquePrefix()) })
}

func TestServerClock(t *testing.T) {
	servers(t, func(t *testing.T, tg storetest.Target) { storetest.ServerClock(t, tg, uniquePrefix()) })
}

func TestScriptFlush(t *testing.T) {
	servers(t, func(t *testing.T, tg storetest.Target) { storetest.ScriptFlush(t, tg, uniquePrefix()) })
}

func TestUnsupported(t *testing.T) {
	servers(t, func(t *testing.T, tg storetest.Target) { storetest.Unsupported(t, tg, uniquePrefix()) })
}

func TestCorrupt(t *testing.T) {
	servers(t, func(t *testing.T, tg storetest.Target) { storetest.Corrupt(t, tg, uniquePrefix()) })
}

func TestFailure(t *testing.T) {
	storetest.Failure(t, "valkey", func(t *testing.T, addr string) (store.Store, func()) {
		c, err := vk.NewClient(vk.ClientOption{InitAddress: []string{addr}, DisableCache: true})
		if err != nil {
			t.Fatal(err)
		}
		s, err := valkey.New(c)
		if err != nil {
			t.Fatal(err)
		}
		return s, c.Close
	})
}

func TestLimiterClockSlack(t *testing.T) {
	servers(t, func(t *testing.T, tg storetest.Target) { storetest.LimiterClockSlack(t, tg, uniquePrefix()) })
}

// frozen is the conformance harness's Freeze: a store on a private server
// (testserver.StartRedis: valkey-server or redis-server) and a function
// that freezes it with SIGSTOP, so that the FaultHungStore group holds
// every Limiter and lease call to its bound on a server that really stopped
// answering. The server is thawed and stopped when t ends.
func frozen(t *testing.T) (store.Store, func()) {
	r := testserver.StartRedis(t)
	s, err := valkey.New(newClient(t, r.Addr()), valkey.WithPrefix(uniquePrefix()), valkey.WithServerClock(false))
	if err != nil {
		t.Fatalf("valkey.New: %v", err)
	}
	return s, r.Freeze
}

package redis_test

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/ratelimitkit/ratelimit"
	"github.com/ratelimitkit/ratelimit/algorithms"
	"github.com/ratelimitkit/ratelimit/internal/redisengine"
	"github.com/ratelimitkit/ratelimit/internal/redisengine/storetest"
	"github.com/ratelimitkit/ratelimit/internal/testserver"
	"github.com/ratelimitkit/ratelimit/statefile"
	"github.com/ratelimitkit/ratelimit/store"
	"github.com/ratelimitkit/ratelimit/store/redis"
)

// ownClient is a caller's own UniversalClient: the store cannot know how to
// reach every node through it. Its nil embedded client panics, failing the
// test, if called.
type ownClient struct{ goredis.UniversalClient }

// TestExportUnsupported checks that a client the store cannot scan every
// node through says so with ErrUnsupported. Exports on real servers are
// tested with the move command (cmd/ratelimit).
func TestExportUnsupported(t *testing.T) {
	s, err := redis.New(ownClient{}, redis.WithServerClock(false))
	if err != nil {
		t.Fatal(err)
	}
	err = s.Export(context.Background(), "a:gcra", 0, func(store.Entry) error { return nil })
	if !errors.Is(err, store.ErrUnsupported) {
		t.Fatalf("Export through a %T = %v, want ErrUnsupported", ownClient{}, err)
	}
}

// TestExportBoundedOnFrozenServer runs storetest.ExportBounded (Count on
// a frozen server fails within about 1 s and works after the thaw) on a
// client built with go-redis's defaults (which do not honour a context's
// deadline while reading, and retry), once with the server's clock (one
// more round trip before the scan) and once without.
func TestExportBoundedOnFrozenServer(t *testing.T) {
	storetest.ExportBounded(t, func(t *testing.T, addr string) []store.Store {
		c := goredis.NewClient(&goredis.Options{Addr: addr})
		t.Cleanup(func() { c.Close() })
		return []store.Store{
			mustNew(t, c, redis.WithPrefix("frozen")),
			mustNew(t, c, redis.WithPrefix("frozen"), redis.WithServerClock(false)),
		}
	})
}

func mustNew(t *testing.T, c goredis.UniversalClient, opts ...redis.Option) *redis.Store {
	t.Helper()
	s, err := redis.New(c, opts...)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// roundTrips counts the commands and pipelines a go-redis client sends.
type roundTrips struct{ n atomic.Int64 }

func (r *roundTrips) DialHook(next goredis.DialHook) goredis.DialHook { return next }
func (r *roundTrips) ProcessHook(next goredis.ProcessHook) goredis.ProcessHook {
	return func(ctx context.Context, cmd goredis.Cmder) error { r.n.Add(1); return next(ctx, cmd) }
}
func (r *roundTrips) ProcessPipelineHook(next goredis.ProcessPipelineHook) goredis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []goredis.Cmder) error { r.n.Add(1); return next(ctx, cmds) }
}

// TestCountRoundTrips checks that Count reads keys in batches: 10,000 keys
// on a private server take a few dozen round trips (a SCAN and one
// pipeline per batch), not one or two per key as before.
func TestCountRoundTrips(t *testing.T) {
	srv := testserver.StartRedis(t)
	c := goredis.NewClient(&goredis.Options{Addr: srv.Addr()})
	t.Cleanup(func() { c.Close() })
	s := mustNew(t, c, redis.WithPrefix("rt"), redis.WithServerClock(false))
	ctx := context.Background()
	alg := algorithms.GCRA(10, time.Hour, 10)
	lim, err := ratelimit.New(s, alg, ratelimit.WithName("api"))
	if err != nil {
		t.Fatal(err)
	}
	const keys = 10_000
	for i := range keys {
		// Half the keys written by decisions (the Lua forms' key), half as
		// a user's algorithm's are (the Update key).
		if i%2 == 0 {
			lim.Allow(ctx, fmt.Sprint("user-", i))
			continue
		}
		// The other half through Update, which keeps state apart from
		// the Lua forms': Count reads both.
		key := store.Key{Namespace: "api:gcra", ID: fmt.Sprint("user-", i)}
		if err := s.Update(ctx, key, time.Now().UnixMicro(), func([]byte, int64) ([]byte, int64, error) {
			return make([]byte, 24), int64(time.Hour / time.Microsecond), nil
		}); err != nil {
			t.Fatal(err)
		}
	}
	var rt roundTrips
	c.AddHook(&rt)
	n, err := statefile.Count(ctx, lim.Store(), lim.Namespace(), time.Now())
	if n != keys || err != nil {
		t.Fatalf("Count = %d, %v; want %d", n, err, keys)
	}
	// SCAN's COUNT is a hint: allow twice the batches it asks for.
	if max := int64(2 * 2 * keys / redisengine.ScanBatch); rt.n.Load() > max {
		t.Errorf("Count of %d keys took %d round trips, want at most %d (a SCAN and a pipeline per batch)", keys, rt.n.Load(), max)
	}
	t.Logf("Count of %d keys: %d round trips", keys, rt.n.Load())
}

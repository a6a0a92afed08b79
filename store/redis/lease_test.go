package redis_test

import (
	"context"
	"errors"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/ratelimitkit/ratelimit"
	"github.com/ratelimitkit/ratelimit/internal/testserver"
	"github.com/ratelimitkit/ratelimit/lease"
	"github.com/ratelimitkit/ratelimit/store/redis"
)

// updateOnly hides the store's lease.Runner, so the locker uses Update.
type updateOnly struct{ ratelimit.Store }

// private starts a private Redis and returns it with a store on it, which
// reads the server's clock (the default).
func private(t *testing.T) (*testserver.Redis, *redis.Store) {
	srv := testserver.StartRedis(t)
	c := goredis.NewClient(&goredis.Options{Addr: srv.Addr(), ContextTimeoutEnabled: true})
	t.Cleanup(func() { c.Close() })
	s, err := redis.New(c)
	if err != nil {
		t.Fatal(err)
	}
	return srv, s
}

// TestLeaseFenceAfterRestart checks the fence across a restart of a server
// without persistence, which loses every record: with the server's clock
// (the default), the first fence after the restart is greater than every
// fence before it, and the old holder's lease is lost.
func TestLeaseFenceAfterRestart(t *testing.T) {
	srv, s := private(t)
	ctx := context.Background()
	for _, p := range []struct {
		name  string
		store ratelimit.Store
	}{{"server", s}, {"update", updateOnly{s}}} {
		t.Run(p.name, func(t *testing.T) {
			locker, err := lease.New(p.store, 10*time.Second)
			if err != nil {
				t.Fatal(err)
			}
			var last int64
			var held *lease.Lease
			for i := 0; i < 200; i++ {
				le, err := locker.TryAcquire(ctx, "restart-"+p.name)
				if err != nil {
					t.Fatalf("TryAcquire #%d: %v", i, err)
				}
				if le.Fence() <= last {
					t.Fatalf("TryAcquire #%d: fence %d, not greater than %d", i, le.Fence(), last)
				}
				last = le.Fence()
				if i == 199 {
					held = le
					break
				}
				if err := le.Release(ctx); err != nil {
					t.Fatalf("Release #%d: %v", i, err)
				}
			}
			srv.Restart()
			var le *lease.Lease
			for try := 0; ; try++ { // the pool's connections were cut
				if le, err = locker.TryAcquire(ctx, "restart-"+p.name); err == nil || try == 20 {
					break
				}
				time.Sleep(50 * time.Millisecond)
			}
			if err != nil {
				t.Fatalf("TryAcquire after the restart: %v", err)
			}
			if le.Fence() <= last {
				t.Errorf("first fence after a restart that lost the record = %d, want more than %d (rule: fences never go back, even when a restart loses the record)", le.Fence(), last)
			}
			if err := held.Extend(ctx); !errors.Is(err, lease.ErrLost) {
				t.Errorf("Extend of the lease held across the restart = %v, want ErrLost", err)
			}
		})
	}
}

// TestLeaseDoFrozenServer checks Do against a server that stops answering:
// its renewal gets no reply, and the work's context ends before the lease
// could have run out, measured on the monotonic clock from before the
// acquire was sent.
func TestLeaseDoFrozenServer(t *testing.T) {
	srv, s := private(t)
	const ttl = time.Second
	locker, err := lease.New(s, ttl)
	if err != nil {
		t.Fatal(err)
	}
	before := time.Now()
	var ended time.Time
	var deadline time.Time
	err = locker.Do(context.Background(), "frozen", func(ctx context.Context, le *lease.Lease) error {
		deadline = le.Deadline()
		srv.Freeze()
		<-ctx.Done()
		ended = time.Now()
		srv.Thaw()
		return nil
	})
	if !errors.Is(err, lease.ErrLost) {
		t.Errorf("locker.Do() with the server frozen = %v, want ErrLost", err)
	}
	if !ended.Before(deadline) || ended.Sub(before) >= ttl {
		t.Errorf("work ended %v after the acquire was sent, lease deadline %v after; want before the deadline and the TTL %v", ended.Sub(before), deadline.Sub(before), ttl)
	}
}

// The store runs the lease's Lua form (the engine's RunLease).
var _ lease.Runner = (*redis.Store)(nil)

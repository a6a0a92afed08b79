package redis_test

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"strconv"
	"strings"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/ratelimitkit/ratelimit"
	"github.com/ratelimitkit/ratelimit/algorithms"
	"github.com/ratelimitkit/ratelimit/internal/testserver"
	"github.com/ratelimitkit/ratelimit/lease"
	"github.com/ratelimitkit/ratelimit/lease/leasewire"
	"github.com/ratelimitkit/ratelimit/store"
	"github.com/ratelimitkit/ratelimit/store/redis"
)

// updateOnly hides the store's leasewire.Runner, so the locker uses Update.
type updateOnly struct{ store.Store }

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
		store store.Store
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
	locker, err := lease.New(s, ttl, lease.WithMargin(ttl/10))
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
var _ leasewire.Runner = (*redis.Store)(nil)

// TestLeaseFenceLimit checks that both paths, the Lua form and Update,
// treat a record whose fence is 2^53 or more as corrupt and refuse to mint
// a fence of 2^53 (the next after 2^53-1), as leasewire.Step does: an error
// wrapping ErrCorruptState, and the record left as it was.
func TestLeaseFenceLimit(t *testing.T) {
	_, s := private(t)
	ctx := context.Background()
	if !strings.Contains(leasewire.Lua, "local MAX = "+strconv.FormatInt(algorithms.MaxExact, 10)+" ") {
		t.Fatalf("lease.Lua's MAX is not algorithms.MaxExact (%d)", int64(algorithms.MaxExact))
	}
	for _, p := range []struct {
		name  string
		store store.Store
	}{{"server", s}, {"update", updateOnly{s}}} {
		for _, tc := range []struct {
			name  string
			fence int64
		}{{"last", algorithms.MaxExact - 1}, {"at", algorithms.MaxExact}, {"past", algorithms.MaxExact + 1}} {
			t.Run(p.name+"/"+tc.name, func(t *testing.T) {
				locker, err := lease.New(p.store, 10*time.Second)
				if err != nil {
					t.Fatal(err)
				}
				id := "fence-limit-" + p.name + "-" + tc.name
				name := redis.StateKey(redis.DefaultPrefix, store.Key{Namespace: locker.Namespace(), ID: id}) + ":u"
				// A released record kept for an hour: the Update format's
				// expiry, then version 1, the released flag, the fence, the
				// lease's expiry and the owner.
				value := make([]byte, 42)
				binary.LittleEndian.PutUint64(value[0:8], uint64(time.Now().Add(time.Hour).UnixMicro()))
				value[8], value[9] = 1, 1
				binary.BigEndian.PutUint64(value[10:18], uint64(tc.fence))
				if err := s.Client().Set(ctx, name, value, time.Hour).Err(); err != nil {
					t.Fatal(err)
				}
				if le, err := locker.TryAcquire(ctx, id); !errors.Is(err, ratelimit.ErrCorruptState) {
					t.Fatalf("TryAcquire after fence %d = %v, %v; want ErrCorruptState", tc.fence, le, err)
				}
				if got, err := s.Client().Get(ctx, name).Bytes(); err != nil || !bytes.Equal(got, value) {
					t.Errorf("record after the refused acquire = %x, %v; want it unchanged", got, err)
				}
			})
		}
	}
}

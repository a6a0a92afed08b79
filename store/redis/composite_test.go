package redis_test

import (
	"bytes"
	"context"
	"encoding/binary"
	"fmt"
	"reflect"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/ratelimitkit/ratelimit"
	"github.com/ratelimitkit/ratelimit/algorithms"
	"github.com/ratelimitkit/ratelimit/internal/testserver"
	"github.com/ratelimitkit/ratelimit/store"
	"github.com/ratelimitkit/ratelimit/store/redis"
)

// TestCompositeOneRoundTrip checks that a composite decides in one round
// trip whatever its parts, the sliding log included (whose part the
// composite Lua form holds, written by hand): a decision on a new key, an
// admission on a key with state, and a denial each send exactly one
// command or pipeline, counted by a hook on the store's own client.
func TestCompositeOneRoundTrip(t *testing.T) {
	c := goredis.NewClient(&goredis.Options{Addr: testserver.RedisAddr(t)})
	t.Cleanup(func() { c.Close() })
	s := mustNew(t, c, redis.WithPrefix(fmt.Sprint("rt-composite-", time.Now().UnixNano())), redis.WithServerClock(false))
	ctx := context.Background()
	for _, alg := range []algorithms.Algorithm{
		algorithms.All(algorithms.SlidingLog(2, time.Hour), algorithms.FixedWindow(10, time.Hour)),
		algorithms.All(algorithms.GCRA(2, time.Hour, 2), algorithms.SlidingLog(5, time.Hour), algorithms.TokenBucket(5, time.Hour, 5)),
	} {
		lim, err := ratelimit.New(s, alg)
		if err != nil {
			t.Fatal(err)
		}
		// The script is loaded by a first call on another key.
		if _, err := lim.Allow(ctx, "warm"); err != nil {
			t.Fatal(err)
		}
		var rt roundTrips
		c.AddHook(&rt)
		for i, want := range []bool{true, true, false} {
			before := rt.n.Load()
			d, err := lim.Allow(ctx, "k")
			if err != nil {
				t.Fatal(err)
			}
			if d.Allowed != want {
				t.Errorf("%v: decision %d on one key allowed = %v, want %v", alg, i+1, d.Allowed, want)
			}
			if n := rt.n.Load() - before; n != 1 {
				t.Errorf("%v: decision %d on one key took %d round trips, want 1", alg, i+1, n)
			}
		}
		c = goredis.NewClient(&goredis.Options{Addr: testserver.RedisAddr(t)}) // a client without the hook
		t.Cleanup(func() { c.Close() })
		s = mustNew(t, c, redis.WithPrefix(fmt.Sprint("rt-composite-", time.Now().UnixNano())), redis.WithServerClock(false))
	}
}

// TestCompositeLongSlidingLog checks a composite whose sliding log holds
// more entries than one Lua call may return or take (about 8,000 values):
// a log of 4,500 entries, built by the Go form and imported, decides and
// is stored as the Go form decides and stores it.
func TestCompositeLongSlidingLog(t *testing.T) {
	c := goredis.NewClient(&goredis.Options{Addr: testserver.RedisAddr(t)})
	t.Cleanup(func() { c.Close() })
	s := mustNew(t, c, redis.WithPrefix(fmt.Sprint("long-log-", time.Now().UnixNano())), redis.WithServerClock(false))
	ctx := context.Background()
	alg := algorithms.All(algorithms.SlidingLog(5000, time.Hour), algorithms.FixedWindow(100_000, time.Hour))
	key := store.Key{Namespace: "long", ID: "k"}
	base := time.Now().UnixMicro()
	var state []byte
	var expires int64
	for i := range 4500 {
		now := base + int64(i)
		st, err := alg.Decide(state, algorithms.Request{Now: now, Cost: 1})
		if err != nil || !st.Decision.Allowed {
			t.Fatalf("Go form, request %d: %+v, %v", i, st.Decision, err)
		}
		state, expires = st.Next, now+st.TTL
	}
	if ok, err := s.Import(ctx, alg, store.Entry{Key: key, State: state, Expires: expires}, base+4500); !ok || err != nil {
		t.Fatalf("Import = %v, %v", ok, err)
	}
	for i, cost := range []int64{1, 600, 2} {
		req := algorithms.Request{Now: base + 4500 + int64(i), Cost: cost}
		want, err := alg.Decide(state, req)
		if err != nil {
			t.Fatal(err)
		}
		got, err := s.Decide(ctx, key, alg, req)
		if err != nil {
			t.Fatalf("request %d (cost %d): %v", i, cost, err)
		}
		if got.Allowed != want.Decision.Allowed || got.Remaining != want.Decision.Remaining || got.RetryAfter != want.Decision.RetryAfter {
			t.Errorf("request %d (cost %d): %+v, want the Go form's %+v", i, cost, got, want.Decision)
		}
		if want.Next != nil {
			state = want.Next
		}
	}
	stored, _, err := redis.State(s)(ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(stored, state) {
		t.Errorf("stored state of %d bytes differs from the Go form's of %d bytes", len(stored), len(state))
	}
}

// TestCompositeLegacySlidingLog checks a composite whose sliding log was
// written before the log had its header (entries alone): the composite
// Lua form sums it once and writes it with the header, as the Go form does.
func TestCompositeLegacySlidingLog(t *testing.T) {
	c := goredis.NewClient(&goredis.Options{Addr: testserver.RedisAddr(t)})
	t.Cleanup(func() { c.Close() })
	s := mustNew(t, c, redis.WithPrefix(fmt.Sprint("legacy-log-", time.Now().UnixNano())), redis.WithServerClock(false))
	ctx := context.Background()
	alg := algorithms.All(algorithms.SlidingLog(5, time.Second), algorithms.FixedWindow(100, time.Hour))
	key := store.Key{Namespace: "legacy", ID: "k"}
	base := time.Now().UnixMicro()
	var log []byte
	for _, e := range [][2]int64{{base - 900_000, 2}, {base - 500_000, 1}, {base - 100, 1}} {
		log = binary.LittleEndian.AppendUint64(log, uint64(e[0]))
		log = binary.LittleEndian.AppendUint64(log, uint64(e[1]))
	}
	exp := base + 900_000
	var state []byte
	state = binary.LittleEndian.AppendUint64(state, uint64(exp))
	state = binary.LittleEndian.AppendUint64(state, uint64(len(log)))
	state = append(state, log...)
	state = binary.LittleEndian.AppendUint64(state, 0)
	state = binary.LittleEndian.AppendUint64(state, 0)
	if ok, err := s.Import(ctx, alg, store.Entry{Key: key, State: state, Expires: exp}, base); !ok || err != nil {
		t.Fatalf("Import = %v, %v", ok, err)
	}
	for i, step := range []struct{ at, cost int64 }{{0, 1}, {1, 1}, {200_000, 1}, {600_000, 2}} {
		req := algorithms.Request{Now: base + step.at, Cost: step.cost}
		want, err := alg.Decide(state, req)
		if err != nil {
			t.Fatal(err)
		}
		got, err := s.Decide(ctx, key, alg, req)
		if err != nil {
			t.Fatalf("request %d: %v", i, err)
		}
		if !reflect.DeepEqual(got, want.Decision) {
			t.Errorf("request %d at +%dµs cost %d: %+v, want the Go form's %+v", i, step.at, step.cost, got, want.Decision)
		}
		if want.Next != nil {
			state = want.Next
		}
		stored, _, err := redis.State(s)(ctx, key)
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(stored, state) {
			t.Errorf("request %d: stored state %v, want the Go form's %v", i, stored, state)
		}
	}
}

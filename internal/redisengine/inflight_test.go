package redisengine_test

import (
	"context"
	"fmt"
	"runtime"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/ratelimitkit/ratelimit/algorithms"
	"github.com/ratelimitkit/ratelimit/internal/redisengine"
	"github.com/ratelimitkit/ratelimit/internal/testserver"
	"github.com/ratelimitkit/ratelimit/lease/leasewire"
	"github.com/ratelimitkit/ratelimit/store"
	"github.com/ratelimitkit/ratelimit/store/redis"
)

// flight is a go-redis hook that counts the batches the store has at the
// server at once: each lone call (one EVALSHA or EVAL) and each pipeline
// of them is one batch, in flight from when it leaves until its replies
// are in.
type flight struct {
	now, most atomic.Int64
	batches   atomic.Int64
}

func (f *flight) DialHook(next goredis.DialHook) goredis.DialHook { return next }

func (f *flight) ProcessHook(next goredis.ProcessHook) goredis.ProcessHook {
	return func(ctx context.Context, cmd goredis.Cmder) error {
		if n := cmd.Name(); n != "evalsha" && n != "eval" {
			return next(ctx, cmd)
		}
		defer f.fly()()
		return next(ctx, cmd)
	}
}

func (f *flight) ProcessPipelineHook(next goredis.ProcessPipelineHook) goredis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []goredis.Cmder) error {
		if !slices.ContainsFunc(cmds, func(c goredis.Cmder) bool { return c.Name() == "evalsha" || c.Name() == "eval" }) {
			return next(ctx, cmds) // a connection's handshake, not ours
		}
		defer f.fly()()
		return next(ctx, cmds)
	}
}

// fly counts a batch in flight until the function it returns is called.
func (f *flight) fly() func() {
	f.batches.Add(1)
	n := f.now.Add(1)
	for m := f.most.Load(); n > m && !f.most.CompareAndSwap(m, n); m = f.most.Load() {
	}
	return func() { f.now.Add(-1) }
}

// TestBatchesInFlight checks, on the Redis server, that under load a
// server's batcher keeps more than one batch in flight, never more than
// maxFlying, and that every outcome is still exact: callers hammering one
// fixed window key (whose decisions coalesce) get exactly its limit of
// admissions, each with a remaining count of its own; callers spread over
// many keys get exactly each key's limit; and callers racing for leases
// (calls that no run coalesces) get each key exactly once. Afterwards no
// goroutine of the batcher is left.
func TestBatchesInFlight(t *testing.T) {
	c := goredis.NewClient(&goredis.Options{Addr: testserver.RedisAddr(t), PoolSize: 64})
	t.Cleanup(func() { c.Close() })
	var f flight
	c.AddHook(&f)
	s, err := redis.New(c, redis.WithPrefix(fmt.Sprintf("rltest-fly-%d", time.Now().UnixNano())))
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	const callers, each = 64, 40
	before := runtime.NumGoroutine()
	// hammer runs callers goroutines, each making each calls of call, and
	// fails the test on any error.
	hammer := func(call func(g, i int) error) {
		t.Helper()
		var wg sync.WaitGroup
		errs := make(chan error, callers)
		for g := range callers {
			wg.Go(func() {
				for i := range each {
					if err := call(g, i); err != nil {
						errs <- err
						return
					}
				}
			})
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			t.Fatal(err)
		}
	}

	// One hot key: its decisions coalesce into one run per batch.
	const limit = 500
	fw := algorithms.FixedWindow(limit, algorithms.MaxPeriod)
	deadline := time.Now().Add(20 * time.Second)
	for round := 0; ; round++ {
		hot := store.Key{Namespace: "fly", ID: fmt.Sprint("hot-", round)}
		var mu sync.Mutex
		remaining := map[int64]int{}
		hammer(func(_, _ int) error {
			d, err := s.Decide(ctx, hot, fw, algorithms.Request{Now: time.Now().UnixMicro(), Cost: 1})
			if err == nil && d.Allowed {
				mu.Lock()
				remaining[d.Remaining]++
				mu.Unlock()
			}
			return err
		})
		if len(remaining) != limit {
			t.Fatalf("round %d: %d decisions on one key of limit %d: %d admitted with distinct remaining counts", round, callers*each, limit, len(remaining))
		}
		for r, n := range remaining {
			if r < 0 || r >= limit || n != 1 {
				t.Fatalf("round %d: remaining %d given to %d admissions, want each of 0..%d once", round, r, n, limit-1)
			}
		}
		if f.most.Load() >= 2 || time.Now().After(deadline) {
			break
		}
	}
	if m, want := f.most.Load(), int64(redisengine.MaxFlying()); m < 2 || m > want {
		t.Fatalf("at most %d batches in flight at once (of %d batches for %d callers), want 2 to %d", m, f.batches.Load(), callers, want)
	}

	// Many keys, each caller on each in turn.
	const keys, perKey = 32, 20
	fwKeys := algorithms.FixedWindow(perKey, algorithms.MaxPeriod)
	var admitted [keys]atomic.Int64
	hammer(func(g, i int) error {
		k := (g + i) % keys
		d, err := s.Decide(ctx, store.Key{Namespace: "fly", ID: fmt.Sprint("many-", k)}, fwKeys, algorithms.Request{Now: time.Now().UnixMicro(), Cost: 1})
		if err == nil && d.Allowed {
			admitted[k].Add(1)
		}
		return err
	})
	for k := range admitted {
		if n := admitted[k].Load(); n != perKey {
			t.Errorf("key many-%d: %d of %d decisions admitted, want its limit %d", k, n, callers*each/keys, perKey)
		}
	}

	// Leases: every caller tries to take every key of a few; each key
	// goes to exactly one of them.
	const leases = 8
	var mu sync.Mutex
	owners := map[int]map[leasewire.Token]bool{}
	hammer(func(g, i int) error {
		var owner leasewire.Token
		owner[0], owner[1] = byte(g), 1
		k := i % leases
		r, err := s.RunLease(ctx, store.Key{Namespace: "fly", ID: fmt.Sprint("lease-", k)}, time.Now().UnixMicro(),
			leasewire.Request{Op: leasewire.OpAcquire, Owner: owner, TTL: int64(time.Hour / time.Microsecond)})
		if err == nil && r.Code == leasewire.OK {
			mu.Lock()
			if owners[k] == nil {
				owners[k] = map[leasewire.Token]bool{}
			}
			owners[k][owner] = true
			mu.Unlock()
		}
		return err
	})
	for k := range leases {
		// An owner that acquires again a lease it holds is told OK: count
		// owners, not acquisitions.
		if n := len(owners[k]); n != 1 {
			t.Errorf("lease-%d: taken by %d owners, want 1", k, n)
		}
	}
	t.Logf("%d batches, at most %d in flight at once", f.batches.Load(), f.most.Load())

	// No goroutine outlives the batches in flight.
	for runtime.NumGoroutine() > before {
		if time.Now().After(deadline.Add(10 * time.Second)) {
			t.Fatalf("%d goroutines left, %d before", runtime.NumGoroutine(), before)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

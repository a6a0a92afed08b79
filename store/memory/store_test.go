package memory_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"runtime"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/ratelimitkit/ratelimit"
	"github.com/ratelimitkit/ratelimit/algorithms"
	"github.com/ratelimitkit/ratelimit/clock"
	"github.com/ratelimitkit/ratelimit/store"
	"github.com/ratelimitkit/ratelimit/store/memory"
)

// Tests of what the memory store promises beyond the conformance suite:
// bounded memory, reclamation of expired state, and safety under
// concurrent use.

var epoch = time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)

func newLimiter(t testing.TB, s *memory.Store, alg algorithms.Algorithm) (*ratelimit.Limiter, *clock.Fake) {
	t.Helper()
	c := clock.NewFake(epoch)
	lim, err := ratelimit.New(s, alg, ratelimit.WithClock(c))
	if err != nil {
		t.Fatalf("ratelimit.New(%v): %v", alg, err)
	}
	return lim, c
}

func allow(t testing.TB, lim *ratelimit.Limiter, key string) ratelimit.Decision {
	t.Helper()
	d, err := lim.Allow(context.Background(), key)
	if err != nil {
		t.Fatalf("lim.Allow(%q): %v", key, err)
	}
	return d
}

func TestWithMaxKeysRejectsTinyCaps(t *testing.T) {
	for _, n := range []int{-1, 0, 1, 63} {
		if _, err := memory.New(memory.WithMaxKeys(n)); !errors.Is(err, ratelimit.ErrInvalidParams) {
			t.Errorf("memory.New(WithMaxKeys(%d)) error = %v, want ErrInvalidParams", n, err)
		}
	}
	if _, err := memory.New(memory.WithMaxKeys(64)); err != nil {
		t.Errorf("memory.New(WithMaxKeys(64)): %v", err)
	}
}

// TestMaxKeysBoundsMemory writes millions of distinct live keys (fewer
// under the race detector) into a store capped at 10,000 keys, which is not
// a multiple of the 64 shards, so the rounding is checked too: Len never
// exceeds the cap, and the heap does not grow with the number of keys
// written.
func TestMaxKeysBoundsMemory(t *testing.T) {
	const maxKeys = 10_000
	total := 2_000_000
	if testing.Short() || raceEnabled {
		total = 200_000
	}
	s := memory.MustNew(memory.WithMaxKeys(maxKeys))
	lim, _ := newLimiter(t, s, algorithms.GCRA(1, time.Hour, 1)) // state lives an hour: nothing expires
	buf := []byte("key-")
	var heapAfterCap int64
	for i := range total {
		allow(t, lim, string(strconv.AppendInt(buf[:4], int64(i), 10)))
		if i%1000 == 0 {
			if n := s.Len(); n > maxKeys {
				t.Fatalf("after %d distinct keys, Len = %d, want at most %d", i+1, n, maxKeys)
			}
		}
		if i == 5*maxKeys {
			heapAfterCap = heapAlloc()
		}
	}
	if n := s.Len(); n > maxKeys || n < maxKeys*9/10 {
		t.Errorf("after %d distinct keys, Len = %d, want at most %d and close to it", total, n, maxKeys)
	}
	if grown := heapAlloc() - heapAfterCap; grown > 1<<20 {
		t.Errorf("heap grew by %d bytes between %d and %d distinct keys at a cap of %d keys, want it flat", grown, 5*maxKeys, total, maxKeys)
	}
	runtime.KeepAlive(lim)
}

// TestEvictionPrefersExpiredState fills a store to its cap, lets every
// key's state expire, and writes new keys: they must take the place of
// expired state, not of each other. Eviction samples, so a live key may
// lose its state by bad luck; the test allows 1 in 100.
func TestEvictionPrefersExpiredState(t *testing.T) {
	const maxKeys = 64 * 64
	s := memory.MustNew(memory.WithMaxKeys(maxKeys))
	lim, c := newLimiter(t, s, algorithms.FixedWindow(1, time.Minute))
	for i := range 2 * maxKeys {
		allow(t, lim, fmt.Sprintf("old-%d", i))
	}
	if n := s.Len(); n > maxKeys {
		t.Fatalf("Len = %d, want at most %d", n, maxKeys)
	}
	c.Advance(time.Minute) // every old key's window has ended
	const fresh = maxKeys / 8
	for i := range fresh {
		allow(t, lim, fmt.Sprintf("new-%d", i))
	}
	lost := 0
	for i := range fresh {
		if allow(t, lim, fmt.Sprintf("new-%d", i)).Allowed {
			lost++ // a second call in the window is admitted only if the state was evicted
		}
	}
	t.Logf("%d of %d new keys lost their state", lost, fresh)
	if lost > fresh/100 {
		t.Errorf("%d of %d new keys lost their state while expired state filled the store, want at most %d", lost, fresh, fresh/100)
	}
}

// TestFloodDoesNotEvictOtherLimiters floods a full store with distinct keys
// through one limiter (a sliding log whose state lives an hour) while
// another limiter's keys (a GCRA whose state lives a minute, so it would
// expire soonest) are exhausted: the flood must recycle its own keys and
// leave the other limiter's state alone, so those keys stay denied. New
// keys of the other limiter still get in, and keep their state.
func TestFloodDoesNotEvictOtherLimiters(t *testing.T) {
	const maxKeys = 64 * 64
	flood := 400_000
	if testing.Short() || raceEnabled {
		flood = 100_000
	}
	s := memory.MustNew(memory.WithMaxKeys(maxKeys))
	c := clock.NewFake(epoch)
	victim, err := ratelimit.New(s, algorithms.GCRA(10, time.Minute, 10), ratelimit.WithClock(c), ratelimit.WithName("otp"))
	if err != nil {
		t.Fatal(err)
	}
	attacker, err := ratelimit.New(s, algorithms.SlidingLog(1, time.Hour), ratelimit.WithClock(c), ratelimit.WithName("login"))
	if err != nil {
		t.Fatal(err)
	}
	const victims = 100
	for i := range victims {
		key := fmt.Sprintf("user-%d", i)
		for range 10 {
			if d := allow(t, victim, key); !d.Allowed {
				t.Fatalf("victim.Allow(%q) within the burst = denied", key)
			}
		}
	}
	buf := []byte("flood-")
	for i := range flood {
		allow(t, attacker, string(strconv.AppendInt(buf[:6], int64(i), 10)))
	}
	if n := s.Len(); n > maxKeys {
		t.Errorf("after the flood, Len = %d, want at most %d", n, maxKeys)
	}
	admitted := 0
	for i := range victims {
		if allow(t, victim, fmt.Sprintf("user-%d", i)).Allowed {
			admitted++
		}
	}
	if admitted != 0 {
		t.Errorf("after %d keys flooded through another limiter, %d of %d exhausted keys were admitted, want 0 (their state was evicted)", flood, admitted, victims)
	}
	// A new key of the victim limiter gets in, at the flood's expense,
	// and keeps its state.
	for i := range 10 {
		if d := allow(t, victim, "newcomer"); !d.Allowed {
			t.Fatalf("victim.Allow(newcomer) #%d after the flood = denied, want allowed (burst 10)", i)
		}
	}
	if d := allow(t, victim, "newcomer"); d.Allowed {
		t.Errorf("victim.Allow(newcomer) #10 after the flood = allowed, want denied: its state was evicted")
	}
}

// TestReclaimOnInsert checks that expired state is reclaimed as new keys
// arrive, without Sweep and without a full store.
func TestReclaimOnInsert(t *testing.T) {
	const n = 6_400
	s := memory.MustNew()
	lim, c := newLimiter(t, s, algorithms.TokenBucket(10, time.Second, 10))
	for i := range n {
		allow(t, lim, fmt.Sprintf("old-%d", i))
	}
	if got := s.Len(); got != n {
		t.Fatalf("Len = %d after %d keys, want %d", got, n, n)
	}
	c.Advance(time.Second) // every old key's state has expired
	for i := range n {
		allow(t, lim, fmt.Sprintf("new-%d", i))
	}
	// Each insertion examines a sample of its shard and drops the expired
	// entries in it, so nearly all old keys are gone.
	t.Logf("Len = %d after %d expired and %d live keys", s.Len(), n, n)
	if got := s.Len(); got > n+n/10 {
		t.Errorf("Len = %d after %d expired and %d live keys, want at most %d: expired state is not reclaimed on insert", got, n, n, n+n/10)
	}
}

// TestSweep checks that Sweep removes every expired key and nothing else,
// judging expiry by the latest request time any shard has seen.
func TestSweep(t *testing.T) {
	s := memory.MustNew()
	short, _ := newLimiter(t, s, algorithms.FixedWindow(5, time.Second))
	for i := range 1000 {
		allow(t, short, fmt.Sprintf("short-%d", i))
	}
	later := clock.NewFake(epoch.Add(2 * time.Second))
	long, err := ratelimit.New(s, algorithms.FixedWindow(5, time.Hour), ratelimit.WithClock(later))
	if err != nil {
		t.Fatal(err)
	}
	const live = 1 // one request at the later time is enough for every shard
	for i := range live {
		allow(t, long, fmt.Sprintf("long-%d", i))
	}
	if got := s.Sweep(); got > 1000 {
		t.Errorf("Sweep = %d, want at most the 1000 expired keys (the insertion may have reclaimed a few)", got)
	}
	if got := s.Len(); got != live {
		t.Errorf("Len after Sweep = %d, want the %d live keys", got, live)
	}
	if got := s.Sweep(); got != 0 {
		t.Errorf("second Sweep = %d, want 0", got)
	}
	now := later.Now().UnixMicro()
	s.Expiries(func(k store.Key, expires int64) {
		if expires <= now {
			t.Errorf("key %v expired at %d, not after now %d, survived Sweep", k, expires, now)
		}
	})
	for i := range live {
		k := fmt.Sprintf("long-%d", i)
		if d, err := long.Peek(context.Background(), k); err != nil || d.Remaining != 4 {
			t.Fatalf("lim.Peek(%q) after Sweep = remaining %d, %v; want 4 (state kept)", k, d.Remaining, err)
		}
	}
}

// TestFailedDecisionLeavesState checks that a decision that fails after
// writing into the state it was given leaves the stored state as it was:
// the store hands algorithms a copy.
func TestFailedDecisionLeavesState(t *testing.T) {
	ctx := context.Background()
	key := store.Key{Namespace: "t:own", ID: "k"}
	now := epoch.UnixMicro()
	for _, size := range []int{8, 24, 25, 4000} {
		t.Run(strconv.Itoa(size), func(t *testing.T) {
			s := memory.MustNew()
			want := bytes.Repeat([]byte{7}, size)
			put := func(cur []byte, now int64) ([]byte, int64, error) { return want, 1e6, nil }
			if err := s.Update(ctx, key, now, put); err != nil {
				t.Fatal(err)
			}
			boom := errors.New("boom")
			scribble := func(cur []byte, now int64) ([]byte, int64, error) {
				for i := range cur {
					cur[i] = 0xff
				}
				return nil, 0, boom
			}
			if err := s.Update(ctx, key, now, scribble); !errors.Is(err, boom) {
				t.Fatalf("Update = %v, want %v", err, boom)
			}
			if _, err := s.Decide(ctx, key, scribbler{boom}, algorithms.Request{Now: now, Cost: 1}); !errors.Is(err, boom) {
				t.Fatalf("Decide = %v, want %v", err, boom)
			}
			check := func(cur []byte, now int64) ([]byte, int64, error) {
				if !bytes.Equal(cur, want) {
					t.Errorf("state after failed updates = % x, want % x", cur[:min(len(cur), 32)], want[:min(len(want), 32)])
				}
				return nil, 0, nil
			}
			s.Update(ctx, key, now, check)
		})
	}
}

// scribbler is an algorithm that overwrites the state it is given and
// then fails.
type scribbler struct{ err error }

func (scribbler) Name() string    { return "scribbler" }
func (scribbler) Validate() error { return nil }
func (scribbler) MaxCost() int64  { return 1 }
func (a scribbler) Decide(state []byte, req algorithms.Request) (algorithms.Step, error) {
	for i := range state {
		state[i] = 0xff
	}
	return algorithms.Step{}, a.err
}

// TestStateSizes stores states that grow past the inline size, shrink back
// and grow again, and reads each back.
func TestStateSizes(t *testing.T) {
	ctx := context.Background()
	s := memory.MustNew()
	key := store.Key{Namespace: "t:own", ID: "sizes"}
	now := epoch.UnixMicro()
	for _, size := range []int{0, 1, 24, 25, 160, 16000, 16, 3000, 200, 0, 24} {
		want := bytes.Repeat([]byte{byte(size)}, size)
		err := s.Update(ctx, key, now, func(cur []byte, now int64) ([]byte, int64, error) {
			next := make([]byte, size) // not nil, even when empty
			copy(next, want)
			return next, 1e6, nil
		})
		if err != nil {
			t.Fatal(err)
		}
		s.Update(ctx, key, now, func(cur []byte, now int64) ([]byte, int64, error) {
			if cur == nil || !bytes.Equal(cur, want) {
				t.Errorf("state of %d bytes read back as %d bytes (nil: %t)", size, len(cur), cur == nil)
			}
			return nil, 0, nil
		})
	}
}

// TestZeroTTLIsAnError checks that state written without a TTL is refused
// on both paths, and nothing is stored.
func TestZeroTTLIsAnError(t *testing.T) {
	ctx := context.Background()
	s := memory.MustNew()
	key := store.Key{Namespace: "t:own", ID: "ttl"}
	now := epoch.UnixMicro()
	if err := s.Update(ctx, key, now, func([]byte, int64) ([]byte, int64, error) { return []byte{1}, 0, nil }); err == nil {
		t.Error("Update storing state with ttl 0 = nil error, want an error")
	}
	if _, err := s.Decide(ctx, key, noTTL{}, algorithms.Request{Now: now, Cost: 1}); err == nil {
		t.Error("Decide storing state with ttl 0 = nil error, want an error")
	}
	if n := s.Len(); n != 0 {
		t.Errorf("Len = %d after refused writes, want 0", n)
	}
}

type noTTL struct{}

func (noTTL) Name() string    { return "no_ttl" }
func (noTTL) Validate() error { return nil }
func (noTTL) MaxCost() int64  { return 1 }
func (noTTL) Decide(state []byte, req algorithms.Request) (algorithms.Step, error) {
	return algorithms.Step{Decision: algorithms.Decision{Allowed: true}, Next: []byte{1}}, nil
}

// TestConcurrentUse runs every operation at once on overlapping keys
// (run it with -race): decisions under every algorithm, Reset, Sweep, Len
// and Expiries, on a store small enough that eviction runs too. Meanwhile a
// hot key in a roomy store must admit exactly its limit on a clock that
// stands still.
func TestConcurrentUse(t *testing.T) {
	const workers, calls, limit, maxKeys = 8, 2000, 500, 64 * 8
	small := memory.MustNew(memory.WithMaxKeys(maxKeys))
	roomy := memory.MustNew()
	hot, _ := newLimiter(t, roomy, algorithms.FixedWindow(limit, time.Hour))
	algs := []algorithms.Algorithm{
		algorithms.FixedWindow(3, time.Second), algorithms.SlidingLog(3, time.Second),
		algorithms.SlidingWindow(3, time.Second), algorithms.TokenBucket(3, time.Second, 3),
		algorithms.LeakyBucket(3, time.Second, 3), algorithms.GCRA(3, time.Second, 3),
	}
	var lims []*ratelimit.Limiter
	for _, store := range []*memory.Store{small, roomy} {
		for _, a := range algs {
			lim, _ := newLimiter(t, store, a)
			lims = append(lims, lim)
		}
	}
	admitted := make(chan int, workers)
	var wg sync.WaitGroup
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			ctx := context.Background()
			n := 0
			for i := range calls {
				key := strconv.Itoa((w*7 + i) % 1000)
				lim := lims[i%len(lims)]
				if _, err := lim.Allow(ctx, key); err != nil {
					t.Errorf("Allow(%q): %v", key, err)
					break
				}
				switch i % 50 {
				case 0:
					lim.Reset(ctx, key)
				case 1:
					small.Sweep()
					roomy.Sweep()
				case 2:
					if n := small.Len(); n > maxKeys {
						t.Errorf("Len = %d, want at most %d", n, maxKeys)
					}
				case 3:
					small.Expiries(func(store.Key, int64) {})
				}
				if d, err := hot.Allow(ctx, "hot"); err != nil {
					t.Errorf("Allow(hot): %v", err)
				} else if d.Allowed {
					n++
				}
			}
			admitted <- n
		}()
	}
	wg.Wait()
	close(admitted)
	total := 0
	for n := range admitted {
		total += n
	}
	if total != limit {
		t.Errorf("hot key admitted %d of %d concurrent calls, want exactly %d", total, workers*calls, limit)
	}
}

package dynamo_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/ratelimitkit/ratelimit"
	"github.com/ratelimitkit/ratelimit/algorithms"
	"github.com/ratelimitkit/ratelimit/clock"
	"github.com/ratelimitkit/ratelimit/internal/testserver"
	"github.com/ratelimitkit/ratelimit/store"
	"github.com/ratelimitkit/ratelimit/store/dynamo"
)

// TestOtherProcessResetSeenWithinBound checks that a process whose cache
// holds a denied key sees another process's Reset, and Cancel, within the
// store's staleness bound (DefaultMaxStaleness): by the limiter's clock
// (the fake clock moved by the bound) and by the real clock (the fake clock
// frozen, the bound passed in real time). Before the bound, a denial from
// the cache stood until the state's TTL (an hour here): another process's
// Reset went unseen, a silent under-admission.
func TestOtherProcessResetSeenWithinBound(t *testing.T) {
	const bound = dynamo.DefaultMaxStaleness
	alg := algorithms.FixedWindow(2, time.Hour)
	for _, c := range []struct {
		name  string
		give  func(t *testing.T, a *ratelimit.Limiter, r *ratelimit.Reservation) // A gives the units back
		pass  func(fc *clock.Fake)                                               // the bound passes
		clock string
	}{
		{"reset/limiter-clock", reset, func(fc *clock.Fake) { fc.Advance(bound) }, "limiter"},
		{"reset/real-clock", reset, func(*clock.Fake) { time.Sleep(bound) }, "real"},
		{"cancel/limiter-clock", cancel, func(fc *clock.Fake) { fc.Advance(bound) }, "limiter"},
	} {
		t.Run(c.name, func(t *testing.T) {
			ctx := context.Background()
			_, _, limA, fc, _, table := setup(t, alg)
			sB, err := dynamo.New(newClient(testserver.DynamoDBEndpoint(t)), dynamo.WithTable(table))
			if err != nil {
				t.Fatal(err)
			}
			limB, err := ratelimit.New(sB, alg, ratelimit.WithClock(fc), ratelimit.WithName("test"))
			if err != nil {
				t.Fatal(err)
			}
			// A reserves the whole limit; B denies, and caches the full
			// window.
			r, err := limA.Reserve(ctx, "k", 2, 0)
			if err != nil || !r.OK() {
				t.Fatalf("A: Reserve(k, 2) = %v, %v; want ok", r, err)
			}
			if d, err := limB.Allow(ctx, "k"); err != nil || d.Allowed {
				t.Fatalf("B: Allow(k) on a full window = %+v, %v; want denied", d, err)
			}
			c.give(t, limA, r)
			c.pass(fc)
			d, err := limB.Allow(ctx, "k")
			if err != nil || !d.Allowed {
				t.Fatalf("B: Allow(k) %v (%s clock) after A's %s = %+v, %v; want allowed: another process's change must be seen within the store's staleness bound",
					bound, c.clock, c.name, d, err)
			}
		})
	}
}

func reset(t *testing.T, a *ratelimit.Limiter, _ *ratelimit.Reservation) {
	if err := a.Reset(context.Background(), "k"); err != nil {
		t.Fatalf("A: Reset(k): %v", err)
	}
}

func cancel(t *testing.T, _ *ratelimit.Limiter, r *ratelimit.Reservation) {
	if err := r.Cancel(context.Background()); err != nil {
		t.Fatalf("A: Cancel: %v", err)
	}
}

// TestHotDeniedKeyReads measures what the staleness bound costs: a process
// denying one hot key as fast as it can, on the real clock, makes at most
// one consistent read per bound (and, since admissions write, no write),
// not one per decision. It logs the reads per second for docs/stores/dynamo.md.
func TestHotDeniedKeyReads(t *testing.T) {
	if testing.Short() {
		t.Skip("runs for a second")
	}
	client := newClient(testserver.DynamoDBEndpoint(t))
	table := newTable(t, client)
	c := &counter{Client: client}
	s, err := dynamo.New(c, dynamo.WithTable(table))
	if err != nil {
		t.Fatal(err)
	}
	key := store.Key{Namespace: "test", ID: "hot"}
	full := func(state []byte, now int64) ([]byte, int64, error) {
		if state == nil {
			return []byte{1}, int64(time.Hour / time.Microsecond), nil
		}
		return nil, 0, nil // denied: writes nothing
	}
	ctx := context.Background()
	now := func() int64 { return time.Now().UnixMicro() }
	if err := s.Update(ctx, key, now(), full); err != nil {
		t.Fatal(err)
	}
	c.reset()
	const run = time.Second
	decisions := 0
	start := time.Now()
	for time.Since(start) < run {
		if err := s.Update(ctx, key, now(), full); err != nil {
			t.Fatal(err)
		}
		decisions++
	}
	elapsed := time.Since(start)
	reads := c.gets.Load()
	perSec := float64(reads) / elapsed.Seconds()
	t.Logf("%d denials of one hot key in %v: %d reads (%.1f/s), %d writes; bound %v", decisions, elapsed.Round(time.Millisecond), reads, perSec, c.puts.Load(), dynamo.DefaultMaxStaleness)
	if c.puts.Load() != 0 {
		t.Errorf("denials wrote %d times, want 0", c.puts.Load())
	}
	if most := int64(elapsed/dynamo.DefaultMaxStaleness) + 1; reads > most {
		t.Errorf("%d denials in %v made %d reads, want at most %d (one per %v)", decisions, elapsed, reads, most, dynamo.DefaultMaxStaleness)
	}
	if reads == 0 {
		t.Errorf("%d denials in %v made no read: the cache stood past its staleness bound %v", decisions, elapsed, dynamo.DefaultMaxStaleness)
	}
}

// TestMaxStalenessOption checks WithMaxStaleness's bounds and that zero
// confirms every decision that writes nothing by a read.
func TestMaxStalenessOption(t *testing.T) {
	client := newClient(testserver.DynamoDBEndpoint(t))
	if _, err := dynamo.New(client, dynamo.WithMaxStaleness(-time.Millisecond)); !errors.Is(err, ratelimit.ErrInvalidParams) {
		t.Errorf("dynamo.New(WithMaxStaleness(-1ms)) = %v, want an error wrapping ErrInvalidParams", err)
	}
	_, c, lim, _, _, _ := setup(t, algorithms.FixedWindow(1, time.Hour), dynamo.WithMaxStaleness(0))
	ctx := context.Background()
	if d, err := lim.Allow(ctx, "k"); err != nil || !d.Allowed {
		t.Fatalf("lim.Allow(k) = %+v, %v; want allowed", d, err)
	}
	c.reset()
	const n = 5
	for range n {
		if d, err := lim.Allow(ctx, "k"); err != nil || d.Allowed {
			t.Fatalf("lim.Allow(k) on a full window = %+v, %v; want denied", d, err)
		}
	}
	if got := c.gets.Load(); got != n || c.total() != n {
		t.Errorf("%d denials with WithMaxStaleness(0) made %d requests (%d reads), want %d reads", n, c.total(), got, n)
	}
}

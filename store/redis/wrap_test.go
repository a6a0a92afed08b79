package redis_test

import (
	"context"
	"testing"
	"time"

	"github.com/ratelimitkit/ratelimit"
	"github.com/ratelimitkit/ratelimit/algorithms"
	"github.com/ratelimitkit/ratelimit/clock"
	"github.com/ratelimitkit/ratelimit/statefile"
	"github.com/ratelimitkit/ratelimit/store"
	"github.com/ratelimitkit/ratelimit/store/memory"
	"github.com/ratelimitkit/ratelimit/store/redis"
)

// deciderOnly wraps a store forwarding Decider but not Importer: the
// wrapper docs/writing-a-store.md warned about before it listed Importer.
type deciderOnly struct {
	store.Store
	store.Decider
}

// forwarding wraps a store as docs/writing-a-store.md's countingStore
// does: Decide, and Import through ratelimit.Import on the inner store.
type forwarding struct {
	inner *redis.Store
}

func (f forwarding) Update(ctx context.Context, key store.Key, now int64, fn store.UpdateFunc) error {
	return f.inner.Update(ctx, key, now, fn)
}

func (f forwarding) Delete(ctx context.Context, key store.Key) error {
	return f.inner.Delete(ctx, key)
}

func (f forwarding) Decide(ctx context.Context, key store.Key, alg algorithms.Algorithm, req algorithms.Request) (algorithms.Decision, error) {
	return f.inner.Decide(ctx, key, alg, req)
}

func (f forwarding) Import(ctx context.Context, alg algorithms.Algorithm, e store.Entry, now int64) (bool, error) {
	return f.inner.Import(ctx, alg, e, now)
}

// TestWrapperImport moves a key exhausted on the memory store into a
// wrapped Redis store, then asks for one more request there: through a
// wrapper that forwards Import the key stays exhausted; through one that
// forwards only Decide, the state lands where Update keeps it, Decide
// never reads it, and the exhausted key is admitted (why the wrapper
// section of docs/writing-a-store.md lists Importer).
func TestWrapperImport(t *testing.T) {
	ctx := context.Background()
	alg := algorithms.FixedWindow(3, time.Hour)
	fake := clock.NewFake(time.Date(2040, 1, 1, 0, 0, 0, 0, time.UTC))
	src, err := memory.New()
	if err != nil {
		t.Fatal(err)
	}
	srcLim, err := ratelimit.New(src, alg, ratelimit.WithClock(fake), ratelimit.WithName("wrap"))
	if err != nil {
		t.Fatal(err)
	}
	for range 3 {
		if d, err := srcLim.Allow(ctx, "k"); err != nil || !d.Allowed {
			t.Fatalf("source: Allow = %+v, %v; want admitted", d, err)
		}
	}
	var entries []store.Entry
	if err := statefile.Export(ctx, src, srcLim.Namespace(), fake.Now(), func(e store.Entry) error {
		entries = append(entries, e)
		return nil
	}); err != nil || len(entries) != 1 {
		t.Fatalf("export from the memory store: %d entries, %v; want 1", len(entries), err)
	}
	c := standalone(t)
	for _, w := range []struct {
		name      string
		wrap      func(*redis.Store) store.Store
		wantAllow bool
	}{
		{"forwards Import", func(s *redis.Store) store.Store { return forwarding{s} }, false},
		{"forwards Decide only", func(s *redis.Store) store.Store { return deciderOnly{s, s} }, true},
	} {
		t.Run(w.name, func(t *testing.T) {
			dst := w.wrap(mustNew(t, c, redis.WithPrefix(uniquePrefix()), redis.WithServerClock(false)))
			if wrote, err := statefile.Import(ctx, dst, entries[0], fake.Now()); err != nil || !wrote {
				t.Fatalf("statefile.Import = %v, %v; want written", wrote, err)
			}
			lim, err := ratelimit.New(dst, alg, ratelimit.WithClock(fake), ratelimit.WithName("wrap"))
			if err != nil {
				t.Fatal(err)
			}
			d, err := lim.Allow(ctx, "k")
			if err != nil {
				t.Fatal(err)
			}
			if d.Allowed != w.wantAllow {
				t.Errorf("lim.Allow(%q) after importing a key exhausted (3 of 3) = %s, want %s", "k", verdict(d.Allowed), verdict(w.wantAllow))
			}
		})
	}
}

func verdict(allowed bool) string {
	return map[bool]string{true: "allowed", false: "denied"}[allowed]
}

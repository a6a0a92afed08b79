package conformance

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ratelimitkit/ratelimit"
	"github.com/ratelimitkit/ratelimit/algorithms"
	"github.com/ratelimitkit/ratelimit/clock"
	"github.com/ratelimitkit/ratelimit/lease"
	"github.com/ratelimitkit/ratelimit/lease/leasewire"
	"github.com/ratelimitkit/ratelimit/store"
)

// The lease groups: the package lease on the store, through the store's
// leasewire.Runner ("server", left out when it has none: see Run) and through
// its Update ("update"). Run runs them with the limiter groups.

func init() {
	cases = append(cases,
		testCase{"LeaseExclusion", testLeaseExclusion},
		testCase{"LeaseTakeover", testLeaseTakeover},
		testCase{"LeaseFences", testLeaseFences},
		testCase{"LeaseOwner", testLeaseOwner},
		testCase{"LeaseLostReply", testLeaseLostReply},
		testCase{"LeaseContext", testLeaseContext},
		testCase{"LeaseExpiry", testLeaseExpiry},
		testCase{"LeaseKeys", testLeaseKeys},
		testCase{"LeaseDo", testLeaseDo},
		testCase{"LeaseDifferential", testLeaseDifferential},
	)
}

// leaseTTL is the TTL of the fake-clock subtests' leases.
const leaseTTL = 10 * time.Second

// leasePath is one way a locker reaches a store: its leasewire.Runner
// ("server") or its Update ("update").
type leasePath struct {
	name string
	wrap func(t *testing.T, s store.Store) store.Store
}

var leasePaths = []leasePath{
	{"server", requireRunner},
	{"update", func(t *testing.T, s store.Store) store.Store { return updateOnly{s} }},
}

func requireRunner(t *testing.T, s store.Store) store.Store {
	t.Helper()
	if _, ok := s.(leasewire.Runner); !ok {
		t.Skip("store does not implement lease.Runner")
	}
	return s
}

// forEachLeasePath runs fn on a fresh harness for each path.
func forEachLeasePath(t *testing.T, newHarness func(*testing.T) Harness, fn func(t *testing.T, h Harness, wrap func(store.Store) store.Store)) {
	for _, p := range leasePaths {
		if p.name == "server" && !storeHas(t).runner {
			continue
		}
		t.Run(p.name, func(t *testing.T) {
			h := newHarness(t)
			p.wrap(t, h.Store)
			fn(t, h, func(s store.Store) store.Store { return p.wrap(t, s) })
		})
	}
}

// leaseFixture is a locker on a fake clock.
type leaseFixture struct {
	t     *testing.T
	lk    *lease.Locker
	clock *clock.Fake
}

func newLeaseFixture(t *testing.T, s store.Store, opts ...lease.Option) *leaseFixture {
	t.Helper()
	c := clock.NewFake(epoch)
	return &leaseFixture{t: t, lk: newLocker(t, s, append([]lease.Option{lease.WithClock(c)}, opts...)...), clock: c}
}

func newLocker(t *testing.T, s store.Store, opts ...lease.Option) *lease.Locker {
	t.Helper()
	lk, err := lease.New(s, leaseTTL, opts...)
	if err != nil {
		t.Fatalf("lease.New: %v", err)
	}
	return lk
}

// sibling returns another locker on the same store and fake clock.
func (f *leaseFixture) sibling(s store.Store, opts ...lease.Option) *lease.Locker {
	return newLocker(f.t, s, append([]lease.Option{lease.WithClock(f.clock)}, opts...)...)
}

func (f *leaseFixture) at() string { return "t+" + f.clock.Now().Sub(epoch).String() }

// acquire calls TryAcquire on lk and fails the test unless it succeeds.
func (f *leaseFixture) acquire(lk *lease.Locker, key string) *lease.Lease {
	f.t.Helper()
	le, err := lk.TryAcquire(context.Background(), key)
	if err != nil {
		f.t.Fatalf("locker.TryAcquire(%q) at %s: %v", key, f.at(), err)
	}
	return le
}

// held calls TryAcquire on lk and fails the test unless it reports ErrHeld.
func (f *leaseFixture) held(lk *lease.Locker, key string, why string) *lease.HeldError {
	f.t.Helper()
	le, err := lk.TryAcquire(context.Background(), key)
	var held *lease.HeldError
	if !errors.As(err, &held) || !errors.Is(err, lease.ErrHeld) {
		fence := int64(0)
		if le != nil {
			fence = le.Fence()
		}
		f.t.Fatalf("locker.TryAcquire(%q) at %s = fence %d, error %v; want ErrHeld (rule: %s)", key, f.at(), fence, err, why)
	}
	return held
}

// fences records fences in order and fails the test on one that is not
// greater than every one before.
type fences struct {
	t    *testing.T
	last int64
}

func (fs *fences) add(le *lease.Lease, when string) {
	fs.t.Helper()
	if le.Fence() <= fs.last {
		fs.t.Errorf("%s: fence %d, not greater than the previous fence %d (rule: fences strictly increase per key)", when, le.Fence(), fs.last)
	}
	fs.last = max(fs.last, le.Fence())
}

// testLeaseExclusion checks that no two holders ever overlap, with many
// goroutines on one locker and with lockers on two store instances, on the
// real clock, and that fences rise in the order the lease passes.
func testLeaseExclusion(t *testing.T, newHarness func(*testing.T) Harness) {
	for _, variant := range []string{"goroutines", "two-instances"} {
		t.Run(variant, func(t *testing.T) {
			forEachLeasePath(t, newHarness, func(t *testing.T, h Harness, wrap func(store.Store) store.Store) {
				stores := []store.Store{wrap(h.Store)}
				if variant == "two-instances" {
					if h.Twin == nil {
						t.Skip("harness has no Twin: cannot make a second instance of the store on the same backend")
					}
					stores = append(stores, wrap(h.Twin(t)))
				}
				const workers, each = 8, 3
				var inside, overlaps, inversions atomic.Int64
				var lastFence atomic.Int64
				var wg sync.WaitGroup
				errs := make(chan error, workers*each)
				for w := 0; w < workers; w++ {
					lk := newLocker(t, stores[w%len(stores)], lease.WithPollInterval(2*time.Millisecond))
					wg.Add(1)
					go func() {
						defer wg.Done()
						ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
						defer cancel()
						for i := 0; i < each; i++ {
							le, err := lk.Acquire(ctx, "exclusion")
							if err != nil {
								errs <- fmt.Errorf("locker.Acquire(key): %w", err)
								return
							}
							if inside.Add(1) != 1 {
								overlaps.Add(1)
							}
							if prev := lastFence.Swap(le.Fence()); prev >= le.Fence() {
								inversions.Add(1)
							}
							time.Sleep(200 * time.Microsecond)
							inside.Add(-1)
							if err := le.Release(ctx); err != nil {
								errs <- fmt.Errorf("lease.Release(): %w", err)
								return
							}
						}
					}()
				}
				wg.Wait()
				close(errs)
				for err := range errs {
					t.Error(err)
				}
				if n := overlaps.Load(); n != 0 {
					t.Errorf("%d goroutines on %d store instance(s): %d times a lease was acquired while another holder was inside (rule: a lease excludes every other holder)", workers, len(stores), n)
				}
				if n := inversions.Load(); n != 0 {
					t.Errorf("%d goroutines on %d store instance(s): %d fences not greater than the previous holder's (rule: fences strictly increase per key)", workers, len(stores), n)
				}
			})
		})
	}
}

// testLeaseTakeover checks that an expired lease can be taken over, on the
// fake clock, and that its old holder then can neither extend nor release.
func testLeaseTakeover(t *testing.T, newHarness func(*testing.T) Harness) {
	forEachLeasePath(t, newHarness, func(t *testing.T, h Harness, wrap func(store.Store) store.Store) {
		s := wrap(h.Store)
		f := newLeaseFixture(t, s)
		other := f.sibling(s)
		a := f.acquire(f.lk, "takeover")
		held := f.held(other, "takeover", "a live lease excludes others")
		if want := epoch.Add(leaseTTL); !held.Until.Equal(want) || held.RetryAfter != leaseTTL {
			t.Errorf("HeldError = until %v in %v, want until %v in %v", held.Until, held.RetryAfter, want, leaseTTL)
		}
		f.clock.Advance(leaseTTL - time.Microsecond)
		f.held(other, "takeover", "a lease lasts its whole TTL")
		f.clock.Advance(time.Microsecond)
		b := f.acquire(other, "takeover")
		if b.Fence() <= a.Fence() {
			t.Errorf("fence after takeover = %d, want more than the expired lease's %d", b.Fence(), a.Fence())
		}
		if err := a.Extend(context.Background()); !errors.Is(err, lease.ErrLost) {
			t.Errorf("expired lease.Extend() after takeover = %v, want ErrLost (rule: a stale holder cannot extend the new holder's lease)", err)
		}
		if err := a.Release(context.Background()); !errors.Is(err, lease.ErrLost) {
			t.Errorf("expired lease.Release() after takeover = %v, want ErrLost", err)
		}
		f.held(f.lk, "takeover", "a stale holder's Release leaves the new holder's lease alone")
		if err := b.Release(context.Background()); err != nil {
			t.Errorf("new holder's lease.Release() = %v", err)
		}
		f.acquire(f.lk, "takeover")
	})
}

// testLeaseFences checks that fences strictly increase in every case: after
// a release, an expiry, the reclaiming of the record, the loss of the
// record (a restart of a server without persistence), a burst of acquires
// at one instant, and a clock that steps back.
func testLeaseFences(t *testing.T, newHarness func(*testing.T) Harness) {
	forEachLeasePath(t, newHarness, func(t *testing.T, h Harness, wrap func(store.Store) store.Store) {
		s := wrap(h.Store)
		f := newLeaseFixture(t, s)
		fs := &fences{t: t}
		ctx := context.Background()
		const key = "fences"

		le := f.acquire(f.lk, key)
		fs.add(le, "first acquire")
		if err := le.Release(ctx); err != nil {
			t.Fatalf("lease.Release(): %v", err)
		}
		le = f.acquire(f.lk, key)
		fs.add(le, "acquire after a release at the same instant")

		f.clock.Advance(leaseTTL)
		le = f.acquire(f.lk, key)
		fs.add(le, "acquire after the lease expired")

		f.clock.Advance(100 * leaseTTL)
		le = f.acquire(f.lk, key)
		fs.add(le, "acquire after the record outlived its TTL")

		for i := 0; i < 20; i++ {
			if err := le.Release(ctx); err != nil {
				t.Fatalf("burst %d: lease.Release(): %v", i, err)
			}
			le = f.acquire(f.lk, key)
			fs.add(le, fmt.Sprintf("burst of acquires at one instant, #%d", i))
		}
		if err := le.Release(ctx); err != nil {
			t.Fatalf("lease.Release(): %v", err)
		}
		f.clock.Advance(5 * time.Microsecond)
		le = f.acquire(f.lk, key)
		fs.add(le, "acquire 5µs after a burst that ran the fences ahead of the clock")
		if err := le.Release(ctx); err != nil {
			t.Fatalf("lease.Release(): %v", err)
		}
		f.clock.Advance(2 * leaseTTL)
		le = f.acquire(f.lk, key)
		fs.add(le, "acquire after the released record of a burst outlived its TTL")

		// A restart of a server without persistence loses the record; a
		// restart takes longer than a microsecond.
		lost := le
		if err := h.Store.Delete(ctx, store.Key{Namespace: f.lk.Namespace(), ID: key}); err != nil {
			t.Fatalf("store.Delete(lease record): %v", err)
		}
		f.clock.Advance(time.Millisecond)
		if err := lost.Extend(ctx); !errors.Is(err, lease.ErrLost) {
			t.Errorf("lease.Extend() after its record was lost = %v, want ErrLost", err)
		}
		le = f.acquire(f.lk, key)
		fs.add(le, "acquire after the record was lost")

		// A clock that steps back while the record is kept.
		if err := le.Release(ctx); err != nil {
			t.Fatalf("lease.Release(): %v", err)
		}
		f.clock.Advance(-time.Hour)
		le = f.acquire(f.lk, key)
		fs.add(le, "acquire after the clock stepped back an hour")
	})
}

// testLeaseOwner checks the owner checks: only the holder extends and
// releases, Release is idempotent, and a released lease cannot be extended.
func testLeaseOwner(t *testing.T, newHarness func(*testing.T) Harness) {
	forEachLeasePath(t, newHarness, func(t *testing.T, h Harness, wrap func(store.Store) store.Store) {
		s := wrap(h.Store)
		f := newLeaseFixture(t, s)
		ctx := context.Background()
		a := f.acquire(f.lk, "owner")
		if a.Owner() == (leasewire.Token{}).String() {
			t.Errorf("lease.Owner() is the zero token")
		}
		f.clock.Advance(leaseTTL / 2)
		if err := a.Extend(ctx); err != nil {
			t.Fatalf("lease.Extend() by the holder: %v", err)
		}
		if want := f.clock.Now().Add(leaseTTL); !a.Expires().Equal(want) {
			t.Errorf("lease.Expires() after Extend at %s = %v, want %v", f.at(), a.Expires(), want)
		}
		f.clock.Advance(leaseTTL - time.Microsecond)
		f.held(f.lk, "owner", "Extend moves the expiry to now + TTL")
		if err := a.Release(ctx); err != nil {
			t.Fatalf("lease.Release() by the holder: %v", err)
		}
		if err := a.Release(ctx); err != nil {
			t.Errorf("second lease.Release() = %v, want nil (Release is idempotent)", err)
		}
		if err := a.Extend(ctx); !errors.Is(err, lease.ErrLost) {
			t.Errorf("lease.Extend() after Release = %v, want ErrLost", err)
		}
		b := f.acquire(f.lk, "owner")
		if b.Owner() == a.Owner() {
			t.Errorf("two leases share the owner token %v", a.Owner())
		}
		if err := a.Release(ctx); err != nil {
			t.Errorf("lease.Release() of a released lease while another holds the key = %v, want nil", err)
		}
		f.held(f.lk, "owner", "a released lease's Release leaves the new holder alone")
	})
}

// errReplyLost is what replyLoser returns after applying an update: the
// reply of a request that succeeded never reached the caller.
var errReplyLost = errors.New("conformance: the reply was lost (the update was applied)")

// replyLoser applies the next n calls and then reports errReplyLost.
type replyLoser struct {
	store.Store
	n atomic.Int64
}

func (s *replyLoser) lose(err error) error {
	if err == nil && s.n.Add(-1) >= 0 {
		return errReplyLost
	}
	return err
}

func (s *replyLoser) Update(ctx context.Context, key store.Key, now int64, fn store.UpdateFunc) error {
	return s.lose(s.Store.Update(ctx, key, now, fn))
}

// runnerLoser is a replyLoser over a store's leasewire.Runner.
type runnerLoser struct {
	*replyLoser
	r leasewire.Runner
}

func (s runnerLoser) RunLease(ctx context.Context, key store.Key, now int64, req leasewire.Request) (leasewire.Result, error) {
	res, err := s.r.RunLease(ctx, key, now, req)
	return res, s.lose(err)
}

// testLeaseLostReply checks that acquire, extend and release are safe to
// retry when a reply is lost after the store applied the request.
func testLeaseLostReply(t *testing.T, newHarness func(*testing.T) Harness) {
	forEachLeasePath(t, newHarness, func(t *testing.T, h Harness, wrap func(store.Store) store.Store) {
		inner := wrap(h.Store)
		loser := &replyLoser{Store: inner}
		var s store.Store = loser
		if r, ok := inner.(leasewire.Runner); ok {
			s = runnerLoser{loser, r}
		}
		f := newLeaseFixture(t, s)
		plain := f.sibling(inner)
		ctx := context.Background()

		loser.n.Store(1)
		a, err := f.lk.TryAcquire(ctx, "lost-reply")
		if err != nil {
			t.Fatalf("locker.TryAcquire(key) whose first reply is lost = %v, want the lease it took", err)
		}
		f.held(plain, "lost-reply", "the lease taken by the attempt whose reply was lost is the caller's")
		f.clock.Advance(leaseTTL / 2)
		loser.n.Store(1)
		if err := a.Extend(ctx); err != nil {
			t.Errorf("lease.Extend() whose first reply is lost = %v, want nil (rule: a retried Extend must not fail)", err)
		}
		if want := f.clock.Now().Add(leaseTTL); !a.Expires().Equal(want) {
			t.Errorf("lease.Expires() after a retried Extend = %v, want %v", a.Expires(), want)
		}
		loser.n.Store(1)
		if err := a.Release(ctx); err != nil {
			t.Errorf("lease.Release() whose first reply is lost = %v, want nil", err)
		}
		f.acquire(plain, "lost-reply")

		loser.n.Store(2)
		if _, err := f.lk.TryAcquire(ctx, "lost-twice"); !errors.Is(err, errReplyLost) {
			t.Errorf("locker.TryAcquire(key) whose replies are all lost = %v, want the store's error", err)
		}
	})
}

// testLeaseContext checks that a context that ends is the context's error,
// while waiting and before asking.
func testLeaseContext(t *testing.T, newHarness func(*testing.T) Harness) {
	forEachLeasePath(t, newHarness, func(t *testing.T, h Harness, wrap func(store.Store) store.Store) {
		s := wrap(h.Store)
		f := newLeaseFixture(t, s)
		f.acquire(f.lk, "ctx")
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan error, 1)
		go func() {
			_, err := f.lk.Acquire(ctx, "ctx")
			done <- err
		}()
		deadline := time.Now().Add(30 * time.Second)
		for f.clock.Waiters() == 0 && time.Now().Before(deadline) {
			time.Sleep(time.Millisecond)
		}
		cancel()
		select {
		case err := <-done:
			if !errors.Is(err, context.Canceled) || errors.Is(err, lease.ErrHeld) {
				t.Errorf("locker.Acquire(held key) when its context is canceled while waiting = %v, want context.Canceled", err)
			}
		case <-time.After(30 * time.Second):
			t.Fatal("locker.Acquire(held key) did not return within 30s of its context's cancellation")
		}
		canceled, cancel2 := context.WithCancel(context.Background())
		cancel2()
		if le, err := f.lk.TryAcquire(canceled, "ctx-free"); !errors.Is(err, context.Canceled) {
			t.Errorf("locker.TryAcquire(free key) with a canceled context = lease %v, error %v; want context.Canceled", le != nil, err)
		}
		f.acquire(f.lk, "ctx-free") // the canceled call took nothing

		// The store itself, below the locker: the locker stops waiting for
		// a store whose context has ended either way, but a store that
		// goes on with the request holds a connection and may take the key.
		k := store.Key{Namespace: f.lk.Namespace(), ID: "ctx-store"}
		req := leasewire.Request{Op: leasewire.OpAcquire, Owner: leasewire.Token{1}, TTL: int64(time.Hour / time.Microsecond)}
		now := f.clock.Now().UnixMicro()
		var err error
		if r, ok := s.(leasewire.Runner); ok {
			_, err = r.RunLease(canceled, k, now, req)
		} else {
			err = s.Update(canceled, k, now, func(cur []byte, now int64) ([]byte, int64, error) {
				next, ttl, _, err := leasewire.Step(cur, now, req)
				return next, ttl, err
			})
		}
		if !errors.Is(err, context.Canceled) {
			t.Errorf("the store's lease call with a canceled context = %v, want context.Canceled", err)
		}
		f.acquire(f.lk, "ctx-store") // the canceled call took nothing
	})
}

// testLeaseExpiry checks that every key a locker writes carries an expiry
// no longer than its lease needs.
func testLeaseExpiry(t *testing.T, newHarness func(*testing.T) Harness) {
	forEachLeasePath(t, newHarness, func(t *testing.T, h Harness, wrap func(store.Store) store.Store) {
		if h.Expiries == nil {
			t.Skip("harness has no Expiries: cannot list the backend's keys")
		}
		s := wrap(h.Store)
		f := newLeaseFixture(t, s)
		ctx := context.Background()
		for i := 0; i < 6; i++ {
			le := f.acquire(f.lk, fmt.Sprintf("expiry-%d", i))
			switch i % 3 {
			case 1:
				if err := le.Extend(ctx); err != nil {
					t.Fatalf("lease.Extend(): %v", err)
				}
			case 2:
				if err := le.Release(ctx); err != nil {
					t.Fatalf("lease.Release(): %v", err)
				}
			}
		}
		list, err := h.Expiries(ctx)
		if err != nil {
			t.Fatalf("Expiries: %v", err)
		}
		if len(list) == 0 {
			t.Fatal("Expiries lists no keys after 6 leases were acquired")
		}
		now := f.clock.Now()
		// A second of allowance; a backend on the real clock may also
		// keep a key up to its TTL again (see Harness.RealTimeExpiry).
		most := leaseTTL + time.Second
		if h.RealTimeExpiry {
			now = time.Now()
			most += leaseTTL
		}
		for _, e := range list {
			switch {
			case e.Never:
				t.Errorf("backend key %q of a lease has no expiry (rule: every key written carries one)", e.Key)
			case e.At.Sub(now) > most:
				t.Errorf("backend key %q of a lease expires in %v, more than the lease needs (%v, at most %v with allowances)", e.Key, e.At.Sub(now), leaseTTL, most)
			}
		}
	})
}

// testLeaseKeys checks that a locker's keys never meet a limiter's or
// another locker's, and that odd keys work.
func testLeaseKeys(t *testing.T, newHarness func(*testing.T) Harness) {
	forEachLeasePath(t, newHarness, func(t *testing.T, h Harness, wrap func(store.Store) store.Store) {
		s := wrap(h.Store)
		f := newLeaseFixture(t, s, lease.WithName("shared"))
		ctx := context.Background()
		lim, err := ratelimit.New(s, algorithms.FixedWindow(2, time.Hour), ratelimit.WithName("shared"), ratelimit.WithClock(f.clock))
		if err != nil {
			t.Fatalf("ratelimit.New: %v", err)
		}
		allow := func(want bool) {
			t.Helper()
			d, err := lim.Allow(ctx, "id")
			if err != nil || d.Allowed != want {
				t.Errorf("lim.Allow(%q) beside a lease on the same name and key = %s, %v; want %s (rule: leases and limiters never share state)", "id", verdict(d.Allowed), err, verdict(want))
			}
		}
		allow(true)
		le := f.acquire(f.lk, "id")
		allow(true)
		allow(false)
		if err := le.Extend(ctx); err != nil {
			t.Errorf("lease.Extend() beside a limiter on the same name and key = %v", err)
		}
		if err := lim.Reset(ctx, "id"); err != nil {
			t.Fatalf("lim.Reset: %v", err)
		}
		f.held(f.lk, "id", "a limiter's Reset leaves a lease alone")

		other := f.sibling(s, lease.WithName("other"))
		f.acquire(other, "id")

		same := f.sibling(s, lease.WithName("shared"))
		for _, k := range []string{"{session}", "a}b{c", "with space", "ünïcödé-キー", "\x00\xff binary", "a:b", ":", strings.Repeat("k", store.MaxKeyLen)} {
			f.acquire(f.lk, k)
			f.held(same, k, "odd keys are keys like any other")
		}
		for _, k := range []string{"", strings.Repeat("k", store.MaxKeyLen+1)} {
			if _, err := f.lk.TryAcquire(ctx, k); !errors.Is(err, ratelimit.ErrInvalidKey) {
				t.Errorf("locker.TryAcquire(key of %d bytes) = %v, want ErrInvalidKey", len(k), err)
			}
		}
	})
}

// testLeaseDo checks the lease context: Do renews while the work runs, on
// the fake clock, for several TTLs; releases when the work returns; and
// cancels the work when renewal finds the lease taken over.
func testLeaseDo(t *testing.T, newHarness func(*testing.T) Harness) {
	forEachLeasePath(t, newHarness, func(t *testing.T, h Harness, wrap func(store.Store) store.Store) {
		s := wrap(h.Store)
		f := newLeaseFixture(t, s)
		other := f.sibling(s)
		ctx := context.Background()
		t.Run("renews", func(t *testing.T) {
			started := make(chan *lease.Lease, 1)
			finish := make(chan struct{})
			done := make(chan error, 1)
			go func() {
				done <- f.lk.Do(ctx, "do", func(ctx context.Context, le *lease.Lease) error {
					started <- le
					select {
					case <-finish:
						return nil
					case <-ctx.Done():
						return context.Cause(ctx)
					}
				})
			}()
			le := <-started
			renewals := 0
			for step := 0; step < 90; step++ { // three TTLs
				d := le.Deadline()
				f.clock.Advance(leaseTTL / 30)
				if !f.clock.Now().Before(d.Add(-2 * leaseTTL / 3)) {
					// A renewal is due; give it a moment (it may also
					// come at a later step), and all the time it needs
					// when the clock nears the point where Do would
					// cancel the work (this machine may be loaded).
					wait := 50 * time.Millisecond
					if !f.clock.Now().Add(leaseTTL / 15).Before(d.Add(-leaseTTL / 10)) {
						wait = 30 * time.Second
					}
					for end := time.Now().Add(wait); !le.Deadline().After(d) && time.Now().Before(end); {
						time.Sleep(200 * time.Microsecond)
					}
				}
				if le.Deadline().After(d) {
					renewals++
				}
				if !f.clock.Now().Before(le.Deadline()) {
					t.Fatalf("at %s the lease's deadline %v has passed while Do's work runs", f.at(), le.Deadline())
				}
				f.held(other, "do", "Do keeps renewing while the work runs")
			}
			if renewals < 6 {
				t.Errorf("Do renewed %d times in three TTLs, want about 9", renewals)
			}
			close(finish)
			if err := <-done; err != nil {
				t.Fatalf("locker.Do() = %v, want nil", err)
			}
			f.acquire(other, "do") // released
		})

		t.Run("lost", func(t *testing.T) {
			started := make(chan *lease.Lease, 1)
			done := make(chan error, 1)
			var canceledAt time.Time
			go func() {
				done <- f.lk.Do(ctx, "do-lost", func(ctx context.Context, le *lease.Lease) error {
					started <- le
					<-ctx.Done()
					canceledAt = f.clock.Now()
					return nil
				})
			}()
			le := <-started
			if err := h.Store.Delete(ctx, store.Key{Namespace: f.lk.Namespace(), ID: "do-lost"}); err != nil {
				t.Fatalf("store.Delete(lease record): %v", err)
			}
			f.clock.Advance(time.Millisecond)
			f.acquire(other, "do-lost")
			// Move the clock in tenths of the TTL while far from the
			// lease's deadline, then in small steps, giving the renewal
			// real time to act (this machine may be loaded).
			for i := 0; i < 400 && f.clock.Now().Before(le.Deadline()); i++ {
				select {
				case err := <-done:
					if !errors.Is(err, lease.ErrLost) {
						t.Errorf("locker.Do() whose lease was taken over = %v, want ErrLost", err)
					}
					if !canceledAt.Before(le.Deadline()) {
						t.Errorf("Do canceled its work at %v, not before the lease's deadline %v", canceledAt, le.Deadline())
					}
					f.held(f.lk, "do-lost", "Do's Release leaves the new holder alone")
					return
				case <-time.After(50 * time.Millisecond):
				}
				step := leaseTTL / 10
				if f.clock.Now().Add(3 * step).After(le.Deadline()) {
					step = leaseTTL / 400
				}
				f.clock.Advance(step)
			}
			t.Fatal("locker.Do() still runs its work a TTL after its lease was taken over")
		})
	})
}

// testLeaseDifferential holds a store's leasewire.Runner to leasewire.Step: seeded
// random sequences of acquires, extends, releases and reads by three owners,
// with clock steps forward and back, each sent through the Runner or
// through Update at random (one record, two paths), must give the Go form's
// results on a local copy of the record, field by field.
func testLeaseDifferential(t *testing.T, newHarness func(*testing.T) Harness) {
	h := newHarness(t)
	runner, ok := h.Store.(leasewire.Runner)
	if !ok {
		t.Skip("store does not implement lease.Runner")
	}
	owners := []leasewire.Token{{1}, {2}, {0xff, 0xfe, 3}}
	ttls := []int64{1, 999, 1000, 1001, 250_000, 10_000_000}
	steps := []int64{0, 0, 1, 2, 999, 1000, 1001, 100_000, 250_000, 10_000_000, -1, -5000}
	ctx := context.Background()
	for seed := uint64(1); seed <= 4; seed++ {
		rng := rand.New(rand.NewPCG(seed, 0x1ea5e))
		key := store.Key{Namespace: "differential" + leasewire.NamespaceSuffix, ID: fmt.Sprintf("seed-%d", seed)}
		now := epoch.UnixMicro()
		var state []byte
		var kept, dropped int64
		var written time.Time // real time of the model's last write
		var keepUs int64      // and how long it was to be kept
		fencesOf := map[leasewire.Token]int64{}
		for i := 0; i < 150; i++ {
			// The clock steps back too, but never to before a time at
			// which the record was found expired: whether a store still
			// has it then is up to the store.
			now = max(now+steps[rng.IntN(len(steps))], dropped)
			owner := owners[rng.IntN(len(owners))]
			req := leasewire.Request{Op: leasewire.Op(1 + rng.IntN(4)), Owner: owner, Fence: fencesOf[owner], TTL: ttls[rng.IntN(len(ttls))]}
			if rng.IntN(6) == 0 {
				req.Fence += int64(rng.IntN(3)) - 1
			}
			if state != nil && now >= kept {
				state, dropped = nil, now
			}
			next, ttl, want, err := leasewire.Step(bytes.Clone(state), now, req)
			if err != nil {
				t.Fatalf("seed %d step %d: lease.Step(%+v) at %d: %v", seed, i, req, now, err)
			}
			var got leasewire.Result
			via := "RunLease"
			if rng.IntN(3) == 0 {
				via = "Update"
				err = h.Store.Update(ctx, key, now, func(cur []byte, now int64) ([]byte, int64, error) {
					next, ttl, res, err := leasewire.Step(cur, now, req)
					got = res
					return next, ttl, err
				})
			} else {
				got, err = runner.RunLease(ctx, key, now, req)
			}
			if err != nil {
				t.Fatalf("seed %d step %d: %s(op %d, fence %d, ttl %d) at %d: %v", seed, i, via, req.Op, req.Fence, req.TTL, now, err)
			}
			if got != want && !got.Found && state != nil && h.RealTimeExpiry &&
				time.Since(written) >= time.Duration(keepUs)*time.Microsecond {
				// The backend expires by real time, and this machine
				// stalled past the record's TTL: it is gone, as it may be.
				next, ttl, want, _ = leasewire.Step(nil, now, req)
				dropped = now
			}
			if next != nil {
				keepUs = max(ttl, 1)
				state, kept, written = next, now+keepUs, time.Now()
			}
			if want.Code == leasewire.OK && req.Op == leasewire.OpAcquire {
				fencesOf[owner] = want.Fence
			}
			if got != want {
				t.Fatalf("seed %d step %d: %s(op %d, owner %x, fence %d, ttl %d) at %d = %+v, want the Go form's %+v", seed, i, via, req.Op, req.Owner[0], req.Fence, req.TTL, now, got, want)
			}
		}
	}
}

package lease_test

import (
	"bytes"
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ratelimitkit/ratelimit"
	"github.com/ratelimitkit/ratelimit/clock"
	"github.com/ratelimitkit/ratelimit/lease"
	"github.com/ratelimitkit/ratelimit/lease/leasewire"
	"github.com/ratelimitkit/ratelimit/store"
	"github.com/ratelimitkit/ratelimit/store/memory"
)

var epoch = time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)

const ttl = 30 * time.Second

// Step's cases are data: each names the rule it checks.
func TestStep(t *testing.T) {
	a, b := leasewire.Token{1}, leasewire.Token{2}
	now := epoch.UnixMicro()
	us := ttl.Microseconds()
	type step struct {
		at       int64 // µs after now
		req      leasewire.Request
		code     leasewire.Code
		fence    int64 // checked when not 0
		wantNext bool
	}
	cases := []struct {
		name  string
		rule  string
		steps []step
	}{
		{"acquire-free", "a free key is taken with fence now", []step{
			{0, leasewire.Request{Op: leasewire.OpAcquire, Owner: a, TTL: us}, leasewire.OK, now, true},
		}},
		{"held", "a live lease excludes others and writes nothing", []step{
			{0, leasewire.Request{Op: leasewire.OpAcquire, Owner: a, TTL: us}, leasewire.OK, now, true},
			{us - 1, leasewire.Request{Op: leasewire.OpAcquire, Owner: b, TTL: us}, leasewire.Held, now, false},
		}},
		{"reacquire-same-owner", "a retried acquire returns the same lease", []step{
			{0, leasewire.Request{Op: leasewire.OpAcquire, Owner: a, TTL: us}, leasewire.OK, now, true},
			{5, leasewire.Request{Op: leasewire.OpAcquire, Owner: a, TTL: us}, leasewire.OK, now, true},
		}},
		{"takeover", "an expired lease is taken with a greater fence", []step{
			{0, leasewire.Request{Op: leasewire.OpAcquire, Owner: a, TTL: us}, leasewire.OK, now, true},
			{us, leasewire.Request{Op: leasewire.OpAcquire, Owner: b, TTL: us}, leasewire.OK, now + us, true},
			{us, leasewire.Request{Op: leasewire.OpExtend, Owner: a, Fence: now, TTL: us}, leasewire.Lost, 0, false},
			{us, leasewire.Request{Op: leasewire.OpRelease, Owner: a, Fence: now, TTL: us}, leasewire.Lost, 0, false},
		}},
		{"same-instant", "fences run ahead of a clock that stands still", []step{
			{0, leasewire.Request{Op: leasewire.OpAcquire, Owner: a, TTL: us}, leasewire.OK, now, true},
			{0, leasewire.Request{Op: leasewire.OpRelease, Owner: a, Fence: now, TTL: us}, leasewire.OK, 0, true},
			{0, leasewire.Request{Op: leasewire.OpAcquire, Owner: b, TTL: us}, leasewire.OK, now + 1, true},
		}},
		{"release-twice", "a retried release succeeds and writes nothing", []step{
			{0, leasewire.Request{Op: leasewire.OpAcquire, Owner: a, TTL: us}, leasewire.OK, now, true},
			{1, leasewire.Request{Op: leasewire.OpRelease, Owner: a, Fence: now, TTL: us}, leasewire.OK, 0, true},
			{2, leasewire.Request{Op: leasewire.OpRelease, Owner: a, Fence: now, TTL: us}, leasewire.OK, 0, false},
			{3, leasewire.Request{Op: leasewire.OpExtend, Owner: a, Fence: now, TTL: us}, leasewire.Lost, 0, false},
		}},
		{"wrong-fence", "the owner token and the fence must both match", []step{
			{0, leasewire.Request{Op: leasewire.OpAcquire, Owner: a, TTL: us}, leasewire.OK, now, true},
			{1, leasewire.Request{Op: leasewire.OpExtend, Owner: a, Fence: now - 1, TTL: us}, leasewire.Lost, 0, false},
			{1, leasewire.Request{Op: leasewire.OpRelease, Owner: b, Fence: now, TTL: us}, leasewire.Lost, 0, false},
		}},
		{"expired-release", "a release after expiry says the lease was lost", []step{
			{0, leasewire.Request{Op: leasewire.OpAcquire, Owner: a, TTL: us}, leasewire.OK, now, true},
			{us, leasewire.Request{Op: leasewire.OpRelease, Owner: a, Fence: now, TTL: us}, leasewire.Lost, 0, false},
		}},
		{"clock-back", "a clock that steps back never lowers the fence", []step{
			{0, leasewire.Request{Op: leasewire.OpAcquire, Owner: a, TTL: us}, leasewire.OK, now, true},
			{1, leasewire.Request{Op: leasewire.OpRelease, Owner: a, Fence: now, TTL: us}, leasewire.OK, 0, true},
			{-1_000_000, leasewire.Request{Op: leasewire.OpAcquire, Owner: b, TTL: us}, leasewire.OK, now + 1, true},
		}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			var cur []byte
			for i, s := range c.steps {
				next, keep, res, err := leasewire.Step(bytes.Clone(cur), now+s.at, s.req)
				if err != nil {
					t.Fatalf("step %d: lease.Step(op %d) at t+%dµs: %v", i, s.req.Op, s.at, err)
				}
				if res.Code != s.code || (s.fence != 0 && res.Fence != s.fence) || (next != nil) != s.wantNext {
					t.Fatalf("step %d: lease.Step(op %d) at t+%dµs = code %d, fence %d, writes %v; want code %d, fence %d, writes %v (rule: %s)",
						i, s.req.Op, s.at, res.Code, res.Fence, next != nil, s.code, s.fence, s.wantNext, c.rule)
				}
				if next != nil {
					if keep < 1 || keep < res.Fence-(now+s.at)+1 {
						t.Fatalf("step %d: keeps the record %dµs, less than until the clock passes fence %d (rule: a record outlives its fence)", i, keep, res.Fence)
					}
					cur = next
				}
			}
		})
	}
}

func TestStepBadInput(t *testing.T) {
	now := epoch.UnixMicro()
	for _, c := range []struct {
		name string
		cur  []byte
		now  int64
		req  leasewire.Request
		want error
	}{
		{"corrupt", []byte("not a lease"), now, leasewire.Request{Op: leasewire.OpRead}, ratelimit.ErrCorruptState},
		{"negative-time", nil, -1, leasewire.Request{Op: leasewire.OpRead}, ratelimit.ErrInvalidTime},
		{"zero-ttl", nil, now, leasewire.Request{Op: leasewire.OpAcquire}, ratelimit.ErrInvalidParams},
		{"unknown-op", nil, now, leasewire.Request{Op: 9, TTL: 1}, ratelimit.ErrInvalidParams},
	} {
		if _, _, _, err := leasewire.Step(c.cur, c.now, c.req); !errors.Is(err, c.want) {
			t.Errorf("%s: lease.Step = %v, want %v", c.name, err, c.want)
		}
	}
}

func FuzzStep(f *testing.F) {
	f.Add([]byte(nil), int64(1), uint8(1), int64(0), int64(1000))
	f.Add(bytes.Repeat([]byte{1}, 34), int64(1<<50), uint8(3), int64(5), int64(1))
	f.Fuzz(func(t *testing.T, cur []byte, now int64, op uint8, fence, ttl int64) {
		req := leasewire.Request{Op: leasewire.Op(op), Owner: leasewire.Token{7}, Fence: fence, TTL: ttl}
		next, keep, res, err := leasewire.Step(cur, now, req)
		if err != nil {
			return
		}
		if next == nil {
			return
		}
		if keep < 1 {
			t.Fatalf("Step writes a record kept %d µs", keep)
		}
		_, _, again, err := leasewire.Step(next, now, leasewire.Request{Op: leasewire.OpRead})
		if err != nil || again.Fence != res.Fence {
			t.Fatalf("Step wrote a record that reads back as fence %d, %v; want fence %d", again.Fence, err, res.Fence)
		}
		if req.Op == leasewire.OpAcquire && cur != nil {
			_, _, before, _ := leasewire.Step(cur, now, leasewire.Request{Op: leasewire.OpRead})
			if res.Fence < before.Fence || (res.Fence == before.Fence && before.Owner != req.Owner) {
				t.Fatalf("acquire over fence %d gave fence %d", before.Fence, res.Fence)
			}
		}
	})
}

// failing is a real memory store that fails every call while down is set.
type failing struct {
	store.Store
	down atomic.Bool
}

var errDown = errors.New("test store: down")

func (s *failing) Update(ctx context.Context, key store.Key, now int64, fn store.UpdateFunc) error {
	if s.down.Load() {
		return errDown
	}
	return s.Store.Update(ctx, key, now, fn)
}

// runDo runs locker.Do on key with work that waits for its context, and
// advances c in steps of TTL/100 until Do returns. It returns Do's error and
// the fake time at which the work's context ended.
func runDo(t *testing.T, locker *lease.Locker, c *clock.Fake, key string, onStart func(*lease.Lease)) (error, time.Time, *lease.Lease) {
	t.Helper()
	started := make(chan *lease.Lease, 1)
	done := make(chan error, 1)
	var ended atomic.Pointer[time.Time]
	go func() {
		done <- locker.Do(context.Background(), key, func(ctx context.Context, le *lease.Lease) error {
			started <- le
			<-ctx.Done()
			now := c.Now()
			ended.Store(&now)
			return nil
		})
	}()
	le := <-started
	onStart(le)
	for i := 0; i < 10000; i++ {
		select {
		case err := <-done:
			return err, *ended.Load(), le
		case <-time.After(2 * time.Millisecond):
		}
		c.Advance(ttl / 100)
	}
	t.Fatal("locker.Do did not return after 100 TTLs")
	return nil, time.Time{}, nil
}

func TestDoCancelsWhenRenewalFails(t *testing.T) {
	c := clock.NewFake(epoch)
	s := &failing{Store: memory.MustNew()}
	locker, err := lease.New(s, ttl, lease.WithClock(c))
	if err != nil {
		t.Fatal(err)
	}
	var deadline time.Time
	err, ended, _ := runDo(t, locker, c, "k", func(le *lease.Lease) {
		deadline = le.Deadline()
		s.down.Store(true)
	})
	if !errors.Is(err, lease.ErrLost) || !errors.Is(err, errDown) {
		t.Errorf("locker.Do() while the store fails = %v, want ErrLost with the store's error", err)
	}
	if !ended.Before(deadline) {
		t.Errorf("Do canceled its work at %v, want before the lease's deadline %v (rule: the work ends before the lease could run out)", ended, deadline)
	}
	if ended.Before(deadline.Add(-ttl / 5)) {
		t.Errorf("Do canceled its work at %v, more than TTL/5 before the lease's deadline %v", ended, deadline)
	}
}

func TestDoMaxHold(t *testing.T) {
	c := clock.NewFake(epoch)
	locker, err := lease.New(memory.MustNew(), ttl, lease.WithClock(c), lease.WithMaxHold(2*ttl))
	if err != nil {
		t.Fatal(err)
	}
	err, ended, _ := runDo(t, locker, c, "k", func(*lease.Lease) {})
	if !errors.Is(err, lease.ErrMaxHold) {
		t.Errorf("locker.Do() past its maximum hold = %v, want ErrMaxHold", err)
	}
	if held := ended.Sub(epoch); held < 2*ttl || held > 2*ttl+ttl/10 {
		t.Errorf("Do's work ran %v, want the maximum hold time %v", held, 2*ttl)
	}
	if _, err := locker.TryAcquire(context.Background(), "k"); err != nil {
		t.Errorf("locker.TryAcquire after Do returned: %v, want the key released", err)
	}
}

func TestNewRejectsBadInput(t *testing.T) {
	s := memory.MustNew()
	for _, c := range []struct {
		name string
		err  error
	}{
		{"nil store", func() error { _, err := lease.New(nil, ttl); return err }()},
		{"zero ttl", func() error { _, err := lease.New(s, 0); return err }()},
		{"bad name", func() error { _, err := lease.New(s, ttl, lease.WithName("a:b")); return err }()},
		{"nil clock", func() error { _, err := lease.New(s, ttl, lease.WithClock(nil)); return err }()},
		{"zero poll", func() error { _, err := lease.New(s, ttl, lease.WithPollInterval(0)); return err }()},
		{"negative max hold", func() error { _, err := lease.New(s, ttl, lease.WithMaxHold(-1)); return err }()},
	} {
		if !errors.Is(c.err, ratelimit.ErrInvalidParams) {
			t.Errorf("lease.New with %s = %v, want ErrInvalidParams", c.name, c.err)
		}
	}
}

// TestAcquireWakesOnLocalRelease checks that goroutines of one Locker hand
// a key on when it is released, without waiting for the poll.
func TestAcquireWakesOnLocalRelease(t *testing.T) {
	c := clock.NewFake(epoch)
	locker, err := lease.New(memory.MustNew(), ttl, lease.WithClock(c), lease.WithPollInterval(time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	first, err := locker.TryAcquire(ctx, "k")
	if err != nil {
		t.Fatal(err)
	}
	got := make(chan error, 1)
	go func() {
		_, err := locker.Acquire(ctx, "k")
		got <- err
	}()
	for c.Waiters() == 0 {
		time.Sleep(time.Millisecond)
	}
	if err := first.Release(ctx); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-got:
		if err != nil {
			t.Fatalf("Acquire after a local Release: %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Acquire still waits 10s after the same locker released the key, with the clock standing still")
	}
}

// BenchmarkTryAcquireRelease measures a TryAcquire and a Release on the
// memory store: the locker's own cost per lease, each call bounded (a
// timer, and a goroutine that lets the bound hold on a store that ignores
// its context).
func BenchmarkTryAcquireRelease(b *testing.B) {
	locker, err := lease.New(memory.MustNew(), ttl)
	if err != nil {
		b.Fatal(err)
	}
	ctx := context.Background()
	b.ReportAllocs()
	for b.Loop() {
		le, err := locker.TryAcquire(ctx, "k")
		if err != nil {
			b.Fatal(err)
		}
		if err := le.Release(ctx); err != nil {
			b.Fatal(err)
		}
	}
}

package lease_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	goredis "github.com/redis/go-redis/v9"

	"github.com/ratelimitkit/ratelimit"
	"github.com/ratelimitkit/ratelimit/clock"
	"github.com/ratelimitkit/ratelimit/internal/testserver"
	"github.com/ratelimitkit/ratelimit/lease"
	"github.com/ratelimitkit/ratelimit/store"
	"github.com/ratelimitkit/ratelimit/store/memory"
	"github.com/ratelimitkit/ratelimit/store/postgres"
	"github.com/ratelimitkit/ratelimit/store/redis"
)

// servers returns the stores the fault tests run on: memory, and Redis and
// PostgreSQL on the shared test servers (each on its own prefix or table).
func servers(t *testing.T) []struct {
	name  string
	store func(t *testing.T) store.Store
} {
	return []struct {
		name  string
		store func(t *testing.T) store.Store
	}{
		{"memory", func(t *testing.T) store.Store { return memory.MustNew() }},
		{"redis", func(t *testing.T) store.Store {
			c := goredis.NewClient(&goredis.Options{Addr: testserver.RedisAddr(t)})
			t.Cleanup(func() { c.Close() })
			s, err := redis.New(c, redis.WithPrefix(fmt.Sprintf("leasefault%d", time.Now().UnixNano())))
			if err != nil {
				t.Fatal(err)
			}
			return s
		}},
		{"postgres", func(t *testing.T) store.Store {
			ctx := context.Background()
			pool, err := pgxpool.New(ctx, testserver.PostgresURL(t))
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(pool.Close)
			table := fmt.Sprintf("leasefault_%d", time.Now().UnixNano())
			s, err := postgres.New(pool, postgres.WithTable(table))
			if err != nil {
				t.Fatal(err)
			}
			if err := s.Migrate(ctx); err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() {
				if _, err := pool.Exec(context.Background(), "DROP TABLE IF EXISTS "+pgx.Identifier{table}.Sanitize()); err != nil {
					t.Errorf("drop %s: %v", table, err)
				}
			})
			return s
		}},
	}
}

// TestDoPanicReleases checks that a panic in Do's work stops renewal,
// releases the lease and goes on with its own value: another locker takes
// the key at once, without waiting for the TTL.
func TestDoPanicReleases(t *testing.T) {
	for _, srv := range servers(t) {
		t.Run(srv.name, func(t *testing.T) {
			s := srv.store(t)
			const ttl = 10 * time.Second
			a, err := lease.New(s, ttl)
			if err != nil {
				t.Fatal(err)
			}
			b, err := lease.New(s, ttl)
			if err != nil {
				t.Fatal(err)
			}
			ctx := context.Background()
			boom := errors.New("boom")
			var fence int64
			got := func() (p any) {
				defer func() { p = recover() }()
				_ = a.Do(ctx, "k", func(ctx context.Context, le *lease.Lease) error {
					fence = le.Fence()
					panic(boom)
				})
				return nil
			}()
			if got != boom {
				t.Fatalf("Do's work panicked with %v; Do panicked with %v, want the same value", boom, got)
			}
			le, err := b.TryAcquire(ctx, "k")
			if err != nil {
				t.Fatalf("another locker's TryAcquire right after Do's work panicked = %v, want the key free (rule: a panic never leaves a lease held)", err)
			}
			if le.Fence() <= fence {
				t.Errorf("fence after the panic %d, want greater than the panicked lease's %d", le.Fence(), fence)
			}
			if err := le.Release(ctx); err != nil {
				t.Fatal(err)
			}
		})
	}
}

// TestDoNilFunc checks that Do with a nil function is an error and takes
// no lease.
func TestDoNilFunc(t *testing.T) {
	s := memory.MustNew()
	locker, err := lease.New(s, ttl)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if err := locker.Do(ctx, "k", nil); !errors.Is(err, ratelimit.ErrInvalidParams) {
		t.Fatalf("locker.Do(ctx, key, nil) = %v, want ErrInvalidParams", err)
	}
	if _, err := locker.TryAcquire(ctx, "k"); err != nil {
		t.Errorf("TryAcquire after Do with a nil function = %v, want the key free", err)
	}
}

// pausing is a real memory store whose every call, once armed, takes
// pause on the locker's fake clock before its reply arrives: a slow store,
// or a process paused between sending and reading.
type pausing struct {
	store.Store
	clock *clock.Fake
	pause atomic.Int64
}

func (s *pausing) Update(ctx context.Context, key store.Key, now int64, fn store.UpdateFunc) error {
	err := s.Store.Update(ctx, key, now, fn)
	s.clock.Advance(time.Duration(s.pause.Load()))
	return err
}

// TestDoLateReplyNeverStarts checks that Do does not start the work when
// the acquire's reply arrives with less than the margin of the lease left,
// and gives the key back.
func TestDoLateReplyNeverStarts(t *testing.T) {
	for _, pause := range []time.Duration{ttl - ttl/20, ttl, 2 * ttl} {
		t.Run(pause.String(), func(t *testing.T) {
			c := clock.NewFake(epoch)
			s := &pausing{Store: memory.MustNew(), clock: c}
			s.pause.Store(int64(pause))
			locker, err := lease.New(s, ttl, lease.WithClock(c))
			if err != nil {
				t.Fatal(err)
			}
			started := false
			err = locker.Do(context.Background(), "k", func(context.Context, *lease.Lease) error {
				started = true
				return nil
			})
			if started || !errors.Is(err, lease.ErrLost) {
				t.Fatalf("Do with the acquire's reply %v after it was sent (TTL %v, margin %v): work started %v, error %v; want not started, ErrLost",
					pause, ttl, locker.Margin(), started, err)
			}
			s.pause.Store(0)
			if _, err := locker.TryAcquire(context.Background(), "k"); err != nil {
				t.Errorf("TryAcquire after Do refused a late lease = %v, want the key free", err)
			}
		})
	}
}

// slow is a real memory store whose replies, while delay is set, arrive
// delay after the store answered, whatever the caller's context says.
type slow struct {
	store.Store
	delay atomic.Int64
}

func (s *slow) Update(ctx context.Context, key store.Key, now int64, fn store.UpdateFunc) error {
	err := s.Store.Update(ctx, key, now, fn)
	time.Sleep(time.Duration(s.delay.Load()))
	return err
}

// TestDoSlowRepliesNoOverlap runs Do through a store whose replies come
// later than the lease's TTL, while another locker on the same store
// (answering at once) takes the key as soon as it can: the slow Do's work
// never starts, so it never overlaps the other's, in 20 trials.
func TestDoSlowRepliesNoOverlap(t *testing.T) {
	const ttl, margin = 200 * time.Millisecond, 20 * time.Millisecond
	mem := memory.MustNew()
	s := &slow{Store: mem}
	s.delay.Store(int64(ttl + ttl/4))
	slowLk, err := lease.New(s, ttl, lease.WithMargin(margin))
	if err != nil {
		t.Fatal(err)
	}
	fastLk, err := lease.New(mem, ttl, lease.WithMargin(margin), lease.WithPollInterval(time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	var running, overlaps, slowStarts, fastRuns atomic.Int32
	for trial := 0; trial < 20; trial++ {
		key := fmt.Sprintf("k%d", trial)
		var wg sync.WaitGroup
		wg.Add(2)
		go func() {
			defer wg.Done()
			_ = slowLk.Do(context.Background(), key, func(ctx context.Context, _ *lease.Lease) error {
				slowStarts.Add(1)
				if running.Add(1) > 1 {
					overlaps.Add(1)
				}
				defer running.Add(-1)
				select {
				case <-ctx.Done():
				case <-time.After(ttl):
				}
				return nil
			})
		}()
		go func() {
			defer wg.Done()
			ctx, cancel := context.WithTimeout(context.Background(), 3*ttl)
			defer cancel()
			_ = fastLk.Do(ctx, key, func(ctx context.Context, _ *lease.Lease) error {
				fastRuns.Add(1)
				if running.Add(1) > 1 {
					overlaps.Add(1)
				}
				defer running.Add(-1)
				time.Sleep(ttl / 2)
				return nil
			})
		}()
		wg.Wait()
	}
	if slowStarts.Load() != 0 || overlaps.Load() != 0 {
		t.Errorf("20 trials with replies %v late (TTL %v): the slow Do's work started %d times, %d overlaps; want 0 and 0 (rule: the work never starts on a lease that may have run out)",
			time.Duration(s.delay.Load()), ttl, slowStarts.Load(), overlaps.Load())
	}
	if fastRuns.Load() != 20 {
		t.Errorf("the other locker ran its work %d times in 20 trials, want 20", fastRuns.Load())
	}
}

// TestDoContextDeadline checks that the work's context tells the work how
// long it has: the lease's deadline less the margin, moving later with
// each renewal.
func TestDoContextDeadline(t *testing.T) {
	c := clock.NewFake(epoch)
	locker, err := lease.New(memory.MustNew(), ttl, lease.WithClock(c))
	if err != nil {
		t.Fatal(err)
	}
	err = locker.Do(context.Background(), "k", func(ctx context.Context, le *lease.Lease) error {
		first, ok := ctx.Deadline()
		if want := le.Deadline().Add(-locker.Margin()); !ok || !first.Equal(want) {
			t.Fatalf("work's ctx.Deadline() = %v, %v; want the lease's deadline less the margin, %v", first, ok, want)
		}
		for i := 0; i < 1000 && !le.Deadline().After(first.Add(locker.Margin())); i++ {
			c.Advance(ttl / 100)
			time.Sleep(time.Millisecond)
		}
		next, ok := ctx.Deadline()
		if want := le.Deadline().Add(-locker.Margin()); !ok || !next.Equal(want) || !next.After(first) {
			t.Errorf("work's ctx.Deadline() after a renewal = %v, %v; want %v, later than the first %v", next, ok, want, first)
		}
		if ctx.Err() != nil {
			t.Errorf("work's context ended after a renewal: %v", context.Cause(ctx))
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	// The maximum hold time and the caller's deadline come first when
	// they are earlier.
	hold, err := lease.New(memory.MustNew(), ttl, lease.WithClock(c), lease.WithMaxHold(ttl/4))
	if err != nil {
		t.Fatal(err)
	}
	err = hold.Do(context.Background(), "k", func(ctx context.Context, le *lease.Lease) error {
		if d, _ := ctx.Deadline(); !d.Equal(c.Now().Add(ttl / 4)) {
			t.Errorf("work's ctx.Deadline() with a maximum hold of %v = %v, want %v", ttl/4, d, c.Now().Add(ttl/4))
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

// TestCallsBoundedOnFrozenServer checks that every store call of a locker
// returns within its bound on a Redis server that stopped answering
// (SIGSTOP), with a client left at go-redis's defaults (which do not end
// a read when the context does), and with no deadline on the caller's
// context; and that a caller's earlier deadline wins.
func TestCallsBoundedOnFrozenServer(t *testing.T) {
	srv := testserver.StartRedis(t)
	c := goredis.NewClient(&goredis.Options{Addr: srv.Addr()})
	t.Cleanup(func() { c.Close() })
	s, err := redis.New(c)
	if err != nil {
		t.Fatal(err)
	}
	const ttl = 5 * time.Second
	locker, err := lease.New(s, ttl, lease.WithPollInterval(10*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	held, err := locker.TryAcquire(ctx, "held")
	if err != nil {
		t.Fatal(err)
	}
	srv.Freeze()
	t.Cleanup(srv.Thaw)
	const bound, slack = time.Second, 500 * time.Millisecond
	short := func() (context.Context, context.CancelFunc) { return context.WithTimeout(ctx, 200*time.Millisecond) }
	none := func() (context.Context, context.CancelFunc) { return ctx, func() {} }
	for _, call := range []struct {
		name  string
		ctx   func() (context.Context, context.CancelFunc)
		bound time.Duration
		do    func(ctx context.Context) error
	}{
		{"TryAcquire", none, bound, func(ctx context.Context) error { _, err := locker.TryAcquire(ctx, "free"); return err }},
		{"Acquire", none, bound, func(ctx context.Context) error { _, err := locker.Acquire(ctx, "free"); return err }},
		{"Extend", none, bound, held.Extend},
		{"Release", none, bound, held.Release},
		{"Do", none, bound, func(ctx context.Context) error {
			return locker.Do(ctx, "free", func(context.Context, *lease.Lease) error { return nil })
		}},
		{"TryAcquire with the caller's 200ms deadline", short, 200 * time.Millisecond, func(ctx context.Context) error { _, err := locker.TryAcquire(ctx, "free"); return err }},
	} {
		cctx, cancel := call.ctx()
		start := time.Now()
		err := call.do(cctx)
		took := time.Since(start)
		cancel()
		if err == nil || took > call.bound+slack {
			t.Errorf("%s on a frozen server took %v, error %v; want an error within %v (+%v)", call.name, took, err, call.bound, slack)
		}
		if err != nil && !errors.Is(err, context.DeadlineExceeded) {
			t.Errorf("%s on a frozen server = %v, want an error wrapping context.DeadlineExceeded", call.name, err)
		}
		t.Logf("%s: %v: %v", call.name, took.Round(time.Millisecond), err)
	}
}

// serverClockStore is a real memory store that says it decides by its
// server's clock.
type serverClockStore struct{ store.Store }

func (serverClockStore) ServerClock() bool { return true }

// TestNewRefusesTypedNilsAndServerClocks checks the probe's typed nils and
// a fake clock on a store that decides by its server's clock, refused as
// ratelimit.New refuses them, and the margin's bounds.
func TestNewRefusesTypedNilsAndServerClocks(t *testing.T) {
	s := memory.MustNew()
	for _, c := range []struct {
		name string
		new  func() (*lease.Locker, error)
		want string
	}{
		{"typed nil store", func() (*lease.Locker, error) { return lease.New((*memory.Store)(nil), ttl) }, "nil store"},
		{"typed nil clock", func() (*lease.Locker, error) { return lease.New(s, ttl, lease.WithClock((*clock.Fake)(nil))) }, "nil clock"},
		{"fake clock on a server-clock store", func() (*lease.Locker, error) {
			return lease.New(serverClockStore{s}, ttl, lease.WithClock(clock.NewFake(epoch)))
		}, "the store decides by its server's clock, so WithClock would be ignored; configure the store with WithServerClock(false)"},
		{"margin over half the TTL", func() (*lease.Locker, error) { return lease.New(s, ttl, lease.WithMargin(ttl/2+1)) }, "half the TTL"},
		{"zero margin", func() (*lease.Locker, error) { return lease.New(s, ttl, lease.WithMargin(0)) }, "margin"},
		{"zero call timeout", func() (*lease.Locker, error) { return lease.New(s, ttl, lease.WithCallTimeout(0)) }, "call timeout"},
	} {
		lk, err := c.new()
		if !errors.Is(err, ratelimit.ErrInvalidParams) || !strings.Contains(err.Error(), c.want) || lk != nil {
			t.Errorf("lease.New with %s = %v, %v; want ErrInvalidParams saying %q", c.name, lk, err, c.want)
		}
	}
	for _, c := range []struct {
		name string
		opts []lease.Option
	}{
		{"system clock on a server-clock store", []lease.Option{lease.WithClock(clock.System)}},
		{"no clock on a server-clock store", nil},
	} {
		if _, err := lease.New(serverClockStore{s}, ttl, c.opts...); err != nil {
			t.Errorf("lease.New with %s = %v, want no error", c.name, err)
		}
	}
	if _, err := lease.New(s, time.Second, lease.WithMargin(100*time.Millisecond)); err != nil {
		t.Errorf("lease.New(s, 1s, WithMargin(100ms)) = %v, want no error", err)
	}
	// The default margin: the larger of TTL/10 and a second (the default margin), at most
	// a third of the TTL, so that every TTL from MinTTL up is accepted.
	for _, c := range []struct{ ttl, margin time.Duration }{
		{lease.MinTTL, lease.MinTTL / 3},
		{time.Second, time.Second / 3},
		{3 * time.Second, time.Second},
		{10 * time.Second, time.Second},
		{time.Minute, 6 * time.Second},
	} {
		lk, err := lease.New(s, c.ttl)
		if err != nil {
			t.Errorf("lease.New(s, %v) = %v, want no error", c.ttl, err)
			continue
		}
		if lk.Margin() != c.margin {
			t.Errorf("lease.New(s, %v).Margin() = %v, want %v", c.ttl, lk.Margin(), c.margin)
		}
	}
}

// TestDoSlowRepliesEveryStore runs Do through each store behind a wrapper
// whose replies come later than the lease's TTL: the work never starts, in
// 3 trials on each store.
func TestDoSlowRepliesEveryStore(t *testing.T) {
	const ttl, margin = 200 * time.Millisecond, 20 * time.Millisecond
	for _, srv := range servers(t) {
		t.Run(srv.name, func(t *testing.T) {
			s := &slow{Store: srv.store(t)}
			s.delay.Store(int64(ttl + ttl/4))
			locker, err := lease.New(s, ttl, lease.WithMargin(margin))
			if err != nil {
				t.Fatal(err)
			}
			for trial := 0; trial < 3; trial++ {
				started := false
				err := locker.Do(context.Background(), fmt.Sprintf("k%d", trial), func(context.Context, *lease.Lease) error {
					started = true
					return nil
				})
				if started || err == nil {
					t.Errorf("trial %d: Do with replies %v late on a %v lease: work started %v, error %v; want not started and an error", trial, ttl+ttl/4, ttl, started, err)
				}
			}
		})
	}
}

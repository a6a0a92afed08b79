package ratelimit_test

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/ratelimitkit/ratelimit"
	"github.com/ratelimitkit/ratelimit/algorithms"
	"github.com/ratelimitkit/ratelimit/internal/testserver"
	"github.com/ratelimitkit/ratelimit/store"
	"github.com/ratelimitkit/ratelimit/store/memory"
	rlredis "github.com/ratelimitkit/ratelimit/store/redis"
)

// waitBar is the least share of its rate that one caller pacing itself
// with Wait must reach (issue 29).
const waitBar = 0.97

// lateClock is a fake clock whose timers fire late: After(d) moves the
// clock on by d and then by late, and fires at once. A caller sleeping on
// it never blocks, so a test of many turns is deterministic and instant,
// and every sleep overshoots as a loaded machine's timers do.
type lateClock struct {
	mu   sync.Mutex
	now  time.Time
	late time.Duration
}

func (c *lateClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *lateClock) After(d time.Duration) <-chan time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	if d > 0 {
		c.now = c.now.Add(d + c.late)
	}
	ch := make(chan time.Time, 1)
	ch <- c.now
	return ch
}

// waitStores are the stores the deterministic Wait tests run on: the
// memory store, and Redis deciding by the limiter's (fake) clock.
func waitStores(t *testing.T) map[string]func(t *testing.T) store.Store {
	return map[string]func(t *testing.T) store.Store{
		"memory": func(t *testing.T) store.Store { return memory.MustNew() },
		"redis": func(t *testing.T) store.Store {
			c := goredis.NewClient(&goredis.Options{Addr: testserver.RedisAddr(t), ContextTimeoutEnabled: true})
			t.Cleanup(func() { c.Close() })
			s, err := rlredis.New(c, rlredis.WithPrefix(uniqueName("wait")), rlredis.WithServerClock(false))
			if err != nil {
				t.Fatal(err)
			}
			return s
		},
	}
}

// paced counts the calls of wait that return within span of c's time,
// calling it back to back as one caller pacing itself would.
func paced(t *testing.T, c *lateClock, span time.Duration, wait func() error) int {
	t.Helper()
	start, n := c.Now(), 0
	for {
		if err := wait(); err != nil {
			t.Fatalf("Wait after %d calls: %v", n, err)
		}
		if c.Now().Sub(start) > span {
			return n
		}
		n++
	}
}

// TestWaitReachesRateWithLateTimers paces one caller with Wait on a clock
// whose every timer fires late, for each algorithm, on the memory store
// and Redis. Wait books each turn before it sleeps, so a late timer delays
// one call and not the next turn: the rate is reached whatever the timers
// do. (Before, Wait asked, slept RetryAfter and asked again, and each
// late timer lost its lateness: GCRA(50/s, burst 1) with timers 5ms late
// made 41 calls a second, not 50.) The window algorithms cannot book a
// turn; a late timer costs them nothing while it stays inside the window
// (fixed and sliding window) and its lateness once a period (the sliding
// log, here 1ms of 100ms).
func TestWaitReachesRateWithLateTimers(t *testing.T) {
	cases := []struct {
		alg  algorithms.Algorithm
		rate float64       // per second
		late time.Duration // each timer's lateness
	}{
		{algorithms.GCRA(50, time.Second, 1), 50, 5 * time.Millisecond},
		{algorithms.TokenBucket(50, time.Second, 1), 50, 5 * time.Millisecond},
		// The leaky bucket queues a turn ahead when its capacity holds
		// two requests.
		{algorithms.LeakyBucket(50, time.Second, 2), 50, 5 * time.Millisecond},
		{algorithms.All(algorithms.GCRA(50, time.Second, 1), algorithms.FixedWindow(5000, time.Minute)), 50, 5 * time.Millisecond},
		{algorithms.FixedWindow(5, 100*time.Millisecond), 50, 5 * time.Millisecond},
		{algorithms.FixedWindow(1, 20*time.Millisecond), 50, 5 * time.Millisecond},
		{algorithms.SlidingWindow(5, 100*time.Millisecond), 50, time.Millisecond},
		{algorithms.SlidingLog(5, 100*time.Millisecond), 50, time.Millisecond},
	}
	const span = time.Second
	for name, newStore := range waitStores(t) {
		t.Run(name, func(t *testing.T) {
			st := newStore(t)
			for i, c := range cases {
				clk := &lateClock{now: epoch, late: c.late}
				lim, err := ratelimit.New(st, c.alg, ratelimit.WithClock(clk), ratelimit.WithName(uniqueName("late")))
				if err != nil {
					t.Fatal(err)
				}
				ctx := context.Background()
				got := paced(t, clk, span, func() error { _, err := lim.Wait(ctx, "k"); return err })
				if share := float64(got) / (c.rate * span.Seconds()); share < waitBar {
					t.Errorf("case %d, %v, timers %v late: %d Waits returned in %v, %.3f of the rate; want at least %.2f", i, c.alg, c.late, got, span, share, waitBar)
				}
			}
		})
	}
}

// slowStore is a store whose every call takes rtt of c's time to answer,
// after the store decided: a round trip on the limiter's clock.
type slowStore struct {
	store.Store
	c   *lateClock
	rtt time.Duration
}

func (s slowStore) Update(ctx context.Context, k store.Key, now int64, f store.UpdateFunc) error {
	err := s.Store.Update(ctx, k, now, f)
	s.c.mu.Lock()
	s.c.now = s.c.now.Add(s.rtt)
	s.c.mu.Unlock()
	return err
}

// TestWaitRetryCountsFromTheAsk paces one caller with Wait on the
// algorithms that serve only now, through a store that takes 2ms to
// answer, on timers that fire on time. Wait sleeps a denial's RetryAfter
// from when the request read the clock, so the answer's way back is not
// slept again: before, each turn of SlidingLog(1, 20ms) cost 22ms (0.91 of
// the rate).
func TestWaitRetryCountsFromTheAsk(t *testing.T) {
	for _, alg := range []algorithms.Algorithm{
		algorithms.SlidingLog(1, 20*time.Millisecond),
		algorithms.LeakyBucket(50, time.Second, 1),
		algorithms.FixedWindow(1, 20*time.Millisecond),
		algorithms.SlidingWindow(1, 20*time.Millisecond),
	} {
		clk := &lateClock{now: epoch}
		lim, err := ratelimit.New(slowStore{memory.MustNew(), clk, 2 * time.Millisecond}, alg, ratelimit.WithClock(clk))
		if err != nil {
			t.Fatal(err)
		}
		got := paced(t, clk, time.Second, func() error { _, err := lim.Wait(context.Background(), "k"); return err })
		if share := float64(got) / 50; share < waitBar {
			t.Errorf("%v through a store answering in 2ms: %d Waits in 1s, %.3f of the rate; want at least %.2f", alg, got, share, waitBar)
		}
	}
}

// TestWaitLocalQuota paces one caller with Wait on a limiter with
// WithLocalQuota, on timers 5ms late: Wait books through Reserve, so it
// keeps whatever promise reservations keep under local quota, and here
// reaches the rate without going over it (the burst, and the rate over the
// span).
func TestWaitLocalQuota(t *testing.T) {
	for _, alg := range []algorithms.Algorithm{
		algorithms.GCRA(50, time.Second, 5),
		algorithms.TokenBucket(50, time.Second, 5),
		algorithms.FixedWindow(5, 100*time.Millisecond),
	} {
		clk := &lateClock{now: epoch, late: 5 * time.Millisecond}
		lim, err := ratelimit.New(memory.MustNew(), alg, ratelimit.WithClock(clk), ratelimit.WithLocalQuota(100, 100*time.Millisecond))
		if err != nil {
			t.Fatal(err)
		}
		got := paced(t, clk, time.Second, func() error { _, err := lim.Wait(context.Background(), "k"); return err })
		if got < 49 || got > 5+50+1 {
			t.Errorf("%v with WithLocalQuota, timers 5ms late: %d Waits in 1s; want 49 (0.97 of the rate) to 56 (the burst and the rate)", alg, got)
		}
	}
}

// TestTierWaitReachesRate checks that a Tier's Wait books its turn too,
// at the tier's numbers.
func TestTierWaitReachesRate(t *testing.T) {
	clk := &lateClock{now: epoch, late: 5 * time.Millisecond}
	lim, err := ratelimit.New(memory.MustNew(), algorithms.GCRA(1, time.Second, 1), ratelimit.WithClock(clk))
	if err != nil {
		t.Fatal(err)
	}
	fast, err := lim.Tier(algorithms.GCRA(50, time.Second, 1))
	if err != nil {
		t.Fatal(err)
	}
	got := paced(t, clk, time.Second, func() error { _, err := fast.Wait(context.Background(), "k"); return err })
	if got < 49 {
		t.Errorf("tier GCRA(50/s, burst 1) with timers 5ms late: %d Waits in 1s, want at least 49", got)
	}
}

// TestWaitWouldExceedConsumesNothing checks that a Wait that cannot be
// served before its deadline returns at once, saying so, and leaves the
// limit as it was: a bucket that cannot book that far books nothing, and
// the leaky bucket, which queues whatever the deadline, gives its turn
// back (before, the leaky bucket's Wait kept the turn it would not use).
func TestWaitWouldExceedConsumesNothing(t *testing.T) {
	for _, alg := range []algorithms.Algorithm{
		algorithms.GCRA(50, time.Second, 1),
		algorithms.TokenBucket(50, time.Second, 1),
		algorithms.LeakyBucket(50, time.Second, 2),
		algorithms.FixedWindow(1, 20*time.Millisecond),
	} {
		lim, c := newLimiter(t, alg)
		bg := context.Background()
		if _, err := lim.Wait(bg, "k"); err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithTimeout(bg, 5*time.Millisecond)
		_, err := lim.Wait(ctx, "k")
		cancel()
		// On the fake clock a Wait that slept would end with the context
		// (context.DeadlineExceeded, without "would exceed").
		if !errors.Is(err, context.DeadlineExceeded) || !strings.Contains(err.Error(), "would exceed") {
			t.Errorf("%v: Wait with a 5ms deadline, next turn 20ms out = %v; want at once an error that says it would exceed the deadline", alg, err)
		}
		// Nothing was taken: the next turn is still free.
		r, err := lim.Reserve(bg, "k", 1, time.Second)
		if err != nil {
			t.Fatal(err)
		}
		if strings.HasPrefix(alg.Name(), "fixed") {
			// A window algorithm serves only now.
			if r.OK() {
				t.Errorf("%v: Reserve in the full window admitted", alg)
			}
			c.Advance(20 * time.Millisecond)
			if d, _ := lim.Allow(bg, "k"); !d.Allowed {
				t.Errorf("%v: Allow in the next window denied: the failed Wait took it", alg)
			}
			continue
		}
		if !r.OK() || r.Delay() != 20*time.Millisecond {
			t.Errorf("%v: after a Wait that would exceed its deadline, Reserve = ok %v delay %v; want the turn 20ms out (the Wait took nothing)", alg, r.OK(), r.Delay())
		}
	}
}

// TestWaitCancelGivesTurnBack checks that a Wait whose context ends while
// it sleeps returns ctx's error and gives back the turn it booked, so the
// next caller gets that turn.
func TestWaitCancelGivesTurnBack(t *testing.T) {
	for _, alg := range []algorithms.Algorithm{
		algorithms.GCRA(50, time.Second, 1),
		algorithms.TokenBucket(50, time.Second, 1),
		algorithms.LeakyBucket(50, time.Second, 2),
	} {
		lim, c := newLimiter(t, alg)
		bg := context.Background()
		if _, err := lim.Wait(bg, "k"); err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithCancel(bg)
		done := waitFor(ctx, lim, "k", 1)
		for c.Waiters() == 0 {
			time.Sleep(time.Millisecond)
		}
		// The waiter holds the turn 20ms out.
		if r, _ := lim.Reserve(bg, "k", 1, 0); r.OK() {
			t.Errorf("%v: Reserve(now) while a Wait sleeps = admitted, want the turn held", alg)
		}
		c.Advance(5 * time.Millisecond)
		cancel()
		if err := <-done; !errors.Is(err, context.Canceled) {
			t.Errorf("%v: Wait cancelled while sleeping = %v, want context.Canceled", alg, err)
		}
		r, err := lim.Reserve(bg, "k", 1, time.Second)
		if err != nil {
			t.Fatal(err)
		}
		if !r.OK() || r.Delay() != 15*time.Millisecond {
			t.Errorf("%v: Reserve after a cancelled Wait = ok %v delay %v; want the cancelled turn, 15ms out", alg, r.OK(), r.Delay())
		}
	}
}

// TestWaitStoreFailure checks that Wait returns the store's error at once,
// with the failure policy's decision.
func TestWaitStoreFailure(t *testing.T) {
	down := errors.New("backend down")
	for _, c := range []struct {
		policy ratelimit.FailurePolicy
		want   bool
	}{{ratelimit.FailClosed, false}, {ratelimit.FailOpen, true}} {
		lim, err := ratelimit.New(failingStore{down}, algorithms.GCRA(1, time.Minute, 1), ratelimit.WithFailurePolicy(c.policy))
		if err != nil {
			t.Fatal(err)
		}
		start := time.Now()
		d, err := lim.Wait(context.Background(), "k")
		if !errors.Is(err, down) || d.Allowed != c.want || d.Source != ratelimit.SourceFailurePolicy {
			t.Errorf("policy %d: Wait on a failing store = %+v, %v; want allowed %v by the failure policy, with the store's error", c.policy, d, err, c.want)
		}
		if e := time.Since(start); e > 100*time.Millisecond {
			t.Errorf("policy %d: Wait on a failing store returned after %v, want at once", c.policy, e)
		}
	}
}

// laggingClock is the system clock with timers that fire lag late, as a
// loaded machine's do.
type laggingClock struct{ lag time.Duration }

func (laggingClock) Now() time.Time { return time.Now() }

func (c laggingClock) After(d time.Duration) <-chan time.Time {
	if d <= 0 {
		return time.After(0)
	}
	return time.After(d + c.lag)
}

// TestWaitRateRealClock paces one caller with Wait on GCRA(50/s, burst 1)
// on the memory store for two seconds of the system clock, and must reach
// 0.97 of the rate: on the system clock itself, whose timers fire late by
// a fraction of a millisecond on Linux even on a quiet machine, and on
// the system clock with every timer a further 2ms late, as under load.
// The old Wait, which slept RetryAfter and asked again, lost each timer's
// lateness on every turn: about 0.97 of the rate on a quiet machine, and
// 20/22 = 0.91 with the lag.
//
// A process stalled for longer than a turn (a loaded machine's scheduler
// can hold it for tens of milliseconds) loses those turns whatever Wait
// does, at burst 1, as x/time/rate's Wait does: the share is taken of the
// turns the process was awake for, a gap of g between two returns
// excusing g/20ms-2 turns (rounded down): the turns the stall held beyond
// the one it ended in, less the one the bucket admits at once after it.
// A gap shorter than three turns excuses nothing, so the old Wait's late
// timers are never excused.
func TestWaitRateRealClock(t *testing.T) {
	if testing.Short() {
		t.Skip("paces for two seconds")
	}
	const rate, span = 50, 2 * time.Second
	const turn = time.Second / rate
	for _, c := range []struct {
		name string
		opts []ratelimit.Option
	}{
		{"system", nil},
		{"system+2ms", []ratelimit.Option{ratelimit.WithClock(laggingClock{2 * time.Millisecond})}},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			lim, err := ratelimit.New(memory.MustNew(), algorithms.GCRA(rate, time.Second, 1), c.opts...)
			if err != nil {
				t.Fatal(err)
			}
			ctx, cancel := context.WithTimeout(context.Background(), span)
			defer cancel()
			n, excused, last := 0, 0, time.Now()
			for {
				_, err := lim.Wait(ctx, "k")
				if errors.Is(err, context.DeadlineExceeded) {
					break
				}
				if err != nil {
					t.Fatal(err)
				}
				now := time.Now()
				if n > 0 {
					excused += max(int(now.Sub(last)/turn)-2, 0)
				}
				n, last = n+1, now
			}
			turns := rate*span.Seconds() - float64(excused)
			share := float64(n) / turns
			t.Logf("GCRA(%d/s, burst 1), one caller, %v, %s clock: %d Waits returned, %.3f of the rate; %d turns excused (stalls longer than a turn), %.3f of the turns awake", rate, span, c.name, n, float64(n)/(rate*span.Seconds()), excused, share)
			if share < waitBar {
				t.Errorf("GCRA(%d/s, burst 1), one caller, %v, %s clock: %d Waits of %.0f turns awake, %.3f; want at least %.2f", rate, span, c.name, n, turns, share, waitBar)
			}
		})
	}
}

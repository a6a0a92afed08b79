package conformance

import (
	"context"
	"errors"
	"fmt"
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

// The fault groups (faults.go injects the faults): each kind of fault a bad
// day brings, and the rule that must hold under it. They test a store
// together with the limiter and the locker that use it: the bounds, the
// breaker, Do and the failure policy are the SDK's, and a store keeps them
// only when it honours its context and reports its failures as the Store
// contract says.

// limiter is what the fault groups call on a *ratelimit.Limiter.
type limiter interface {
	Allow(ctx context.Context, key string) (ratelimit.Decision, error)
	Peek(ctx context.Context, key string) (ratelimit.Decision, error)
	Reset(ctx context.Context, key string) error
	Wait(ctx context.Context, key string) (ratelimit.Decision, error)
}

// locker is what the fault groups call on a *lease.Locker.
type locker interface {
	TryAcquire(ctx context.Context, key string) (*lease.Lease, error)
	Acquire(ctx context.Context, key string) (*lease.Lease, error)
	Do(ctx context.Context, key string, fn func(ctx context.Context, le *lease.Lease) error) error
}

// subjects make the limiters and lockers the fault groups test: the SDK's
// own. The suite's own tests replace them with deliberately broken ones
// (export_test.go), to prove that the groups can fail.
var subjects = struct {
	// limiter is ratelimit.New.
	limiter func(s store.Store, alg algorithms.Algorithm, opts ...ratelimit.Option) (limiter, error)
	// breakerLimiter is ratelimit.New with WithCircuitBreaker(failures,
	// coolDown) and opts.
	breakerLimiter func(s store.Store, alg algorithms.Algorithm, failures int, coolDown time.Duration, opts ...ratelimit.Option) (limiter, error)
	// locker is lease.New.
	locker func(s store.Store, ttl time.Duration, opts ...lease.Option) (locker, error)
	// quotaLimiter is ratelimit.New with WithLocalQuota(maxShare,
	// lifetime) and opts (the LocalQuota group, localquota.go).
	quotaLimiter func(s store.Store, alg algorithms.Algorithm, maxShare int, lifetime time.Duration, opts ...ratelimit.Option) (limiter, error)
}{
	limiter: func(s store.Store, alg algorithms.Algorithm, opts ...ratelimit.Option) (limiter, error) {
		return ratelimit.New(s, alg, opts...)
	},
	breakerLimiter: func(s store.Store, alg algorithms.Algorithm, failures int, coolDown time.Duration, opts ...ratelimit.Option) (limiter, error) {
		return ratelimit.New(s, alg, append([]ratelimit.Option{ratelimit.WithCircuitBreaker(failures, coolDown)}, opts...)...)
	},
	locker: func(s store.Store, ttl time.Duration, opts ...lease.Option) (locker, error) {
		return lease.New(s, ttl, opts...)
	},
	quotaLimiter: func(s store.Store, alg algorithms.Algorithm, maxShare int, lifetime time.Duration, opts ...ratelimit.Option) (limiter, error) {
		return ratelimit.New(s, alg, append([]ratelimit.Option{ratelimit.WithLocalQuota(maxShare, lifetime)}, opts...)...)
	},
}

func newSubjectLimiter(t *testing.T, s store.Store, alg algorithms.Algorithm, opts ...ratelimit.Option) limiter {
	t.Helper()
	lim, err := subjects.limiter(s, alg, opts...)
	if err != nil {
		t.Fatalf("ratelimit.New(%v): %v", alg, err)
	}
	return lim
}

func newSubjectLocker(t *testing.T, s store.Store, ttl time.Duration, opts ...lease.Option) locker {
	t.Helper()
	lk, err := subjects.locker(s, ttl, opts...)
	if err != nil {
		t.Fatalf("lease.New(ttl %v): %v", ttl, err)
	}
	return lk
}

const (
	// defaultBound is the longest the suite lets a Limiter call with no
	// options wait on a store that does not answer: a limiter's default
	// store budget and a lease call's default call timeout, a second each.
	defaultBound = time.Second
	// shortBound is the budget the groups set where they set one
	// (ratelimit.WithStoreTimeout, lease.WithCallTimeout).
	shortBound = 250 * time.Millisecond
	// faultSlack is what the groups allow beyond a bound, for a loaded
	// machine running the tests under -race.
	faultSlack = 500 * time.Millisecond
	// policyBudget is FaultPolicy's store budget, which its hung calls
	// wait out.
	policyBudget = 50 * time.Millisecond
)

// boundedCall is one call that must return within bound, with an error.
type boundedCall struct {
	name  string
	bound time.Duration
	call  func() error
}

// returnsWithin runs the calls at once and checks that each returns an
// error within its bound plus faultSlack. rule names the rule. It waits at
// most the longest bound plus twice the slack.
func returnsWithin(t *testing.T, rule string, calls []boundedCall) {
	t.Helper()
	type result struct {
		i    int
		err  error
		took time.Duration
	}
	results := make(chan result, len(calls))
	longest := time.Duration(0)
	start := time.Now()
	for i, c := range calls {
		longest = max(longest, c.bound)
		go func() {
			err := c.call()
			results <- result{i, err, time.Since(start)}
		}()
	}
	timeout := time.NewTimer(longest + 2*faultSlack)
	defer timeout.Stop()
	done := make([]bool, len(calls))
	for range calls {
		select {
		case r := <-results:
			done[r.i] = true
			c := calls[r.i]
			switch {
			case r.took > c.bound+faultSlack:
				t.Errorf("%s returned after %v, want within %v (+%v slack) (rule: %s)", c.name, r.took.Round(time.Millisecond), c.bound, faultSlack, rule)
			case r.err == nil:
				t.Errorf("%s = nil error on a store that never answered, want the store's failure", c.name)
			case errors.Is(r.err, errHungUntilEnd):
				t.Errorf("%s = %v", c.name, r.err)
			}
		case <-timeout.C:
			var hung []string
			for i, c := range calls {
				if !done[i] {
					hung = append(hung, c.name)
				}
			}
			t.Errorf("on a store that never answers, still waiting after %v: %s (rule: %s)", time.Since(start).Round(time.Millisecond), strings.Join(hung, ", "), rule)
			return
		}
	}
}

// hungCalls returns every Limiter and lease call on s, which is about to
// stop answering, with the bound each must keep: with no options (the
// SDK's default bounds) and with a budget of shortBound (the limiter's
// WithStoreTimeout, the locker's WithCallTimeout). It takes the leases that
// Extend and Release need while s still answers.
func hungCalls(t *testing.T, s store.Store) []boundedCall {
	t.Helper()
	ctx := context.Background()
	alg := algorithms.GCRA(10, time.Second, 10)
	var calls []boundedCall
	for _, v := range []struct {
		name              string
		limBound, lkBound time.Duration
		limOpts           []ratelimit.Option
		lkOpts            []lease.Option
	}{
		{"no options", defaultBound, time.Second, nil, nil},
		{"store timeout", shortBound, shortBound, []ratelimit.Option{ratelimit.WithStoreTimeout(shortBound), ratelimit.WithName("budget")}, []lease.Option{lease.WithCallTimeout(shortBound)}},
	} {
		lim := newSubjectLimiter(t, s, alg, v.limOpts...)
		lk := newSubjectLocker(t, s, leaseTTL, append(v.lkOpts, lease.WithName("hung-"+strings.ReplaceAll(v.name, " ", "-")))...)
		held, err := lk.TryAcquire(ctx, "held")
		if err != nil {
			t.Fatalf("locker.TryAcquire before the store hangs: %v", err)
		}
		add := func(name string, call func() error) {
			bound := v.limBound
			if !strings.HasPrefix(name, "lim.") {
				bound = v.lkBound
			}
			calls = append(calls, boundedCall{fmt.Sprintf("%s: %s", v.name, name), bound, call})
		}
		add("lim.Allow(key)", func() error { _, err := lim.Allow(ctx, "k"); return err })
		add("lim.Peek(key)", func() error { _, err := lim.Peek(ctx, "k"); return err })
		add("lim.Reset(key)", func() error { return lim.Reset(ctx, "k") })
		add("lim.Wait(key)", func() error { _, err := lim.Wait(ctx, "k"); return err })
		add("locker.TryAcquire(key)", func() error { _, err := lk.TryAcquire(ctx, "free"); return err })
		add("locker.Acquire(key)", func() error { _, err := lk.Acquire(ctx, "free2"); return err })
		add("locker.Do(key)", func() error {
			return lk.Do(ctx, "free3", func(context.Context, *lease.Lease) error { return nil })
		})
		add("lease.Extend()", func() error { return held.Extend(ctx) })
		add("lease.Release()", func() error { return held.Release(ctx) })
	}
	return calls
}

// storeCalls returns the store's own calls, each under a context with a
// deadline of shortBound, which they must keep with an error wrapping
// context.DeadlineExceeded: the store honours its context, so the SDK's
// bounds cost nothing but the call.
func storeCalls(s store.Store) []boundedCall {
	key := store.Key{Namespace: "frozen", ID: "k"}
	alg := algorithms.GCRA(10, time.Second, 10)
	now := epoch.UnixMicro()
	call := func(fn func(ctx context.Context) error) func() error {
		return func() error {
			ctx, cancel := context.WithTimeout(context.Background(), shortBound)
			defer cancel()
			err := fn(ctx)
			if err != nil && !errors.Is(err, context.DeadlineExceeded) {
				return fmt.Errorf("%w (want an error wrapping context.DeadlineExceeded: the caller's deadline ended the call)", err)
			}
			return err
		}
	}
	calls := []boundedCall{
		{"deadline 250ms: store.Update", shortBound, call(func(ctx context.Context) error {
			return s.Update(ctx, key, now, func(cur []byte, now int64) ([]byte, int64, error) { return nil, 0, nil })
		})},
		{"deadline 250ms: store.Delete", shortBound, call(func(ctx context.Context) error { return s.Delete(ctx, key) })},
	}
	if d, ok := s.(store.Decider); ok {
		calls = append(calls, boundedCall{"deadline 250ms: store.Decide", shortBound, call(func(ctx context.Context) error {
			_, err := d.Decide(ctx, key, alg, algorithms.Request{Now: now, Cost: 1})
			return err
		})})
	}
	if r, ok := s.(leasewire.Runner); ok {
		calls = append(calls, boundedCall{"deadline 250ms: store.RunLease", shortBound, call(func(ctx context.Context) error {
			_, err := r.RunLease(ctx, store.Key{Namespace: "frozen" + leasewire.NamespaceSuffix, ID: "k"}, now, leasewire.Request{Op: leasewire.OpAcquire, Owner: leasewire.Token{1}, TTL: 1000})
			return err
		})})
	}
	return calls
}

// testFaultHungStore checks that no Limiter or lease call waits on a store
// that stops answering past its bound: the SDK's default bound with no
// options, and the budget set. "wrapper" hangs every call in the suite's
// fault wrapper, which gives up when the context ends, as a store must;
// "ignores-ctx" hangs them for good, as a store whose client ignores its
// context would, and the SDK must still stop waiting at the bound;
// "frozen" freezes the backend itself (Harness.Freeze), where the store
// must honour the context for the bound to hold.
func testFaultHungStore(t *testing.T, newHarness func(*testing.T) Harness) {
	const rule = "no call waits on a store past a bound, by default"
	// The two subtests wait out the same bounds: side by side, they take
	// the time of one.
	t.Run("wrapper", func(t *testing.T) {
		t.Parallel()
		h := newHarness(t)
		s, f := withFaults(t, h.Store)
		calls := hungCalls(t, s)
		f.set(faultHang, -1, 0, nil)
		returnsWithin(t, rule, calls)
	})
	t.Run("ignores-ctx", func(t *testing.T) {
		t.Parallel()
		h := newHarness(t)
		s, f := withFaults(t, h.Store)
		calls := hungCalls(t, s)
		f.set(faultHangIgnoringCtx, -1, 0, nil)
		returnsWithin(t, rule+", even when the store ignores its context", calls)
	})
	t.Run("frozen", func(t *testing.T) {
		t.Parallel()
		h := newHarness(t)
		if h.Freeze == nil {
			t.Skip("harness has no Freeze: cannot stop the backend answering")
		}
		s, freeze := h.Freeze(t)
		calls := append(hungCalls(t, s), storeCalls(s)...)
		freeze()
		returnsWithin(t, rule+"; the store honours its context when its server stops answering", calls)
	})
	t.Run("reconnect", func(t *testing.T) {
		t.Parallel()
		h := newHarness(t)
		if h.Freeze == nil {
			t.Skip("harness has no Freeze: cannot stop the backend answering")
		}
		testFaultReconnect(t, h)
	})
}

// testFaultReconnect checks that a store's call ends with its own context
// while it waits for a connection that another call, with a later
// deadline, is opening to a server that stopped answering: a lone call's
// deadline ends first (a client drops a connection whose reply never
// came), then a patient call starts (and may open another), and then
// impatient ones, which must not wait for it. valkey-go's calls did wait
// (a 250ms call returned after a second).
func testFaultReconnect(t *testing.T, h Harness) {
	const rule = "a call waiting for a connection another call is opening still ends with its own context"
	s, freeze := h.Freeze(t)
	key := store.Key{Namespace: "reconnect", ID: "k"}
	if err := s.Delete(context.Background(), key); err != nil {
		t.Fatalf("store.Delete before the backend stops answering: %v", err)
	}
	freeze()
	// Several of each kind, one after another, so that a client that
	// spreads calls over connections drops, reopens and waits on each.
	const n = 4
	lone := boundedCall{"a lone store.Delete with a 100ms deadline", 100 * time.Millisecond, func() error {
		ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
		defer cancel()
		return s.Delete(ctx, key)
	}}
	for range n {
		returnsWithin(t, rule, []boundedCall{lone})
	}
	const patientBound = 6 * shortBound
	patient := make(chan error, n)
	for range n {
		go func() {
			ctx, cancel := context.WithTimeout(context.Background(), patientBound)
			defer cancel()
			patient <- s.Delete(ctx, key)
		}()
	}
	time.Sleep(20 * time.Millisecond) // the patient calls first
	var calls []boundedCall
	for range 2 * n {
		calls = append(calls, storeCalls(s)...)
	}
	returnsWithin(t, rule, calls)
	wait := time.After(patientBound + faultSlack)
	for range n {
		select {
		case err := <-patient:
			if err == nil {
				t.Errorf("a patient store.Delete = nil error on a store that never answered, want the store's failure")
			}
		case <-wait:
			t.Errorf("a patient store.Delete with a %v deadline has not returned after %v (rule: %s)", patientBound, patientBound+faultSlack, rule)
			return
		}
	}
}

// testFaultBreaker checks that the circuit breaker opens only on the
// store's faults: callers whose own deadlines end, even when the store's
// error reaches them before their context reports it, never open it; a
// store that fails does.
func testFaultBreaker(t *testing.T, newHarness func(*testing.T) Harness) {
	ctx := context.Background()
	const failures, limit = 3, 20
	alg := algorithms.FixedWindow(limit, time.Hour)
	newLim := func(t *testing.T, s store.Store) limiter {
		t.Helper()
		lim, err := subjects.breakerLimiter(s, alg, failures, time.Minute, ratelimit.WithFailurePolicy(ratelimit.FailOpen))
		if err != nil {
			t.Fatalf("ratelimit.New with a circuit breaker: %v", err)
		}
		return lim
	}
	t.Run("caller-deadlines", func(t *testing.T) {
		h := newHarness(t)
		s, f := withFaults(t, h.Store)
		lim := newLim(t, s)
		// Impatient callers with 2ms deadlines, each answered with an
		// error wrapping context.DeadlineExceeded as its deadline
		// passes; a patient caller with no deadline beside them.
		f.set(faultCallerDeadline, -1, 0, nil)
		stop := make(chan struct{})
		var impatient atomic.Int64
		var wg sync.WaitGroup
		for w := 0; w < 8; w++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for {
					select {
					case <-stop:
						return
					default:
					}
					cctx, cancel := context.WithTimeout(ctx, 2*time.Millisecond)
					_, _ = lim.Allow(cctx, fmt.Sprintf("impatient-%d", w))
					cancel()
					impatient.Add(1)
				}
			}()
		}
		fromStore := 0
		var problems []string
		deadline := time.Now().Add(10 * time.Second)
		for i := 0; i <= limit && time.Now().Before(deadline); i++ {
			for impatient.Load() < int64(8*(i+1)) && time.Now().Before(deadline) {
				time.Sleep(200 * time.Microsecond) // keep the impatient callers busy between the patient one's calls
			}
			d, err := lim.Allow(ctx, "patient")
			switch {
			case d.Source == ratelimit.SourceStore && err == nil:
				if d.Allowed {
					fromStore++
				}
			case len(problems) < 3:
				problems = append(problems, fmt.Sprintf("request %d: %s from %v, error %v", i+1, verdict(d.Allowed), d.Source, err))
			}
		}
		close(stop)
		wg.Wait()
		if n := impatient.Load(); n < 8*limit {
			t.Fatalf("the impatient callers made %d calls in 10s, want at least %d beside the patient caller's", n, 8*limit)
		}
		if fromStore != limit || len(problems) > 0 {
			t.Errorf("a patient caller beside %d impatient calls with 2ms deadlines got %d of its limit %d admitted by the store, want all %d; first others: %s (rule: the breaker opens only on store faults, never on a caller's own deadline)",
				impatient.Load(), fromStore, limit, limit, strings.Join(problems, "; "))
		}
		// The impatient callers' deadlines did not open the breaker: a
		// store failure now counts from zero.
		f.set(faultFail, failures-1, 0, nil)
		for i := 0; i < failures-1; i++ {
			_, _ = lim.Allow(ctx, "after")
		}
		if d, err := lim.Allow(ctx, "after"); errors.Is(err, ratelimit.ErrCircuitOpen) || d.Source != ratelimit.SourceStore {
			t.Errorf("lim.Allow(key) after %d store failures, fewer than the breaker's %d, = %v from %v, want the store's decision (rule: callers' deadlines are not counted as failures)", failures-1, failures, err, d.Source)
		}
	})
	t.Run("store-faults", func(t *testing.T) {
		h := newHarness(t)
		s, f := withFaults(t, h.Store)
		lim := newLim(t, s)
		f.set(faultFail, failures, 0, nil)
		for i := 0; i < failures; i++ {
			d, err := lim.Allow(ctx, "k")
			if !errors.Is(err, errStoreFault) || !d.Allowed || d.Source != ratelimit.SourceFailurePolicy {
				t.Errorf("lim.Allow(key) #%d on a failing store with FailOpen = %s from %v, error %v; want allowed from failure_policy with the store's error", i+1, verdict(d.Allowed), d.Source, err)
			}
		}
		// The store works again, but the breaker is open for its cool-down.
		d, err := lim.Allow(ctx, "k")
		if !errors.Is(err, ratelimit.ErrCircuitOpen) || !errors.Is(err, errStoreFault) || !d.Allowed || d.Source != ratelimit.SourceFailurePolicy {
			t.Errorf("lim.Allow(key) after %d store failures = %s from %v, error %v; want allowed from failure_policy with an error wrapping ErrCircuitOpen and the store's fault (rule: real store faults open the breaker)", failures, verdict(d.Allowed), d.Source, err)
		}
	})
}

// testFaultDoSlowReply checks that Do never runs the work on a lease that
// may have run out: when the acquire's reply arrives after the lease's
// deadline, or with less than a safety margin of it left, the work does not
// start with a live context, and no other holder gets the key while the
// work's context is live. The locker's clock is a fake one that the slow
// reply moves on, so the group takes no real time.
func testFaultDoSlowReply(t *testing.T, newHarness func(*testing.T) Harness) {
	h := newHarness(t)
	s, f := withFaults(t, h.Store)
	fc := clock.NewFake(epoch)
	lk := newSubjectLocker(t, s, leaseTTL, lease.WithClock(fc))
	other := newLocker(t, h.Store, lease.WithClock(fc), lease.WithPollInterval(time.Millisecond))
	for _, c := range []struct {
		name string
		late time.Duration // how long the acquire's reply takes on the locker's clock
	}{
		{"past-deadline", leaseTTL + time.Millisecond},
		{"within-margin", leaseTTL - leaseTTL/40},
	} {
		t.Run(c.name, func(t *testing.T) {
			key := "slow-" + c.name
			f.set(faultLate, 1, 0, func() { fc.Advance(c.late) })
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			var problems []string
			err := lk.Do(ctx, key, func(work context.Context, le *lease.Lease) error {
				if work.Err() != nil {
					return nil // cancelled before it started: as it should be
				}
				if left := le.Deadline().Sub(fc.Now()); left < leaseTTL/20 {
					problems = append(problems, fmt.Sprintf("the work started with a live context when %v of its %v lease was left", left, leaseTTL))
				}
				if ole, err := other.TryAcquire(ctx, key); err == nil {
					if work.Err() == nil {
						problems = append(problems, fmt.Sprintf("another locker took the key (fence %d) while the work's context was live (fence %d)", ole.Fence(), le.Fence()))
					}
					_ = ole.Release(ctx)
				}
				return nil
			})
			for _, p := range problems {
				t.Errorf("locker.Do(key) whose acquire's reply took %v of a %v lease: %s (rule: Do never runs the work past its lease)", c.late, leaseTTL, p)
			}
			if err != nil && !errors.Is(err, lease.ErrLost) {
				t.Errorf("locker.Do(key) whose acquire's reply came too late = %v, want nil (a later lease) or an error wrapping ErrLost", err)
			}
			f.clear()
		})
	}
}

// testFaultDoPanic checks that a panic in Do's work releases the lease
// (another locker gets the key at once) and reaches the caller with its
// value, and that a nil function is an error, not a panic.
func testFaultDoPanic(t *testing.T, newHarness func(*testing.T) Harness) {
	h := newHarness(t)
	fc := clock.NewFake(epoch)
	lk := newSubjectLocker(t, h.Store, leaseTTL, lease.WithClock(fc))
	other := newLocker(t, h.Store, lease.WithClock(fc))
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	type boom struct{ n int }
	value := &boom{42}
	var doErr error
	got := func() (v any) {
		defer func() { v = recover() }()
		doErr = lk.Do(ctx, "panic", func(context.Context, *lease.Lease) error { panic(value) })
		return nil
	}()
	if got != value {
		t.Errorf("locker.Do(key, work that panics with %p) = panic %v, error %v; want the same panic again (rule: Do re-panics)", value, got, doErr)
	}
	if _, err := other.TryAcquire(ctx, "panic"); err != nil {
		t.Errorf("another locker's TryAcquire(key) right after Do's work panicked = %v, want the lease (rule: Do releases on panic)", err)
	}
	var nilErr error
	got = func() (v any) {
		defer func() { v = recover() }()
		nilErr = lk.Do(ctx, "nil-work", nil)
		return nil
	}()
	if got != nil || nilErr == nil {
		t.Errorf("locker.Do(key, nil) = panic %v, error %v; want an error and no panic", got, nilErr)
	}
	if _, err := other.TryAcquire(ctx, "nil-work"); err != nil {
		t.Errorf("another locker's TryAcquire(key) after locker.Do(key, nil) = %v, want the lease (rule: a nil function takes nothing)", err)
	}
}

// testFaultPolicy checks that the failure policy decides as documented
// under each fault: FailClosed denies and FailOpen admits, from
// SourceFailurePolicy, with the store's error returned (errors.Is reaches
// the fault, or context.DeadlineExceeded when a budget ran out); a call
// that failed after its write consumed at most once; a lease call returns
// the store's error, never ErrHeld; and a store that is slow but answers
// within the bounds decides.
func testFaultPolicy(t *testing.T, newHarness func(*testing.T) Harness) {
	ctx := context.Background()
	const limit = 5
	alg := algorithms.FixedWindow(limit, time.Hour)
	for _, c := range []struct {
		name  string
		fault fault
		want  error
	}{
		{"fails", faultFail, errStoreFault},
		{"fails-after-write", faultFailAfterWrite, errFailedAfterWrite},
		{"hangs", faultHang, context.DeadlineExceeded},
	} {
		t.Run(c.name, func(t *testing.T) {
			h := newHarness(t)
			s, f := withFaults(t, h.Store)
			for _, p := range []struct {
				policy ratelimit.FailurePolicy
				name   string
			}{{ratelimit.FailClosed, "closed"}, {ratelimit.FailOpen, "open"}} {
				opts := []ratelimit.Option{ratelimit.WithFailurePolicy(p.policy), ratelimit.WithName("policy-" + p.name)}
				lim := newSubjectLimiter(t, s, alg, append(opts, ratelimit.WithStoreTimeout(policyBudget))...)
				plain := newSubjectLimiter(t, s, alg, opts...) // reads what the faulted calls left
				key := "policy-" + p.name
				f.set(c.fault, 2, 0, nil)
				for _, call := range []struct {
					name string
					fn   func() (ratelimit.Decision, error)
				}{
					{"lim.Allow(key)", func() (ratelimit.Decision, error) { return lim.Allow(ctx, key) }},
					{"lim.Peek(key)", func() (ratelimit.Decision, error) { return lim.Peek(ctx, key) }},
				} {
					d, err := call.fn()
					want := p.policy == ratelimit.FailOpen
					if d.Allowed != want || d.Source != ratelimit.SourceFailurePolicy || !errors.Is(err, c.want) {
						t.Errorf("%s with Fail%s on a store that %s = %s from %v, error %v; want %s from failure_policy with an error wrapping %v (rule: the failure policy decides, and the error reaches the caller)",
							call.name, strings.ToUpper(p.name[:1])+p.name[1:], c.name, verdict(d.Allowed), d.Source, err, verdict(want), c.want)
					}
				}
				f.clear()
				d, err := plain.Peek(ctx, key)
				if err != nil {
					t.Fatalf("lim.Peek(key) once the store answers again: %v", err)
				}
				if d.Remaining < limit-1 {
					t.Errorf("after one failed lim.Allow(key), lim.Peek(key) = remaining %d of %d, want at least %d (rule: a failed call consumes at most once)", d.Remaining, limit, limit-1)
				}
			}
			if c.fault == faultFail {
				lk := newSubjectLocker(t, s, leaseTTL)
				f.set(c.fault, -1, 0, nil)
				if _, err := lk.TryAcquire(ctx, "lease"); !errors.Is(err, c.want) || errors.Is(err, lease.ErrHeld) {
					t.Errorf("locker.TryAcquire(key) on a store that %s = %v, want the store's error (not ErrHeld)", c.name, err)
				}
				f.clear()
			}
		})
	}
	t.Run("slow-within-bound", func(t *testing.T) {
		// A store that is slow but answers within the bounds decides:
		// the bounds never fail a working store.
		h := newHarness(t)
		s, f := withFaults(t, h.Store)
		lim := newSubjectLimiter(t, s, alg, ratelimit.WithStoreTimeout(shortBound))
		lk := newSubjectLocker(t, s, leaseTTL, lease.WithCallTimeout(shortBound))
		const delay = shortBound / 5
		f.set(faultSlow, -1, delay, nil)
		if d, err := lim.Allow(ctx, "slow"); err != nil || !d.Allowed || d.Source != ratelimit.SourceStore {
			t.Errorf("lim.Allow(key) on a store that answers in %v, with a budget of %v = %s from %v, error %v; want allowed from the store (rule: a bound never fails a store that answers within it)", delay, shortBound, verdict(d.Allowed), d.Source, err)
		}
		if le, err := lk.TryAcquire(ctx, "slow"); err != nil {
			t.Errorf("locker.TryAcquire(key) on a store that answers in %v, with a call timeout of %v = %v; want the lease (rule: a bound never fails a store that answers within it)", delay, shortBound, err)
		} else if err := le.Release(ctx); err != nil {
			t.Errorf("lease.Release() on a store that answers in %v, with a call timeout of %v = %v", delay, shortBound, err)
		}
	})
}

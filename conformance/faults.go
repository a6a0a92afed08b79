package conformance

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/ratelimitkit/ratelimit/algorithms"
	"github.com/ratelimitkit/ratelimit/lease/leasewire"
	"github.com/ratelimitkit/ratelimit/store"
)

// The fault groups put the store under test behind a wrapper that injects
// one kind of fault at a time, as a bad day brings them: a store that
// hangs, one that answers slowly, one whose reply arrives after the
// caller's deadline, one that fails, and one that fails after its write
// took effect. The wrapper is around the real store the harness gives: the
// calls that are not faulted, and the write of a fault that lets it
// happen, reach the real backend.
//
// What the wrapper forwards: Update, Delete, store.Decider and
// leasewire.Runner, each with the fault applied, so that a limiter and a
// locker take the same path through the wrapper as through the store
// itself, and store.ServerClocker's answer (false for a store without
// it), so that ratelimit.New and lease.New judge the clock as they would on
// the store. What it hides: the memory store's register-passing fast path
// (unexported: the limiter then uses Decide), and store.Exporter and
// Importer (the fault groups move no state). A user's own wrapper around a store must
// forward the optional interfaces it means to keep in the same way, or a
// limiter silently takes the slower path (see docs/writing-a-store.md).

// fault is one kind of fault the wrapper injects.
type fault int

const (
	faultNone fault = iota
	// faultHang blocks until the caller's context ends, and returns its
	// error wrapped, as a store whose server stopped answering does when
	// it honours the context.
	faultHang
	// faultHangIgnoringCtx blocks until the test ends, whatever the
	// context says, as a store whose client ignores it does on a hung
	// server.
	faultHangIgnoringCtx
	// faultSlow waits delay (giving up when the context ends first),
	// then calls the store.
	faultSlow
	// faultLate calls the store, which applies the request, whatever the
	// context says, and then holds the reply until late has run: the
	// groups move the caller's fake clock there, so that the reply
	// arrives after the caller's deadline (a lease's, say).
	faultLate
	// faultFail fails at once with errStoreFault, touching nothing.
	faultFail
	// faultFailAfterWrite calls the store, which applies the request,
	// and then returns errFailedAfterWrite instead of its answer.
	faultFailAfterWrite
	// faultCallerDeadline answers a call whose context has a deadline
	// less than callerDeadlineWindow away with an error wrapping
	// context.DeadlineExceeded at that deadline, before the context
	// itself may report it, as a batch or a connection deadline does;
	// other calls reach the store.
	faultCallerDeadline
)

// callerDeadlineWindow is how near a caller's deadline must be for
// faultCallerDeadline to answer at it.
const callerDeadlineWindow = 100 * time.Millisecond

var (
	// errStoreFault is the store failure the wrapper injects: what a
	// refused connection or a server error looks like to the limiter.
	errStoreFault = errors.New("conformance: injected store fault (the store failed)")
	// errFailedAfterWrite is the failure the wrapper returns after the
	// store applied the request.
	errFailedAfterWrite = errors.New("conformance: injected store fault after the write took effect")
	// errHungUntilEnd is returned by a hung call the test released as it
	// ended, never to a call the groups still look at.
	errHungUntilEnd = errors.New("conformance: hung store released at the end of the test")
)

// faults is the state of one wrapper: the fault to inject and on how many
// calls. It is safe for concurrent use.
type faults struct {
	mu    sync.Mutex
	kind  fault
	delay time.Duration
	late  func() // faultLate: runs before the reply is returned
	left  int    // calls the fault still applies to; negative: all

	end chan struct{} // closed when the test ends: hung calls return
}

// set makes the next n calls (every call when n < 0) fail with kind; the
// calls after them reach the store.
func (f *faults) set(kind fault, n int, delay time.Duration, late func()) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.kind, f.left, f.delay, f.late = kind, n, delay, late
}

// clear stops injecting faults.
func (f *faults) clear() { f.set(faultNone, 0, 0, nil) }

// take returns the fault for one call.
func (f *faults) take() (fault, time.Duration, func()) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.kind == faultNone || f.left == 0 {
		return faultNone, 0, nil
	}
	if f.left > 0 {
		f.left--
	}
	return f.kind, f.delay, f.late
}

// apply runs call, the store's method, under the fault for this call.
func (f *faults) apply(ctx context.Context, call func(ctx context.Context) error) error {
	kind, delay, late := f.take()
	switch kind {
	case faultHang:
		select {
		case <-ctx.Done():
			return fmt.Errorf("conformance: hung store gave up: %w", ctx.Err())
		case <-f.end:
			return errHungUntilEnd
		}
	case faultHangIgnoringCtx:
		<-f.end
		return errHungUntilEnd
	case faultSlow:
		t := time.NewTimer(delay)
		defer t.Stop()
		select {
		case <-ctx.Done():
			return fmt.Errorf("conformance: slow store gave up: %w", ctx.Err())
		case <-f.end:
			return errHungUntilEnd
		case <-t.C:
		}
		return call(ctx)
	case faultLate:
		err := call(context.WithoutCancel(ctx))
		if late != nil {
			late()
		}
		return err
	case faultFail:
		return errStoreFault
	case faultFailAfterWrite:
		if err := call(ctx); err != nil {
			return err
		}
		return errFailedAfterWrite
	case faultCallerDeadline:
		dl, ok := ctx.Deadline()
		if !ok || time.Until(dl) > callerDeadlineWindow {
			return call(ctx)
		}
		// Wake at the deadline by this machine's clock, not by the
		// context: the error reaches the caller as its deadline passes,
		// which may be before ctx.Err reports it.
		for d := time.Until(dl); d > 0; d = time.Until(dl) {
			time.Sleep(d)
		}
		return fmt.Errorf("conformance: the store's reply came after the caller's deadline: %w", context.DeadlineExceeded)
	}
	return call(ctx)
}

// faultStore is a store behind a fault injector. Use withFaults, which
// adds the optional interfaces the store has.
type faultStore struct {
	s store.Store
	f *faults
}

func (w faultStore) Update(ctx context.Context, key store.Key, now int64, fn store.UpdateFunc) error {
	return w.f.apply(ctx, func(ctx context.Context) error { return w.s.Update(ctx, key, now, fn) })
}

// ServerClock forwards the store's answer (false if it has none).
func (w faultStore) ServerClock() bool {
	sc, ok := w.s.(store.ServerClocker)
	return ok && sc.ServerClock()
}

func (w faultStore) Delete(ctx context.Context, key store.Key) error {
	return w.f.apply(ctx, func(ctx context.Context) error { return w.s.Delete(ctx, key) })
}

// faultDecider forwards store.Decider.
type faultDecider struct {
	faultStore
	d store.Decider
}

func (w faultDecider) Decide(ctx context.Context, key store.Key, alg algorithms.Algorithm, req algorithms.Request) (algorithms.Decision, error) {
	var d algorithms.Decision
	err := w.f.apply(ctx, func(ctx context.Context) error {
		var err error
		d, err = w.d.Decide(ctx, key, alg, req)
		return err
	})
	return d, err
}

// faultRunner forwards leasewire.Runner.
type faultRunner struct {
	faultStore
	r leasewire.Runner
}

func (w faultRunner) RunLease(ctx context.Context, key store.Key, now int64, req leasewire.Request) (leasewire.Result, error) {
	return runLease(w.f, w.r, ctx, key, now, req)
}

// faultDeciderRunner forwards both.
type faultDeciderRunner struct {
	faultDecider
	r leasewire.Runner
}

func (w faultDeciderRunner) RunLease(ctx context.Context, key store.Key, now int64, req leasewire.Request) (leasewire.Result, error) {
	return runLease(w.f, w.r, ctx, key, now, req)
}

func runLease(f *faults, r leasewire.Runner, ctx context.Context, key store.Key, now int64, req leasewire.Request) (leasewire.Result, error) {
	var res leasewire.Result
	err := f.apply(ctx, func(ctx context.Context) error {
		var err error
		res, err = r.RunLease(ctx, key, now, req)
		return err
	})
	return res, err
}

// withFaults returns s behind a fault injector that injects nothing until
// told, with the optional interfaces s has (see the top of this file).
// Calls hung when t ends are released then.
func withFaults(t *testing.T, s store.Store) (store.Store, *faults) {
	f := &faults{end: make(chan struct{})}
	t.Cleanup(func() { close(f.end) })
	base := faultStore{s, f}
	d, isDecider := s.(store.Decider)
	r, isRunner := s.(leasewire.Runner)
	switch {
	case isDecider && isRunner:
		return faultDeciderRunner{faultDecider{base, d}, r}, f
	case isDecider:
		return faultDecider{base, d}, f
	case isRunner:
		return faultRunner{base, r}, f
	}
	return base, f
}

package lease

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/ratelimitkit/ratelimit"
)

// Do runs fn while holding key's lease, so the TTL only bounds how long a
// crashed worker blocks the others:
//
//   - it acquires the lease, waiting like Acquire;
//   - it starts fn only when at least the locker's margin (see WithMargin)
//     of the lease remains when the acquire's reply arrives, judged on the
//     locker's clock (the system clock's monotonic reading) from before the
//     request was sent; a reply that came later than that (a slow store, a
//     paused process) makes Do release the lease and return an error
//     wrapping ErrLost without calling fn;
//   - while fn runs, it extends the lease each time a third of the TTL has
//     passed since the last extend was sent (sooner when the margin is
//     large);
//   - it cancels fn's context the margin before the lease's deadline when
//     renewal fails, is refused, or gets no answer, with a cause wrapping
//     ErrLost; and when the locker's maximum hold time passes
//     (WithMaxHold), with cause ErrMaxHold;
//   - when fn returns, panics or calls runtime.Goexit, it stops renewing,
//     ends fn's context (for whatever fn left running on it) and releases
//     the lease (within the call timeout, whatever ctx says),
//     so that another worker can take the key at once; a panic then goes
//     on with its own value.
//
// fn's context reports, through its Deadline method, the time on the
// locker's clock by which fn must be done: the lease's current Deadline
// less the margin (earlier when the maximum hold time or ctx's own
// deadline comes first). It moves later each time renewal succeeds: a
// context's deadline cannot be extended, so the work's context reads it
// afresh on each call, and a context derived from it with
// context.WithTimeout or WithDeadline keeps the deadline it read when it
// was made. It is never later than when the lease could run out less the
// margin.
//
// fn must return soon after its context ends; whatever it writes after
// that is protected only by the fence. Do returns fn's error, joined with
// the cause of the cancellation when the lease was lost or held too long,
// and with Release's error; or Acquire's error when fn never ran; or an
// error wrapping ratelimit.ErrInvalidParams when fn is nil.
func (l *Locker) Do(ctx context.Context, key string, fn func(ctx context.Context, le *Lease) error) error {
	if fn == nil {
		return fmt.Errorf("%w: lease: Do on %q with a nil function", ratelimit.ErrInvalidParams, key)
	}
	le, err := l.Acquire(ctx, key)
	if err != nil {
		return err
	}
	if left := le.Deadline().Sub(l.clock.Now()); left < l.margin {
		// The reply came too late to use: the lease may have run out, or
		// will before the work could notice.
		rerr := le.release(ctx)
		return errors.Join(fmt.Errorf("%w: %q: the acquire's reply left %v of the lease, less than the margin %v; the work did not start",
			ErrLost, key, left.Round(time.Microsecond), l.margin), rerr)
	}
	cctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	work := &workContext{Context: cctx, le: le}
	if l.maxHold > 0 {
		work.hold = l.clock.Now().Add(l.maxHold)
	}
	stop := make(chan struct{})
	renewed := make(chan struct{})
	go func() {
		defer close(renewed)
		le.renew(cancel, stop)
	}()
	// When fn panics (or calls runtime.Goexit), this deferred call stops
	// renewal and releases the lease while the panic goes on, with its own
	// value and stack.
	returned := false
	defer func() {
		if !returned {
			close(stop)
			<-renewed
			cancel(nil)
			_ = le.release(ctx) // the panic is what the caller hears of
		}
	}()
	ferr := fn(work, le)
	returned = true
	close(stop)
	<-renewed
	cause := context.Cause(cctx)
	// End the work's context before the lease goes: whatever fn started
	// on it stops before another worker can take the key.
	cancel(nil)
	rerr := le.release(ctx)
	switch {
	case errors.Is(cause, ErrLost):
		return errors.Join(ferr, cause) // Release says the same again
	case errors.Is(cause, ErrMaxHold):
		return errors.Join(ferr, cause, rerr)
	}
	return errors.Join(ferr, rerr)
}

// release releases le for Do, also when ctx has ended: within the call
// timeout, which Release applies.
func (le *Lease) release(ctx context.Context) error {
	return le.Release(context.WithoutCancel(ctx))
}

// workContext is Do's work's context: its Deadline is the lease's current
// safe deadline, which renewal moves.
type workContext struct {
	context.Context
	le   *Lease
	hold time.Time // the maximum hold time's end, or zero
}

// Deadline returns the lease's Deadline less the margin, or the end of the
// maximum hold time, or the parent's deadline, whichever comes first.
func (c *workContext) Deadline() (time.Time, bool) {
	d := c.le.safe()
	if !c.hold.IsZero() && c.hold.Before(d) {
		d = c.hold
	}
	if p, ok := c.Context.Deadline(); ok && p.Before(d) {
		d = p
	}
	return d, true
}

// safe returns when Do's work must be done: the lease's Deadline less the
// locker's margin.
func (le *Lease) safe() time.Time { return le.Deadline().Add(-le.l.margin) }

// renew extends le while stop is open, and cancels the work when the lease
// might run out or has been held too long.
func (le *Lease) renew(cancel context.CancelCauseFunc, stop <-chan struct{}) {
	l := le.l
	c := l.clock
	ttl := l.ttl
	// Renew once a third of the TTL has passed, or half of what the
	// margin leaves, whichever comes first.
	renewAhead := max(2*ttl/3, l.margin+(ttl-l.margin)/2)
	var maxHold <-chan time.Time
	if l.maxHold > 0 {
		maxHold = c.After(l.maxHold)
	}
	var lastErr error
	for {
		now := c.Now()
		safe := le.safe()
		if !now.Before(safe) {
			if lastErr != nil {
				cancel(fmt.Errorf("%w: %q: renewal failed until the lease's deadline: %w", ErrLost, le.Key(), lastErr))
			} else {
				cancel(fmt.Errorf("%w: %q: the lease's deadline came before its renewal", ErrLost, le.Key()))
			}
			return
		}
		wait := le.Deadline().Add(-renewAhead).Sub(now)
		if lastErr != nil {
			wait = max(ttl/10, time.Millisecond)
		}
		wait = min(wait, safe.Sub(now))
		select {
		case <-stop:
			return
		case <-maxHold:
			cancel(fmt.Errorf("%w: %q held for %v", ErrMaxHold, le.Key(), l.maxHold))
			return
		case <-c.After(wait):
		}
		if !c.Now().Before(safe) {
			continue // cancels above
		}
		ectx, ecancel := context.WithCancel(context.Background())
		done := make(chan error, 1)
		go func() { done <- le.Extend(ectx) }()
		var err error
		select {
		case err = <-done:
		case <-stop:
			ecancel()
			<-done
			return
		case <-maxHold:
			ecancel()
			<-done
			cancel(fmt.Errorf("%w: %q held for %v", ErrMaxHold, le.Key(), l.maxHold))
			return
		case <-c.After(safe.Sub(c.Now())):
			// No answer: the lease might run out before one comes.
			cancel(fmt.Errorf("%w: %q: renewal got no answer before the lease's deadline", ErrLost, le.Key()))
			ecancel()
			<-done
			return
		}
		ecancel()
		if errors.Is(err, ErrLost) {
			cancel(err)
			return
		}
		lastErr = err
	}
}

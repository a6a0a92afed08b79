package lease

import (
	"context"
	"errors"
	"fmt"
	"time"
)

// Do runs fn while holding key's lease, so the TTL only bounds how long a
// crashed worker blocks the others:
//
//   - it acquires the lease, waiting like Acquire;
//   - while fn runs, it extends the lease each time a third of the TTL has
//     passed since the last extend was sent;
//   - it cancels fn's context before the lease could run out when renewal
//     fails, is refused, or gets no answer: at the lease's Deadline less a
//     margin of TTL/10 (for the clocks' rates and a late timer on a busy
//     machine), measured on the locker's
//     clock (the system clock's monotonic reading, taken before each
//     request is sent), with a cause wrapping ErrLost; and when the
//     locker's maximum hold time passes (WithMaxHold), with cause
//     ErrMaxHold;
//   - when fn returns, it stops renewing and releases the lease.
//
// fn must return soon after its context ends; whatever it writes after
// that is protected only by the fence. Do returns fn's error, joined with
// the cause of the cancellation when the lease was lost or held too long,
// and with Release's error; or Acquire's error when fn never ran.
func (l *Locker) Do(ctx context.Context, key string, fn func(ctx context.Context, le *Lease) error) error {
	le, err := l.Acquire(ctx, key)
	if err != nil {
		return err
	}
	work, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	stop := make(chan struct{})
	renewed := make(chan struct{})
	go func() {
		defer close(renewed)
		le.renew(cancel, stop)
	}()
	ferr := fn(work, le)
	close(stop)
	<-renewed
	cause := context.Cause(work)
	rctx, rcancel := context.WithTimeout(context.WithoutCancel(ctx), l.ttl)
	defer rcancel()
	rerr := le.Release(rctx)
	switch {
	case errors.Is(cause, ErrLost):
		return errors.Join(ferr, cause) // Release says the same again
	case errors.Is(cause, ErrMaxHold):
		return errors.Join(ferr, cause, rerr)
	}
	return errors.Join(ferr, rerr)
}

// renewMargin is the share of the TTL by which Do's work is cancelled
// before the lease's deadline: for clocks that run at slightly different
// rates, and for the cancellation's timer firing late on a busy machine.
const renewMargin = 10

// renew extends le while stop is open, and cancels the work when the lease
// might run out or has been held too long.
func (le *Lease) renew(cancel context.CancelCauseFunc, stop <-chan struct{}) {
	l := le.l
	c := l.clock
	ttl := l.ttl
	var maxHold <-chan time.Time
	if l.maxHold > 0 {
		maxHold = c.After(l.maxHold)
	}
	var lastErr error
	for {
		now := c.Now()
		safe := le.Deadline().Add(-ttl / renewMargin)
		if !now.Before(safe) {
			if lastErr != nil {
				cancel(fmt.Errorf("%w: %q: renewal failed until the lease's deadline: %w", ErrLost, le.Key(), lastErr))
			} else {
				cancel(fmt.Errorf("%w: %q: the lease's deadline came before its renewal", ErrLost, le.Key()))
			}
			return
		}
		wait := le.Deadline().Add(-2 * ttl / 3).Sub(now)
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

// Package deadline bounds calls by deadlines that the calls starting close
// together share: one timer a step instead of one per call, which
// context.WithDeadline makes (about a sixth of the client's CPU per
// decision on Redis). The limiter's store budget and the locker's call
// timeout use it.
package deadline

import (
	"context"
	"sync/atomic"
	"time"
)

// Shared hands out deadlines shared by the calls that start within one
// step of each other. Create it with New.
type Shared struct {
	step time.Duration
	cur  atomic.Pointer[shared] // the latest deadline handed out
}

// New returns a Shared for calls bounded by about timeout: its step is a
// hundredth of timeout, at most a millisecond.
func New(timeout time.Duration) *Shared {
	return &Shared{step: min(timeout/100, time.Millisecond)}
}

// Within returns ctx bounded by end, the deadline it got (end, or up to a
// step later, below), and the function that releases it. A context that
// cannot be canceled (such as context.Background()) gets a deadline shared
// with the other calls that start within a step of it, each of which ends
// that much later at most. Any other context gets its own, as from
// context.WithDeadline.
func (s *Shared) Within(ctx context.Context, end time.Time) (context.Context, time.Time, context.CancelFunc) {
	if ctx.Done() != nil {
		sctx, cancel := context.WithDeadline(ctx, end)
		return sctx, end, cancel
	}
	d := s.cur.Load()
	if d == nil || d.end.Before(end) || d.end.After(end.Add(s.step)) {
		n := &shared{end: end.Add(s.step)}
		n.ctx, n.cancel = context.WithCancel(context.Background())
		time.AfterFunc(time.Until(n.end), n.cancel)
		s.cur.CompareAndSwap(d, n) // or another call's, as good
		d = n
	}
	return &sharedCtx{ctx, d}, d.end, func() {}
}

// shared is a deadline shared by the calls of Within that start within one
// step: ctx is canceled (by cancel) at end, and its Done and its AfterFunc
// are the calls' contexts'.
type shared struct {
	end    time.Time
	ctx    context.Context
	cancel context.CancelFunc
}

// sharedCtx is a context that cannot be canceled (its parent's values)
// bounded by a shared deadline.
type sharedCtx struct {
	context.Context
	d *shared
}

func (c *sharedCtx) Deadline() (time.Time, bool) { return c.d.end, true }
func (c *sharedCtx) Done() <-chan struct{}       { return c.d.ctx.Done() }
func (c *sharedCtx) Err() error {
	if c.d.ctx.Err() != nil {
		return context.DeadlineExceeded
	}
	return nil
}

// AfterFunc arranges for f to run on a goroutine of its own once the
// deadline has passed, as context.AfterFunc does: a context derived from
// this one with context.WithCancel (or WithTimeout, ...), which a store's
// client may make, registers here instead of starting a goroutine to watch
// Done.
func (c *sharedCtx) AfterFunc(f func()) (stop func() bool) {
	return context.AfterFunc(c.d.ctx, f)
}

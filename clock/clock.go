// Package clock provides the time source a ratelimit.Limiter reads: the
// system clock, and a fake clock that tests advance by hand.
package clock

import (
	"sync"
	"sync/atomic"
	"time"
)

// Clock tells the time and waits. Implementations must be safe for
// concurrent use.
type Clock interface {
	// Now returns the current time.
	Now() time.Time
	// After returns a channel that receives the time once d has passed on
	// this clock. A d of zero or less fires at once.
	After(d time.Duration) <-chan time.Time
}

// System is the real clock: time.Now and time.After.
var System Clock = systemClock{}

type systemClock struct{}

func (systemClock) Now() time.Time                         { return time.Now() }
func (systemClock) After(d time.Duration) <-chan time.Time { return time.After(d) }

// resync is how often UnixMicro re-reads the wall clock.
const resync = 10 * time.Millisecond

// The system clock as UnixMicro reads it: the wall clock in nanoseconds is
// the monotonic time since start plus offset, which was measured from one
// time.Now reading (both clocks at the same instant) at synced, a monotonic
// time since start.
var (
	start          = time.Now()
	offset, synced atomic.Int64
)

func init() { resyncWall() }

// resyncWall re-reads the wall clock and returns it in nanoseconds since the
// Unix epoch.
func resyncWall() int64 {
	t := time.Now()
	mono := int64(t.Sub(start)) // both monotonic: the same instant
	wall := t.UnixNano()
	offset.Store(wall - mono)
	synced.Store(mono)
	return wall
}

// UnixMicro returns the system clock's time in microseconds since the Unix
// epoch, what System.Now().UnixMicro() returns, for about half the cost:
// time.Now reads two clocks, the wall clock and the monotonic one, and
// UnixMicro reads only the monotonic clock and adds the wall clock's offset
// from it, measured again every 10 ms. The two clocks advance together
// (both follow NTP's adjustments), so the result is time.Now's to within a
// microsecond (time.Now reads the two clocks some nanoseconds apart, which
// the offset inherits, and both round down to the microsecond), except
// after a step of the wall clock (set by hand, or after a suspend), for at
// most 10 ms. A Limiter whose clock is System reads its time here.
func UnixMicro() int64 {
	mono := int64(time.Since(start))
	if mono-synced.Load() >= int64(resync) {
		return resyncWall() / 1e3
	}
	return (mono + offset.Load()) / 1e3
}

// Fake is a Clock that moves only when told to. Its zero value is not
// usable; create one with NewFake. It is safe for concurrent use.
type Fake struct {
	mu      sync.Mutex
	now     time.Time
	waiters []waiter
}

type waiter struct {
	at time.Time
	ch chan time.Time
}

// NewFake returns a fake clock that reads t until advanced.
func NewFake(t time.Time) *Fake { return &Fake{now: t} }

// Now returns the fake clock's current time.
func (f *Fake) Now() time.Time {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.now
}

// After returns a channel that receives the fake time once the clock has
// been advanced by at least d.
func (f *Fake) After(d time.Duration) <-chan time.Time {
	f.mu.Lock()
	defer f.mu.Unlock()
	ch := make(chan time.Time, 1)
	if d <= 0 {
		ch <- f.now
		return ch
	}
	f.waiters = append(f.waiters, waiter{at: f.now.Add(d), ch: ch})
	return ch
}

// Advance moves the clock forward by d (backward when d is negative) and
// fires every After whose time has come.
func (f *Fake) Advance(d time.Duration) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.setLocked(f.now.Add(d))
}

// Set moves the clock to t and fires every After whose time has come.
func (f *Fake) Set(t time.Time) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.setLocked(t)
}

func (f *Fake) setLocked(t time.Time) {
	f.now = t
	kept := f.waiters[:0]
	for _, w := range f.waiters {
		if w.at.After(t) {
			kept = append(kept, w)
			continue
		}
		w.ch <- t
	}
	f.waiters = kept
}

// Waiters reports how many After channels have not fired yet. Tests use it
// to advance the clock only once a goroutine is waiting.
func (f *Fake) Waiters() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return len(f.waiters)
}

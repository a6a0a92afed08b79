// Package lease gives out per-key leases (distributed locks) with owner
// tokens and fencing tokens, held in any store.Store: memory, Redis,
// Valkey, PostgreSQL, DynamoDB, or a user's own store that passes the
// conformance suite.
//
// A Locker hands out leases on keys. TryAcquire returns at once, with a
// Lease or an error wrapping ErrHeld; Acquire waits for the key. Do is what
// most callers want: it acquires, starts the work only when enough of the
// lease is left, renews while the work runs, cancels the work's context
// before the lease could run out when renewal fails, and releases, also
// when the work panics:
//
//	locker, err := lease.New(store, 30*time.Second, lease.WithName("chat-session"))
//	...
//	err = locker.Do(ctx, sessionID, func(ctx context.Context, l *lease.Lease) error {
//		// Only this worker processes the session now. Pass l.Fence() to
//		// every write the lease protects, which rejects a smaller one.
//		return appendMessages(ctx, sessionID, l.Fence(), msgs)
//	})
//
// Every acquire returns a fence, minted in the same atomic step, greater
// than every fence issued before for that key on that store: after a
// release, an expiry, the reclaiming of the record, or a restart that lost
// it. A lease alone keeps two holders apart only while clocks and pauses
// behave; the fence, checked by the resource the lease protects, keeps a
// holder that paused past its lease from doing harm. docs/leases.md says
// when that matters and what each store guarantees.
//
// The lease's transitions are one pure function of the stored record and
// the store's time, run through Store.Update, so they are the same on every
// store. Keys are namespaced "<locker name>:@lease", which no limiter's
// namespace ("<name>:<algorithm>") can equal. That function, its wire types,
// its Lua form and the Runner capability a store may implement to run it
// next to its data are the store author's side, in package
// lease/leasewire; a user of leases needs only this package.
package lease

import (
	"context"
	crand "crypto/rand"
	"errors"
	"fmt"
	"math/rand/v2"
	"reflect"
	"slices"
	"sync"
	"time"

	"github.com/ratelimitkit/ratelimit"
	"github.com/ratelimitkit/ratelimit/clock"
	"github.com/ratelimitkit/ratelimit/internal/ctxaware"
	"github.com/ratelimitkit/ratelimit/internal/deadline"
	"github.com/ratelimitkit/ratelimit/internal/names"
	"github.com/ratelimitkit/ratelimit/lease/leasewire"
	"github.com/ratelimitkit/ratelimit/store"
)

// Errors. Check them with errors.Is; the store's own failures are returned
// wrapped, reachable with errors.As, and a context that ends is the
// context's error.
var (
	// ErrHeld reports a key held by another owner. The error is a
	// *HeldError, which says until when.
	ErrHeld = errors.New("lease: held by another owner")
	// ErrLost reports a lease that is no longer the caller's: it ran out,
	// or another owner took the key over, or its record was lost.
	ErrLost = errors.New("lease: lost")
	// ErrMaxHold is the cause of the cancellation of Do's work when the
	// lease has been held for the locker's maximum hold time.
	ErrMaxHold = errors.New("lease: maximum hold time reached")
)

// HeldError is the error of TryAcquire on a key another owner holds.
type HeldError struct {
	// Key is the key asked for.
	Key string
	// Until is when the holder's lease runs out unless extended, on the
	// store's clock.
	Until time.Time
	// RetryAfter is how long that is from the store's time of the attempt.
	RetryAfter time.Duration
}

func (e *HeldError) Error() string {
	return fmt.Sprintf("lease: %q held by another owner until %s (in %v)", e.Key, e.Until.UTC().Format(time.RFC3339Nano), e.RetryAfter)
}

// Is reports whether target is ErrHeld.
func (e *HeldError) Is(target error) bool { return target == ErrHeld }

// defaultName is a Locker's name unless WithName says otherwise.
const defaultName = "lease"

// Option configures a Locker.
type Option func(*Locker) error

// WithName sets the locker's name ("lease" otherwise), which namespaces
// its keys: lockers with the same name on one store share their leases. A
// name matches [A-Za-z0-9_.-]{1,64}.
func WithName(name string) Option {
	return func(l *Locker) error {
		if err := names.CheckName("lease name", name); err != nil {
			return err
		}
		l.name = name
		return nil
	}
}

// WithClock makes the locker read time from c instead of the system clock:
// for expiry on stores that use the locker's clock, and for Acquire's polls
// and Do's renewals everywhere. Tests pass a clock.Fake.
//
// A store that decides by its server's clock (Redis, Valkey and PostgreSQL
// by default; see store.ServerClocker) would ignore c's time, so New
// refuses any clock but clock.System with such a store, as ratelimit.New
// does: configure the store with WithServerClock(false) to use c.
func WithClock(c clock.Clock) Option {
	return func(l *Locker) error {
		if isNil(c) {
			return fmt.Errorf("%w: lease: nil clock", ratelimit.ErrInvalidParams)
		}
		l.clock = c
		return nil
	}
}

// defaultMargin is the margin Do keeps by default for TTLs of 3 s to 10 s:
// a locker's margin is the larger of TTL/10 and defaultMargin, but at most
// a third of the TTL, unless WithMargin sets it. It is sized by how late
// timers fire on a loaded machine (docs/leases.md has the measurement: up
// to 890 ms seen by an outside probe), so that a late timer cannot let the
// work run past its lease. A TTL under 3 s keeps a third of itself, less
// than such a timer can be late: use short leases only where timers are
// punctual.
const defaultMargin = time.Second

// WithMargin sets how much of the lease Do keeps in hand (by default the
// larger of TTL/10 and a second, but at most a third of the TTL, a margin
// sized by how late timers fire on a loaded machine; docs/leases.md has the
// measurement): the work starts only when at least this much of the lease
// remains when the acquire's reply arrives, and its
// context ends this long before the lease's deadline when renewal fails.
// It covers timers that fire late and clocks that run at slightly
// different rates. It must be positive and at most half the TTL.
func WithMargin(d time.Duration) Option {
	return func(l *Locker) error {
		if d <= 0 {
			return fmt.Errorf("%w: lease: margin %v must be positive", ratelimit.ErrInvalidParams, d)
		}
		l.margin = d
		return nil
	}
}

// defaultCallTimeout bounds each request a locker makes to its store
// unless WithCallTimeout says otherwise.
const defaultCallTimeout = time.Second

// WithCallTimeout bounds each call of TryAcquire, Extend and Release, and
// each attempt of Acquire's polling, to d (a second otherwise),
// and an acquire or extend also to the TTL less the margin, after which its
// reply could no longer be used. The bound holds when the caller's context
// has no deadline; an earlier deadline of the caller's wins. A call that
// runs out of time returns an error wrapping context.DeadlineExceeded, even
// when the store ignores its context (the locker stops waiting for it).
func WithCallTimeout(d time.Duration) Option {
	return func(l *Locker) error {
		if d <= 0 {
			return fmt.Errorf("%w: lease: call timeout %v must be positive", ratelimit.ErrInvalidParams, d)
		}
		l.callTimeout = d
		return nil
	}
}

// WithPollInterval sets how often Acquire tries again while the key is
// held (TTL/10 otherwise, at least 1ms). Each wait is jittered between half
// the interval and the whole of it, and never outlasts the holder's lease.
func WithPollInterval(d time.Duration) Option {
	return func(l *Locker) error {
		if d <= 0 {
			return fmt.Errorf("%w: lease: poll interval %v must be positive", ratelimit.ErrInvalidParams, d)
		}
		l.poll = d
		return nil
	}
}

// WithMaxHold caps how long Do keeps a lease: at that time Do cancels the
// work's context with cause ErrMaxHold and stops renewing. Zero, the
// default, means no cap.
func WithMaxHold(d time.Duration) Option {
	return func(l *Locker) error {
		if d < 0 {
			return fmt.Errorf("%w: lease: maximum hold time %v must not be negative", ratelimit.ErrInvalidParams, d)
		}
		l.maxHold = d
		return nil
	}
}

// Locker hands out leases on keys held in one store. Create it with New;
// the zero value is not usable. Do is the method most callers want. A
// Locker is safe for concurrent use.
type Locker struct {
	store   store.Store
	runner  leasewire.Runner // store as a leasewire.Runner, or nil
	direct  bool             // the store gives up when its context ends (once)
	name    string
	ns      string
	ttl     time.Duration
	clock   clock.Clock
	poll    time.Duration
	maxHold time.Duration
	margin  time.Duration
	// callTimeout bounds a release; bound (the call timeout, at most the
	// TTL less the margin) an acquire or an extend.
	callTimeout time.Duration
	bound       time.Duration
	// The deadlines of calls whose context cannot be canceled, shared by
	// the calls that start within a millisecond (deadline.Shared): one
	// timer a step instead of one per call.
	callDeadlines, boundDeadlines *deadline.Shared

	// waiting queues, per key, the goroutines of this locker waiting in
	// Acquire; this locker's Release of the key wakes the first.
	mu      sync.Mutex
	waiting map[string][]chan struct{}
}

// released queues a waiter for key and returns a channel closed when a
// lease of this locker on key is released and it is the waiter's turn;
// done must be called when the caller stops waiting.
func (l *Locker) released(key string) (ch <-chan struct{}, done func()) {
	c := make(chan struct{})
	l.mu.Lock()
	if l.waiting == nil {
		l.waiting = map[string][]chan struct{}{}
	}
	l.waiting[key] = append(l.waiting[key], c)
	l.mu.Unlock()
	return c, func() {
		l.mu.Lock()
		defer l.mu.Unlock()
		q := l.waiting[key]
		if i := slices.Index(q, c); i >= 0 {
			q = slices.Delete(q, i, i+1)
		}
		if len(q) == 0 {
			delete(l.waiting, key)
		} else {
			l.waiting[key] = q
		}
	}
}

// wake wakes the first of this locker's goroutines waiting for key: one
// request to the store per hand-over instead of one per waiter.
func (l *Locker) wake(key string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if q := l.waiting[key]; len(q) > 0 {
		close(q[0])
		if len(q) == 1 {
			delete(l.waiting, key)
		} else {
			l.waiting[key] = q[1:]
		}
	}
}

// MinTTL is the shortest lease TTL New accepts.
const MinTTL = time.Millisecond

// New returns a locker whose leases live in store and run out ttl after
// they were acquired or last extended. It returns an error wrapping
// ratelimit.ErrInvalidParams for a nil store (typed or not), a TTL below
// MinTTL or shorter than twice WithMargin's margin, a clock other
// than clock.System with a store that decides by its server's clock, or an
// unusable option.
func New(st store.Store, ttl time.Duration, opts ...Option) (*Locker, error) {
	if isNil(st) {
		return nil, fmt.Errorf("%w: lease: nil store", ratelimit.ErrInvalidParams)
	}
	if ttl < MinTTL || ttl > 365*24*time.Hour {
		return nil, fmt.Errorf("%w: lease: TTL %v outside %v..1 year", ratelimit.ErrInvalidParams, ttl, MinTTL)
	}
	l := &Locker{store: st, name: defaultName, ttl: ttl, clock: clock.System, callTimeout: defaultCallTimeout}
	for _, opt := range opts {
		if err := opt(l); err != nil {
			return nil, err
		}
	}
	if sc, ok := st.(store.ServerClocker); ok && l.clock != clock.System && sc.ServerClock() {
		return nil, fmt.Errorf("%w: lease: the store decides by its server's clock, so WithClock would be ignored; configure the store with WithServerClock(false) to use the locker's clock", ratelimit.ErrInvalidParams)
	}
	if l.margin == 0 {
		l.margin = max(ttl/10, min(defaultMargin, ttl/3))
	} else if 2*l.margin > ttl {
		return nil, fmt.Errorf("%w: lease: margin %v is more than half the TTL %v", ratelimit.ErrInvalidParams, l.margin, ttl)
	}
	l.bound = min(l.callTimeout, ttl-l.margin)
	l.callDeadlines, l.boundDeadlines = deadline.New(l.callTimeout), deadline.New(l.bound)
	if l.poll == 0 {
		l.poll = max(ttl/10, time.Millisecond)
	}
	l.runner, _ = st.(leasewire.Runner)
	l.direct = ctxaware.Honours(st)
	l.ns = l.name + leasewire.NamespaceSuffix
	return l, nil
}

// TTL returns the lease TTL.
func (l *Locker) TTL() time.Duration { return l.ttl }

// Namespace returns the namespace of the locker's keys in its store.
func (l *Locker) Namespace() string { return l.ns }

// Store returns the locker's store.
func (l *Locker) Store() store.Store { return l.store }

// Margin returns how much of the lease Do keeps in hand (see WithMargin).
func (l *Locker) Margin() time.Duration { return l.margin }

// TryAcquire takes key's lease if it is free, and returns at once: the
// lease, or an error wrapping ErrHeld (a *HeldError saying when the
// holder's lease runs out), the context's error, or the store's. A store
// failure is retried once with the same owner token, which returns the same
// lease if the first attempt took it; if both fail, the key may stay held
// until the TTL passes. Both attempts together take at most the call
// timeout (see WithCallTimeout).
func (l *Locker) TryAcquire(ctx context.Context, key string) (*Lease, error) {
	if err := names.CheckKey(key); err != nil {
		return nil, err
	}
	var owner leasewire.Token
	if _, err := crand.Read(owner[:]); err != nil {
		return nil, fmt.Errorf("lease: owner token: %w", err)
	}
	k := store.Key{Namespace: l.ns, ID: key}
	ctx, _, cancel := l.boundDeadlines.Within(ctx, time.Now().Add(l.bound))
	defer cancel()
	sent, res, err := l.run(ctx, k, leasewire.Request{Op: leasewire.OpAcquire, Owner: owner, TTL: micros(l.ttl)}, true)
	if err != nil {
		return nil, err
	}
	if res.Code == leasewire.Held {
		return nil, &HeldError{Key: key, Until: time.UnixMicro(res.Expires), RetryAfter: time.Duration(res.Expires-res.Now) * time.Microsecond}
	}
	le := &Lease{l: l, key: k, owner: owner, fence: res.Fence}
	le.set(sent, res)
	return le, nil
}

// Acquire takes key's lease, waiting while another owner holds it: it tries
// again after a jittered poll interval, or sooner when the holder's lease
// runs out first, or at once when a lease of this same Locker on key is
// released and it is first in line (so goroutines of one process hand a
// hot key on in turn, one request each, without polling the store for
// it). It returns the context's error when ctx ends first, and
// the store's error at once when the store fails. Each attempt is bounded
// as TryAcquire is.
func (l *Locker) Acquire(ctx context.Context, key string) (*Lease, error) {
	for {
		// Listen for a release by this locker before asking, so that one
		// between the answer and the wait is not missed.
		released, done := l.released(key)
		le, err := l.TryAcquire(ctx, key)
		var held *HeldError
		if !errors.As(err, &held) {
			done()
			return le, err
		}
		wait := l.poll/2 + rand.N(l.poll/2+1)
		if held.RetryAfter > 0 && held.RetryAfter < wait {
			wait = held.RetryAfter
		}
		select {
		case <-l.clock.After(wait):
		case <-released:
		case <-ctx.Done():
			done()
			return nil, ctx.Err()
		}
		done()
	}
}

// run applies req to k's record through the store's Runner or Update, and
// returns when the request was sent (by the locker's clock, before the
// store read its clock) with the outcome. With retry set, a store failure
// while ctx is live is retried once: every op is idempotent for its owner.
func (l *Locker) run(ctx context.Context, k store.Key, req leasewire.Request, retry bool) (time.Time, leasewire.Result, error) {
	for attempt := 1; ; attempt++ {
		sent := l.clock.Now()
		res, err := l.once(ctx, k, sent.UnixMicro(), req)
		if err == nil || !retry || attempt == 2 || ctx.Err() != nil || !ambiguous(err) {
			return sent, res, err
		}
	}
}

// once makes one request, and returns when it answers or ctx ends,
// whichever comes first. A built-in store gives up when its context ends
// and is called directly; any other store is called on a goroutine of its
// own, so that one that ignores its context (a client blocked on a hung
// server) does not hold the caller past ctx's deadline. The request then
// goes on in its goroutine until the store returns.
func (l *Locker) once(ctx context.Context, k store.Key, now int64, req leasewire.Request) (leasewire.Result, error) {
	if l.direct {
		return l.call(ctx, k, now, req)
	}
	return ctxaware.Detached(ctx, fmt.Sprintf("lease: %q: ", k.ID), func(ctx context.Context) (leasewire.Result, error) { return l.call(ctx, k, now, req) })
}

// call makes one request of the store: through its Runner when it has
// one, through Update otherwise.
func (l *Locker) call(ctx context.Context, k store.Key, now int64, req leasewire.Request) (leasewire.Result, error) {
	if l.runner != nil {
		return l.runner.RunLease(ctx, k, now, req)
	}
	var res leasewire.Result
	err := l.store.Update(ctx, k, now, func(cur []byte, now int64) ([]byte, int64, error) {
		next, ttl, r, err := leasewire.Step(cur, now, req)
		res = r
		return next, ttl, err
	})
	return res, err
}

// ambiguous reports whether err leaves open whether the store applied the
// request: not bad input or unreadable state, which no retry changes.
func ambiguous(err error) bool {
	return !errors.Is(err, ratelimit.ErrCorruptState) && !errors.Is(err, ratelimit.ErrInvalidParams) &&
		!errors.Is(err, ratelimit.ErrInvalidTime) && !errors.Is(err, ratelimit.ErrInvalidKey)
}

// Lease is one owner's hold on a key. Its fence and owner token are fixed
// for its life; its expiry moves with Extend. It is safe for concurrent
// use.
type Lease struct {
	l     *Locker
	key   store.Key
	owner leasewire.Token
	fence int64

	mu       sync.Mutex
	expires  time.Time // on the store's clock
	deadline time.Time // on the locker's clock: when the lease might run out
	released bool
}

func (le *Lease) set(sent time.Time, res leasewire.Result) {
	le.mu.Lock()
	defer le.mu.Unlock()
	le.expires = time.UnixMicro(res.Expires)
	le.deadline = sent.Add(time.Duration(res.Expires-res.Now) * time.Microsecond)
}

// Key returns the key the lease holds.
func (le *Lease) Key() string { return le.key.ID }

// Fence returns the lease's fencing token: greater than the fence of every
// lease on this key before it. Pass it to the resource the lease protects,
// and have the resource refuse a write whose fence is below the last one it
// accepted (docs/leases.md, examples/chatsession).
func (le *Lease) Fence() int64 { return le.fence }

// Owner returns the lease's owner token, 128 random bits in hex: it tells
// apart two holders of one key over time, in logs and in the store.
func (le *Lease) Owner() string { return le.owner.String() }

// Expires returns when the lease runs out unless extended, on the store's
// clock, as of the last acquire or extend that succeeded.
func (le *Lease) Expires() time.Time {
	le.mu.Lock()
	defer le.mu.Unlock()
	return le.expires
}

// Deadline returns the time on the locker's clock before which the lease
// is surely still held: the time the last successful acquire or extend was
// sent plus what the store granted. It is what Do cancels its work by.
func (le *Lease) Deadline() time.Time {
	le.mu.Lock()
	defer le.mu.Unlock()
	return le.deadline
}

// Extend moves the lease's expiry to the store's time plus the TTL. It
// returns an error wrapping ErrLost when the lease is no longer the
// caller's (it ran out, was taken over, released, or its record was lost),
// and the store's error when the store fails. Extend is idempotent: a
// failed attempt (whose reply may have been lost) is tried once more, and
// only that reading of the record declares the lease lost. Both attempts
// together take at most the call timeout (see WithCallTimeout).
func (le *Lease) Extend(ctx context.Context) error {
	ctx, _, cancel := le.l.boundDeadlines.Within(ctx, time.Now().Add(le.l.bound))
	defer cancel()
	sent, res, err := le.l.run(ctx, le.key, leasewire.Request{Op: leasewire.OpExtend, Owner: le.owner, Fence: le.fence, TTL: micros(le.l.ttl)}, true)
	if err != nil {
		return err
	}
	if res.Code != leasewire.OK {
		return le.lost("extend", res)
	}
	le.set(sent, res)
	return nil
}

// Release gives the key back if the lease still holds it. It returns nil
// once released (again on later calls), an error wrapping ErrLost when the
// lease ran out or another owner holds the key (whose lease Release leaves
// alone), and the store's error when the store fails. When an attempt fails
// ambiguously, Release tries once more and reads the result: a record no
// longer held by this lease, and no one else's, counts as released. Both
// attempts together take at most the call timeout (see WithCallTimeout).
func (le *Lease) Release(ctx context.Context) error {
	le.mu.Lock()
	done := le.released
	le.mu.Unlock()
	if done {
		return nil
	}
	req := leasewire.Request{Op: leasewire.OpRelease, Owner: le.owner, Fence: le.fence, TTL: micros(le.l.ttl)}
	ctx, _, cancel := le.l.callDeadlines.Within(ctx, time.Now().Add(le.l.callTimeout))
	defer cancel()
	_, res, err := le.l.run(ctx, le.key, req, false)
	if err != nil && ctx.Err() == nil && ambiguous(err) {
		_, res, err = le.l.run(ctx, le.key, req, false)
		if err == nil && res.Code == leasewire.Lost && (!res.Found || res.Released || res.Expires <= res.Now) {
			res.Code = leasewire.OK // the first attempt released it, or it ran out unclaimed
		}
	}
	if err != nil {
		return err
	}
	if res.Code != leasewire.OK {
		return le.lost("release", res)
	}
	le.mu.Lock()
	le.released = true
	le.mu.Unlock()
	le.l.wake(le.key.ID)
	return nil
}

func (le *Lease) lost(op string, res leasewire.Result) error {
	var why string
	switch {
	case !res.Found:
		why = "no record of it (it ran out and was reclaimed, or the store lost it)"
	case res.Owner != le.owner || res.Fence != le.fence:
		if res.Expires > res.Now {
			why = fmt.Sprintf("another owner holds it with fence %d", res.Fence)
		} else {
			why = fmt.Sprintf("another owner held it since, with fence %d", res.Fence)
		}
	case res.Released:
		why = "it was released"
	default:
		why = fmt.Sprintf("it ran out %v ago", time.Duration(res.Now-res.Expires)*time.Microsecond)
	}
	return fmt.Errorf("%w: %s of %q with fence %d: %s", ErrLost, op, le.key.ID, le.fence, why)
}

func micros(d time.Duration) int64 { return int64(d / time.Microsecond) }

// isNil reports whether v is nil or an interface holding a nil pointer,
// map, slice, channel or func, which would panic on first use (the same
// test ratelimit.New makes of its store and clock).
func isNil(v any) bool {
	if v == nil {
		return true
	}
	switch rv := reflect.ValueOf(v); rv.Kind() {
	case reflect.Pointer, reflect.Map, reflect.Slice, reflect.Chan, reflect.Func, reflect.Interface:
		return rv.IsNil()
	}
	return false
}

package ratelimit

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"time"
	"unsafe"

	"github.com/ratelimitkit/ratelimit/algorithms"
	"github.com/ratelimitkit/ratelimit/algorithms/forms"
	"github.com/ratelimitkit/ratelimit/store"
)

// The path a decision takes is a chain of links from the caller to the
// store, which New builds once from the limiter's options. Each option
// that needs one adds one link, written in the option's own file; a link
// decides by calling the next (or not) and knows nothing of the others:
// what passes between them is the request, the decision and its error.
// The order is written here and nowhere else.
//
// A limiter whose options add no link (one on the memory store without
// options) has no chain: it asks its store and applies the failure policy
// itself (Limiter.decide), which is what the chain's last two links do.

// The links, in the order a decision passes them from the caller to the
// store; docs/failures.md ("The order of things") has the same table.
const (
	observerLink = iota // observer.go: is told the decision returned
	shadowLink          // shadow.go: admits what the links after it deny
	policyLink          // ratelimit.go: decides by the failure policy what nothing after it decided
	denyLink            // denycache.go: denies again what the store denied, until its retry time
	quotaLink           // localquota.go: admits from a share of the budget the store counted
	fallbackLink        // fallback.go: decides locally while the store is at fault
	breakerLink         // breaker.go: stops calling a store that keeps failing
	budgetLink          // budget.go: bounds each store call in time
	numLinks            // then the store (storeLink, below)
)

// A link is one step of a decision's path.
type link interface {
	// decide decides req on k at tier t's numbers into d, which holds the
	// zero Decision when it is called, and returns the store's error (or
	// the reason the store was not asked) with whatever it decided; a
	// link that decided nothing leaves d zero (SourceNone). d is the
	// caller's (see noescape): a link writes it before it returns, on its
	// own goroutine, and keeps no pointer to it.
	decide(ctx context.Context, t *Tier, k store.Key, req algorithms.Request, d *Decision) error
	// forget drops what the link holds about k, then has the rest of the
	// chain forget it, the store last (Limiter.Reset).
	forget(ctx context.Context, k store.Key) error
}

// passForget is the forget of a link that holds nothing about keys.
type passForget struct{ next link }

func (p passForget) forget(ctx context.Context, k store.Key) error { return p.next.forget(ctx, k) }

// addLink has New make the link of the given place in the chain with
// make, in place of any it had for that place. Outside New (an Option
// called on a Limiter New returned) it is an error wrapping
// ErrInvalidParams: a chain is built once.
func (l *Limiter) addLink(place int, make linkMaker) error {
	if l.makers == nil {
		return fmt.Errorf("%w: an option applies only in New", ErrInvalidParams)
	}
	l.makers[place] = make
	return nil
}

// A linkMaker makes an option's link in front of next, or returns next
// itself when the option, as configured, adds nothing.
type linkMaker func(c *chainOf, next link) (link, error)

// chainOf is what a linkMaker may know of the limiter it builds for,
// and where a link registers what it keeps per tier and what it does when
// the limiter is closed.
type chainOf struct {
	l *Limiter
}

// onClose registers close, which Limiter.Close calls.
func (c *chainOf) onClose(close func(context.Context) error) {
	c.l.closers = append(c.l.closers, close)
}

// name returns the limiter's name, given or derived.
func (c *chainOf) name() string { return strings.TrimSuffix(c.l.ns, ":"+c.l.alg.Name()) }

// perTier registers make, which makes what a link keeps for each tier of
// the limiter from the tier's algorithm (the fallback: its share of the
// numbers), and returns the index of Tier.local that will hold it.
func (c *chainOf) perTier(make func(algorithms.Algorithm) (any, error)) int {
	c.l.perTier = append(c.l.perTier, make)
	return len(c.l.perTier) - 1
}

// buildChain makes the limiter's links from its store outwards and keeps
// the first in l.head; it leaves l.head nil when no option added a link.
func (l *Limiter) buildChain(makers *[numLinks]linkMaker) error {
	c := &chainOf{l: l}
	var next link = &l.storeLink
	added := false
	for i := numLinks - 1; i >= 0; i-- {
		if makers[i] == nil {
			continue
		}
		n, err := makers[i](c, next)
		if err != nil {
			return err
		}
		if n != next && i != policyLink {
			added = true
		}
		next = n
	}
	if added {
		l.head = next
	}
	return nil
}

// tierLocal makes what the limiter's links keep for a tier with alg's
// numbers (Tier.local).
func (l *Limiter) tierLocal(alg algorithms.Algorithm) ([]any, error) {
	if len(l.perTier) == 0 {
		return nil, nil
	}
	local := make([]any, len(l.perTier))
	for i, make := range l.perTier {
		v, err := make(alg)
		if err != nil {
			return nil, err
		}
		local[i] = v
	}
	return local, nil
}

// faultError is an error that is the store's fault whatever the caller's
// deadline: a budget that ran out before it (budget.go), a breaker open
// on a failing store (breaker.go).
type faultError interface {
	error
	storesFault()
}

// retryError is a store failure that knows the longest the store will not
// be called: an open breaker's (breaker.go).
type retryError interface {
	error
	retryAfter() time.Duration
}

// storeFault reports whether err, returned by a store call made under ctx,
// is the store's fault: not the caller's context ending, and not state the
// algorithm cannot read (which a working store returned). A caller whose
// deadline has passed on the monotonic clock is taken to have given up
// even before its context says so: a client that set its socket's deadline
// from the context, or a batch sent under its callers' latest deadline
// (the Redis and Valkey stores), may hand back the error before the
// context's timer fires. A faultError is the store's.
func storeFault(ctx context.Context, err error) bool {
	if err == nil || ctx.Err() != nil {
		return false
	}
	if _, ok := err.(faultError); ok {
		return true
	}
	if notStoresFault(err) {
		return false
	}
	dl, ok := ctx.Deadline()
	return !ok || time.Now().Before(dl)
}

// notStoresFault reports an error that a working store returned: state the
// algorithm cannot read (ErrCorruptState), or a step of a user's algorithm
// that breaks the contract (checkStep, ErrInvalidParams). No failure policy
// admits on it and the circuit breaker does not count it: waiting for the
// store to recover would change nothing.
func notStoresFault(err error) bool {
	return errors.Is(err, ErrCorruptState) || errors.Is(err, ErrInvalidParams)
}

// storeLink is the last link of every chain: it asks a store, through its
// Decider when it has one for the algorithm, through Update otherwise, and
// returns the store's error as it is. The limiter has one for its store;
// the fallback has one for its own.
type storeLink struct {
	store   store.Store
	decider store.Decider // store as a Decider, or nil
	// to is store as a toDecider (the memory store) when the algorithm
	// is an forms.ToDecider, or nil.
	to toDecider
	// noServerForm is set once the store has said it cannot run the
	// algorithm.
	noServerForm atomic.Bool
}

// init makes s the link to store for alg's decisions (and its tiers').
func (s *storeLink) init(st store.Store, alg algorithms.Algorithm) {
	s.store = st
	if !ownAlgorithm(alg) {
		s.decider, _ = st.(store.Decider) // a user's algorithm goes through update
	}
	if _, ok := alg.(forms.ToDecider); ok {
		s.to = toDeciderOf(st)
	}
}

// decide writes the store's decision to d, which is unchanged when it
// returns an error.
func (s *storeLink) decide(ctx context.Context, t *Tier, k store.Key, req algorithms.Request, d *Decision) error {
	if s.to != nil {
		// The memory store, which never answers ErrUnsupported.
		allowed, limit, remaining, retryAfter, resetAfter, delay, err := s.to(ctx, k, t.to, req)
		if err == nil {
			d.setFields(allowed, limit, remaining, retryAfter, resetAfter, delay)
		}
		return err
	}
	return s.ask(ctx, t, k, req, d)
}

// ask is decide for a store outside the process.
func (s *storeLink) ask(ctx context.Context, t *Tier, k store.Key, req algorithms.Request, d *Decision) error {
	if s.decider != nil && !s.noServerForm.Load() {
		err := d.set(s.decider.Decide(ctx, k, t.alg, req))
		if err == nil {
			return nil
		}
		if !errors.Is(err, store.ErrUnsupported) {
			return err
		}
		s.noServerForm.Store(true)
	}
	return s.update(ctx, t.alg, k, req, d)
}

// update runs alg through the store's atomic Update, holding each step to
// the contract the built-in algorithms keep (checkStep) before the store
// writes it, so that a user's algorithm decides alike on every store.
func (s *storeLink) update(ctx context.Context, alg algorithms.Algorithm, k store.Key, req algorithms.Request, d *Decision) error {
	var step algorithms.Step
	err := s.store.Update(ctx, k, req.Now, func(cur []byte, now int64) ([]byte, int64, error) {
		r := req
		r.Now = now
		var err error
		step, err = alg.Decide(cur, r)
		if err == nil {
			err = checkStep(alg, r, &step)
		}
		if err != nil {
			return nil, 0, err
		}
		return step.Next, step.TTL, nil
	})
	if err != nil {
		return err
	}
	return d.set(step.Decision, nil)
}

// set makes d the store's Decision for the algorithm's decision a, unless
// err is set, and returns err. It is not inlined so that a and err arrive
// in registers and are read field by field: a Decision has too many fields
// for the compiler to keep in registers, and the copy it makes of a struct
// written field by field costs a stall on the hot path.
//
//go:noinline
func (d *Decision) set(a algorithms.Decision, err error) error {
	if err != nil {
		return err
	}
	d.setFields(a.Allowed, a.Limit, a.Remaining, a.RetryAfter, a.ResetAfter, a.Delay)
	if a.Parts != nil {
		d.Limits = limitsOf(a.Parts)
	}
	return nil
}

// setFields makes d the store's Decision for a single algorithm's decision
// with these fields (durations in microseconds); its Limits is nil.
func (d *Decision) setFields(allowed bool, limit, remaining, retryAfter, resetAfter, delay int64) {
	d.Allowed = allowed
	d.Limit = int(limit)
	d.Remaining = int(remaining)
	d.RetryAfter = time.Duration(retryAfter) * time.Microsecond
	d.ResetAfter = time.Duration(resetAfter) * time.Microsecond
	d.Delay = time.Duration(delay) * time.Microsecond
	d.Source = SourceStore
	d.Limits = nil
}

// forget deletes k's state in the store.
func (s *storeLink) forget(ctx context.Context, k store.Key) error { return s.store.Delete(ctx, k) }

// noescape returns d, hidden from escape analysis, for the chain: a
// pointer passed through an interface method is taken to escape, which
// would move every caller's Decision to the heap, one allocation per
// decision. No link keeps d or hands it to another goroutine (link.decide),
// so it may live on the caller's stack, as the runtime's noescape does for
// its own pointers; TestGuardDoesNotAllocate and TestTierDoesNotAllocate
// hold the paths to 0 allocations, and the race detector checks the rest.
//
//go:nosplit
func noescape(d *Decision) *Decision {
	x := uintptr(unsafe.Pointer(d))
	return *(**Decision)(unsafe.Pointer(&x))
}

// checkPositive is the check shared by the options that take a count.
func checkPositive(what string, n int) error {
	if n < 1 {
		return fmt.Errorf("%w: %s %d must be at least 1", ErrInvalidParams, what, n)
	}
	return nil
}

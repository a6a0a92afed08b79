// Package ratelimit decides whether a key may do something now, with its
// state in a store the application already runs: in-process memory, Redis,
// Valkey, DynamoDB or PostgreSQL.
//
// A Limiter combines a store (store/memory, store/redis, store/valkey,
// store/dynamo, store/postgres) with an Algorithm (package algorithms). The
// algorithms are written once as pure state transitions and make the same
// decisions on every store; stores that can run code next to their data
// (Redis, Valkey, PostgreSQL) run them there in one round trip. The
// contract a store keeps is package store, for those who write one.
//
//	lim, err := ratelimit.New(memory.MustNew(), algorithms.GCRA(100, time.Minute, 20))
//	...
//	d, err := lim.Allow(ctx, userID)
//	if !d.Allowed {
//		// reject, with d.RetryAfter for the Retry-After header
//	}
package ratelimit

import (
	"context"
	"fmt"
	"hash/fnv"
	"reflect"
	"time"

	"github.com/ratelimitkit/ratelimit/algorithms"
	"github.com/ratelimitkit/ratelimit/clock"
	"github.com/ratelimitkit/ratelimit/store"

	"github.com/ratelimitkit/ratelimit/internal/names"
)

// Errors. Check them with errors.Is; messages carry the offending values.
var (
	// ErrInvalidParams reports unusable algorithm parameters or options.
	ErrInvalidParams = algorithms.ErrInvalidParams
	// ErrCorruptState reports stored state that the algorithm cannot read.
	ErrCorruptState = algorithms.ErrCorruptState
	// ErrInvalidKey reports an empty or oversized key.
	ErrInvalidKey = store.ErrInvalidKey
	// ErrInvalidCost reports a cost below 1 or above what the algorithm
	// could ever admit (its burst, capacity or limit).
	ErrInvalidCost = store.ErrInvalidCost
	// ErrInvalidTime reports a clock reading before the Unix epoch or too
	// far after it to be held exactly.
	ErrInvalidTime = store.ErrInvalidTime
)

// errWouldExceedDeadline is what Wait returns, at once, when the request
// cannot be admitted before the context's deadline: an error of its own
// (its message says the deadline would be exceeded, not that it was) that
// is also context.DeadlineExceeded, as x/time/rate's Wait answers.
var errWouldExceedDeadline error = wouldExceedDeadline{}

// wouldExceedDeadline is errWouldExceedDeadline's type.
type wouldExceedDeadline struct{}

func (wouldExceedDeadline) Error() string { return "ratelimit: would exceed context deadline" }

func (wouldExceedDeadline) Is(target error) bool { return target == context.DeadlineExceeded }

// Decision is the answer to a request: allowed or not, and what an HTTP
// response needs to say so (RateLimit-* and Retry-After headers). A denied
// request is a Decision, not an error.
type Decision struct {
	// Allowed reports whether the request was admitted.
	Allowed bool
	// Limit is the most a key may hold at once: the limit of a window
	// algorithm, the burst of a bucket.
	Limit int
	// Remaining is how many units of cost could still be admitted now.
	Remaining int
	// RetryAfter is how long until a denied request would be admitted if
	// nothing else happened. It is zero when Allowed.
	RetryAfter time.Duration
	// ResetAfter is how long until the key is back to its unused state if
	// nothing else happens.
	ResetAfter time.Duration
	// Delay is how long an admitted request should wait before it
	// proceeds: the leaky bucket's turn in its queue, or a reservation's
	// time to act (Reserve). Wait sleeps it for you.
	Delay time.Duration
	// Source says where the decision came from: the store, the local
	// fallback, the deny cache or the failure policy.
	Source Source
	// Shadowed reports that a limiter in shadow mode (WithShadow) admitted
	// a request its limit denies: Allowed is true, and the other fields,
	// RetryAfter included, are the denial's.
	Shadowed bool
	// Limits holds each limit's own figures when the limiter's algorithm is
	// a composite (algorithms.All), in the order of its parts; the fields
	// above are then the most restrictive view of them (algorithms.Combine).
	// For a denied request or a peek they are what each limit would say
	// without consuming, since none consumed. It is nil for a single
	// algorithm and for decisions the store did not make.
	Limits []LimitDecision
}

// LimitDecision is one limit's part of a composite's Decision: the
// figures that limit alone reports, as Decision's fields of the same names
// do for a single algorithm.
type LimitDecision struct {
	Allowed    bool
	Limit      int
	Remaining  int
	RetryAfter time.Duration
	ResetAfter time.Duration
	Delay      time.Duration
}

// FailurePolicy says what a Limiter decides when its store fails. Either
// way the store's error is returned with the decision.
type FailurePolicy int

const (
	// FailClosed denies requests while the store fails. It is the default.
	FailClosed FailurePolicy = iota
	// FailOpen admits requests while the store fails. State the algorithm
	// cannot read (ErrCorruptState) is not a passing failure, so it is
	// still denied (Reset clears it); so is a step of a user's algorithm
	// that breaks the algorithms' contract (ErrInvalidParams).
	FailOpen
)

// Option configures a Limiter.
type Option func(*Limiter) error

// WithClock makes the limiter read time from c instead of the system
// clock: for its decisions, and for Wait's sleeping.
//
// A store that decides by its server's clock (Redis, Valkey and PostgreSQL
// by default; see store.ServerClocker) would ignore c's time, so New refuses any
// clock but clock.System with such a store: configure the store with
// WithServerClock(false) to decide by c.
func WithClock(c clock.Clock) Option {
	return func(l *Limiter) error {
		if isNil(c) {
			return fmt.Errorf("%w: nil clock", ErrInvalidParams)
		}
		l.clock = c
		return nil
	}
}

// WithName sets the limiter's name, which namespaces its keys: limiters with
// the same name and algorithm share state, so changing a limit's numbers
// under the same name applies to existing keys. A name matches
// [A-Za-z0-9_.-]{1,64}. A composite's (algorithms.All) algorithm name is
// "all" whatever its parts, so its namespace is "<name>:all", and adding,
// removing or reordering its parts keeps the other parts' counts.
//
// Without a name, a limiter's namespace is derived from its algorithm and
// parameters, so two limiters with different policies never share state,
// and changing the numbers starts from fresh state (for a composite: its
// parts and their numbers, in any order). Derived names are "p"
// followed by 16 lowercase hexadecimal digits; that form is reserved, so
// WithName refuses it and a named limiter can never share an unnamed one's
// state.
func WithName(name string) Option {
	return func(l *Limiter) error {
		if err := checkName("limiter name", name); err != nil {
			return err
		}
		if isDerivedName(name) {
			return fmt.Errorf("%w: limiter name %q has the reserved form of a derived name (p and 16 hex digits)", ErrInvalidParams, name)
		}
		l.name = name
		return nil
	}
}

// WithFailurePolicy sets what the limiter decides when the store fails.
func WithFailurePolicy(p FailurePolicy) Option {
	return func(l *Limiter) error {
		if p != FailClosed && p != FailOpen {
			return fmt.Errorf("%w: unknown failure policy %d", ErrInvalidParams, p)
		}
		l.policy = p
		return nil
	}
}

// policyStep is the failure policy's link: it decides what nothing after
// it decided, because of the error that came back. Every chain has it;
// a limiter without a chain applies the policy itself (Limiter.decide).
type policyStep struct {
	passForget
	policy FailurePolicy
}

func makePolicyStep(c *chainOf, next link) (link, error) {
	return &policyStep{passForget{next}, c.l.policy}, nil
}

func (p *policyStep) decide(ctx context.Context, t *Tier, k store.Key, req algorithms.Request, d *Decision) error {
	err := p.next.decide(ctx, t, k, req, d)
	if err != nil && d.Source == SourceNone {
		p.policy.decide(t, err, d)
	}
	return err
}

// decide makes d the decision p prescribes at tier t for err.
func (p FailurePolicy) decide(t *Tier, err error, d *Decision) {
	*d = Decision{Limit: int(t.maxCost), Source: SourceFailurePolicy}
	if p == FailOpen && !notStoresFault(err) {
		d.Allowed = true
	}
}

// Limiter decides whether keys may act now, under one algorithm, with state
// in one store. Create it with New; the zero value is not usable. Allow is
// the method most callers want. A Limiter is safe for concurrent use.
type Limiter struct {
	store store.Store
	alg   algorithms.Algorithm
	clock clock.Clock
	// systemClock is set when clock is clock.System, which the limiter
	// then reads through clock.UnixMicro, at half the cost of time.Now.
	systemClock bool
	name        string
	ns          string
	policy      FailurePolicy
	maxCost     int64
	// storeLink asks the store: the last link of head's chain, or the
	// whole path when head is nil (chain.go).
	storeLink storeLink
	// head is the first link of the path New built from the options, or
	// nil when they added none (chain.go).
	head link
	// makers holds the options' links while New runs, by their place in
	// the chain; nil afterwards.
	makers *[numLinks]linkMaker
	// perTier makes what the links keep for each tier (Tier.local).
	perTier []func(algorithms.Algorithm) (any, error)
	// closers are what the links do when the limiter is closed (Close).
	closers []func(context.Context) error
	// own is the tier of the limiter's own numbers, which Allow, AllowN,
	// Peek and Wait decide with (tier.go).
	own Tier
}

// New returns a limiter that applies alg to keys held in store. It reports
// an error wrapping ErrInvalidParams when alg's parameters or an option are
// unusable: a nil store, algorithm or clock (typed or not), or a clock other
// than clock.System with a store that decides by its server's clock.
//
// Every call to a store outside the process is bounded by a time budget,
// one second unless WithStoreTimeout says otherwise, and a caller's
// context that ends first is never counted against the store.
func New(st store.Store, alg algorithms.Algorithm, opts ...Option) (*Limiter, error) {
	if isNil(st) {
		return nil, fmt.Errorf("%w: nil store", ErrInvalidParams)
	}
	if isNil(alg) {
		return nil, fmt.Errorf("%w: nil algorithm", ErrInvalidParams)
	}
	if err := alg.Validate(); err != nil {
		return nil, err
	}
	if err := checkName("algorithm name", alg.Name()); err != nil {
		return nil, err
	}
	l := &Limiter{store: st, alg: alg, clock: clock.System, maxCost: alg.MaxCost()}
	if l.maxCost <= 0 {
		return nil, fmt.Errorf("%w: algorithm %s has max cost %d", ErrInvalidParams, alg.Name(), l.maxCost)
	}
	// The links the limiter has without options; an option replaces its
	// own.
	l.makers = &[numLinks]linkMaker{policyLink: makePolicyStep, budgetLink: makeBudget(-1)}
	for _, opt := range opts {
		if err := opt(l); err != nil {
			return nil, err
		}
	}
	if err := checkClock(st, l.clock); err != nil {
		return nil, err
	}
	l.systemClock = l.clock == clock.System
	name := l.name
	if name == "" {
		h := fnv.New64a()
		fmt.Fprintf(h, "%s %v", alg.Name(), alg)
		name = fmt.Sprintf("p%016x", h.Sum64())
	}
	l.ns = name + ":" + alg.Name()
	l.storeLink.init(st, alg)
	err := l.buildChain(l.makers)
	l.makers = nil
	if err != nil {
		return nil, err
	}
	l.own = Tier{l: l, alg: alg, maxCost: l.maxCost}
	l.own.setNumbers()
	if l.own.local, err = l.tierLocal(alg); err != nil {
		return nil, err
	}
	return l, nil
}

// checkClock refuses a clock other than clock.System with a store that
// decides by its server's clock, which would ignore it.
func checkClock(st store.Store, c clock.Clock) error {
	if sc, ok := st.(store.ServerClocker); ok && c != clock.System && sc.ServerClock() {
		return fmt.Errorf("%w: the store decides by its server's clock, so WithClock would be ignored; configure the store with WithServerClock(false) to use the limiter's clock", ErrInvalidParams)
	}
	return nil
}

// Algorithm returns the limiter's algorithm.
func (l *Limiter) Algorithm() algorithms.Algorithm { return l.alg }

// Store returns the limiter's store.
func (l *Limiter) Store() store.Store { return l.store }

// Namespace returns the namespace of the limiter's keys in its store.
func (l *Limiter) Namespace() string { return l.ns }

// Name returns the name given with WithName, or "" when none was given.
func (l *Limiter) Name() string { return l.name }

// Policy returns the numbers of the limiter's algorithm (see
// algorithms.Policy), and false when the algorithm does not state them
// (a user's algorithm that does not implement algorithms.PolicyStater).
func (l *Limiter) Policy() (algorithms.Policy, bool) { return l.own.Policy() }

// Allow reports whether key may make one request now, and consumes it if so.
func (l *Limiter) Allow(ctx context.Context, key string) (d Decision, err error) {
	// Not through AllowN: every function a Decision passes through by value
	// copies it once more, and the copy stalls (see decide).
	err = l.decide(ctx, &l.own, key, 1, false, &d)
	return d, err
}

// AllowN reports whether key may make a request of cost n now, and consumes
// n if so. A cost below 1 or above the algorithm's MaxCost is an error
// wrapping ErrInvalidCost, not a denial.
//
// When the store fails, AllowN returns the store's error together with the
// decision the failure policy prescribes.
func (l *Limiter) AllowN(ctx context.Context, key string, n int) (d Decision, err error) {
	err = l.decide(ctx, &l.own, key, n, false, &d)
	return d, err
}

// Peek reports whether key could make one request now, and what remains,
// without consuming anything.
func (l *Limiter) Peek(ctx context.Context, key string) (d Decision, err error) {
	err = l.decide(ctx, &l.own, key, 1, true, &d)
	return d, err
}

// Reset forgets key's state, as if it had never made a request.
func (l *Limiter) Reset(ctx context.Context, key string) error {
	if err := checkKey(key); err != nil {
		return err
	}
	k := store.Key{Namespace: l.ns, ID: key}
	if l.head != nil {
		return l.head.forget(ctx, k)
	}
	return l.storeLink.forget(ctx, k)
}

// Close gives back what the limiter holds of its store's budget, and
// makes it hold nothing more: the unspent shares of WithLocalQuota, after
// which every decision asks the store. It returns the first error the
// store returned; the limiter still decides after Close. A limiter without
// WithLocalQuota holds nothing, and Close does nothing. Call it when the
// process shuts down.
func (l *Limiter) Close(ctx context.Context) error {
	var first error
	for _, c := range l.closers {
		if err := c(ctx); err != nil && first == nil {
			first = err
		}
	}
	return first
}

// Wait blocks until key may make one request, consumes it, and returns the
// decision. See WaitN.
func (l *Limiter) Wait(ctx context.Context, key string) (Decision, error) {
	return l.WaitN(ctx, key, 1)
}

// WaitN blocks until key may make a request of cost n, consumes it, and
// returns the decision.
//
// It books the request's turn first, as golang.org/x/time/rate's Wait
// does: a reservation (Reserve) that may act as late as ctx's deadline
// allows, or at most a minute ahead when ctx has none, and then
// sleeps the reservation's Delay. A timer that fires late therefore delays
// this request but not the next one's turn, and a caller pacing itself
// with Wait reaches the configured rate. For the leaky bucket the Delay is
// the request's turn in the queue. The algorithms that serve only now (the
// fixed and sliding windows, the sliding log) cannot book a turn ahead:
// for them, and for a request further out than the reservation may reach,
// WaitN sleeps the decision's RetryAfter and asks again.
//
// It returns at once with an error when the request can never succeed (a
// cost above the algorithm's MaxCost); when the store fails, with the
// store's error and the failure policy's decision; and when the wait
// would outlast ctx's deadline, with an error that errors.Is reports as
// context.DeadlineExceeded, its message saying "would exceed", having
// taken nothing (a turn the leaky bucket queued past the deadline is
// given back). When ctx ends while waiting it returns ctx's error and
// cancels the booked turn (Reservation.Cancel, one more store call, of at
// most a second), so a waiter that gives up costs the limit what Cancel
// cannot give back and nothing more.
func (l *Limiter) WaitN(ctx context.Context, key string, n int) (Decision, error) {
	return l.wait(ctx, &l.own, key, n)
}

// waitAhead is how far ahead Wait books a turn when its context has no
// deadline. A request whose turn is further out sleeps until it is within
// waitAhead and books it then, so a waiter never holds more than a
// minute's worth of the limit ahead of time; the bucket algorithms bound
// how far a reservation may book in their own way (docs/reservations.md).
const waitAhead = time.Minute

// wait is WaitN at tier t.
func (l *Limiter) wait(ctx context.Context, t *Tier, key string, n int) (Decision, error) {
	for {
		// How long the wait may last: ctx's deadline is on the system
		// clock, the limiter's delays on its own, so they meet as
		// durations.
		ahead := waitAhead
		deadline, bounded := ctx.Deadline()
		if bounded {
			ahead = max(time.Until(deadline), 0)
		}
		r, err := l.reserve(ctx, t, key, n, ahead)
		if r == nil {
			return Decision{}, err // bad input: nothing was asked
		}
		d := r.d
		if err != nil {
			return d, err // the store failed: the failure policy's decision
		}
		if d.Allowed {
			// The turn is booked; sleep until it comes.
			delay := r.Delay()
			if delay <= 0 {
				return d, nil
			}
			if bounded && delay > time.Until(deadline) {
				// Only the leaky bucket, which queues whatever the
				// max delay, books a turn past it.
				l.cancelWait(ctx, r)
				return d, fmt.Errorf("%w: delay %v", errWouldExceedDeadline, delay)
			}
			select {
			case <-l.clock.After(delay):
				return d, nil
			case <-ctx.Done():
				l.cancelWait(ctx, r)
				return d, ctx.Err()
			}
		}
		// Not within reach: an algorithm that serves only now, or a turn
		// further out than ahead. Ask again once it may be: RetryAfter
		// counts from when the request read the clock, before its round
		// trip, so the time the answer took to come back is not slept
		// again (on a store deciding by its server's clock the next
		// request then reaches the server as the turn opens).
		wait := d.RetryAfter - time.Duration(l.now()-r.made)*time.Microsecond
		if bounded && wait > time.Until(deadline) {
			return d, fmt.Errorf("%w: retry after %v", errWouldExceedDeadline, d.RetryAfter)
		}
		select {
		case <-l.clock.After(wait):
		case <-ctx.Done():
			return d, ctx.Err()
		}
	}
}

// cancelWaitTimeout bounds the refund of a turn a Wait will not use, which
// runs after the waiter's context has ended.
const cancelWaitTimeout = time.Second

// cancelWait gives back the turn a Wait booked and will not use. The
// waiter's context may have ended, so the refund runs without its
// cancellation, for at most cancelWaitTimeout (and within the limiter's
// store budget); its error is dropped, since the caller is told why the
// wait ended instead.
func (l *Limiter) cancelWait(ctx context.Context, r *Reservation) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), cancelWaitTimeout)
	defer cancel()
	_ = r.Cancel(ctx)
}

// decide makes the decision for a request of cost n on key, with tier t's
// numbers, and writes it to d. (The decision travels by pointer: a
// Decision has too many fields for the compiler to pass it in registers
// between functions, and every copy of one on the hot path costs more
// than the field-by-field writes.)
func (l *Limiter) decide(ctx context.Context, t *Tier, key string, n int, peek bool, d *Decision) error {
	_, err := l.ask(ctx, t, key, n, algorithms.Request{Peek: peek}, d)
	return err
}

// now reads the limiter's clock in microseconds since the Unix epoch.
func (l *Limiter) now() int64 {
	if l.systemClock {
		return clock.UnixMicro()
	}
	return l.clock.Now().UnixMicro()
}

// checkKey reports an empty or oversized key. The check is inlined where
// it is called; the error is built out of line.
func checkKey(key string) error { return names.CheckKey(key) }

// isDerivedName reports whether name has the form New derives for an
// unnamed limiter: "p" and 16 lowercase hexadecimal digits.
func isDerivedName(name string) bool {
	if len(name) != 17 || name[0] != 'p' {
		return false
	}
	for _, c := range []byte(name[1:]) {
		if !('0' <= c && c <= '9' || 'a' <= c && c <= 'f') {
			return false
		}
	}
	return true
}

// isNil reports whether v is nil or an interface holding a nil pointer,
// map, slice, channel or func, which would panic on first use.
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

// checkName is names.CheckName.
func checkName(what, name string) error { return names.CheckName(what, name) }

package ratelimit

import (
	"context"
	"fmt"
	"math"
	"sync"
	"time"

	"github.com/ratelimitkit/ratelimit/algorithms"
	"github.com/ratelimitkit/ratelimit/store"
)

// Reservation is a request admitted now to act later, as
// golang.org/x/time/rate's Reservation: Limiter.Reserve takes the cost at
// once and says, in Delay, how long the caller must wait before acting;
// Cancel gives back what the algorithm can when the caller will not act
// after all. What each algorithm can reserve and give back is in
// docs/reservations.md: the token bucket and GCRA reserve into the future
// and give back as x/time/rate does; the leaky bucket queues; the window
// algorithms serve only now and give back within the window; the sliding
// log gives nothing back.
//
// A Reservation is safe for concurrent use; Cancel takes effect once.
type Reservation struct {
	l    *Limiter
	t    *Tier
	key  string
	n    int64
	ok   bool
	made int64 // µs, the limiter's clock when the reservation was made
	act  int64 // µs, its time to act as a refund names it
	d    Decision

	mu        sync.Mutex
	cancelled bool
}

// Reserve asks for n units of key's limit now, to act within maxDelay: a
// request the algorithm can serve within maxDelay from now is admitted at
// once, consuming n, and the Reservation's Delay says how long to wait
// before acting. A maxDelay of 0 admits only what Allow would admit. A
// reservation that is not admitted (OK false) consumed nothing; its
// Decision says why and for how long (RetryAfter).
//
// A cost below 1 or above the algorithm's MaxCost is an error wrapping
// ErrInvalidCost, and a negative maxDelay one wrapping ErrInvalidParams.
// When the store fails, Reserve returns the store's error with the
// reservation the failure policy prescribes (see Decision.Source), whose
// Cancel gives nothing back.
func (l *Limiter) Reserve(ctx context.Context, key string, n int, maxDelay time.Duration) (*Reservation, error) {
	return l.reserve(ctx, &l.own, key, n, maxDelay)
}

// Reserve is Limiter.Reserve at t's numbers; the reservation's Cancel
// gives back at them too.
func (t *Tier) Reserve(ctx context.Context, key string, n int, maxDelay time.Duration) (*Reservation, error) {
	if !t.usable() {
		return nil, errNoTier
	}
	return t.l.reserve(ctx, t, key, n, maxDelay)
}

// reserve is Reserve at tier t.
func (l *Limiter) reserve(ctx context.Context, t *Tier, key string, n int, maxDelay time.Duration) (*Reservation, error) {
	if maxDelay < 0 {
		return nil, fmt.Errorf("%w: reservation max delay %v is negative", ErrInvalidParams, maxDelay)
	}
	md := int64(min(maxDelay, algorithms.MaxPeriod) / time.Microsecond)
	r := &Reservation{l: l, t: t, key: key, n: int64(n)}
	var err error
	r.made, err = l.ask(ctx, t, key, n, algorithms.Request{MaxDelay: md}, &r.d)
	if r.made < 0 {
		return nil, err // bad input: nothing was asked
	}
	r.ok = r.d.Allowed
	// The time to act a refund names: for a composite, the earliest of its
	// limits' (each limit built on the reservation from its own time to
	// act, and an earlier time only gives back less).
	delay := r.d.Delay
	for i, p := range r.d.Limits {
		if i == 0 || p.Delay < delay {
			delay = p.Delay
		}
	}
	r.act = r.made + int64(delay/time.Microsecond)
	return r, err
}

// ask decides req (a decision, a reservation or a refund), with key's
// namespace, the cost n and the limiter's clock filled in, through the
// limiter's chain into d. It returns the time it decided at, or -1 with
// the error of input it refused (a bad key, cost or clock reading).
func (l *Limiter) ask(ctx context.Context, t *Tier, key string, n int, req algorithms.Request, d *Decision) (int64, error) {
	if err := checkKey(key); err != nil {
		return -1, err
	}
	req.Cost = int64(n)
	if req.Cost < 1 || req.Cost > t.maxCost {
		return -1, fmt.Errorf("%w: cost %d outside 1..%d for %s", ErrInvalidCost, n, t.maxCost, t.alg.Name())
	}
	req.Now = l.now()
	if req.Now < 0 || req.Now > algorithms.MaxExact/2 {
		return -1, fmt.Errorf("%w: %d µs since the epoch", ErrInvalidTime, req.Now)
	}
	k := store.Key{Namespace: l.ns, ID: key}
	if l.head != nil {
		return req.Now, l.head.decide(ctx, t, k, req, noescape(d))
	}
	// No link: the store, then the failure policy, as the chain's last
	// two links would.
	if err := l.storeLink.decide(ctx, t, k, req, d); err != nil {
		l.policy.decide(t, err, d)
		return req.Now, err
	}
	return req.Now, nil
}

// OK reports whether the reservation was admitted: false when the limit
// cannot serve it within the max delay asked (or ever: a cost above the
// burst never is).
func (r *Reservation) OK() bool { return r != nil && r.ok }

// Decision returns the decision that made the reservation. For an admitted
// one, Delay is how long after Reserve the caller should act.
func (r *Reservation) Decision() Decision {
	if r == nil {
		return Decision{}
	}
	return r.d
}

// TimeToAct returns when the caller may act on an admitted reservation,
// by the limiter's clock, and the zero Time for one that was not admitted.
func (r *Reservation) TimeToAct() time.Time {
	if !r.OK() {
		return time.Time{}
	}
	return time.UnixMicro(r.made).Add(r.d.Delay)
}

// Delay returns how long from now, by the limiter's clock, the caller must
// wait before acting on the reservation: zero once its time has come, and
// the largest Duration for a reservation that was not admitted (as
// x/time/rate's InfDuration).
func (r *Reservation) Delay() time.Duration {
	if !r.OK() {
		return math.MaxInt64
	}
	return r.DelayFrom(r.l.clock.Now())
}

// DelayFrom is Delay from the time t instead of now.
func (r *Reservation) DelayFrom(t time.Time) time.Duration {
	if !r.OK() {
		return math.MaxInt64
	}
	return max(r.TimeToAct().Sub(t), 0)
}

// Cancel gives back to the limit what the algorithm can of the
// reservation's cost, for a caller that will not act on it: see
// algorithms.Request.Refund and docs/reservations.md for what each
// algorithm gives back, and when it is too late to. It is a no-op on a
// reservation that was not admitted, one the store did not make (a
// failure policy's, the fallback's, or one shadow mode admitted), one of
// a user's own algorithm (which is never sent a refund), and on every
// call after the first, so the cost is given back once at most. A store
// failure returns its error; the reservation then counts as cancelled,
// since the store may have applied the refund before failing.
func (r *Reservation) Cancel(ctx context.Context) error {
	if !r.OK() || r.d.Source != SourceStore || r.d.Shadowed {
		return nil
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.cancelled {
		return nil
	}
	r.cancelled = true
	if !refundable(r.t.alg) {
		return nil
	}
	var d Decision
	_, err := r.l.ask(ctx, r.t, r.key, int(r.n), algorithms.Request{Refund: true, Act: r.act}, &d)
	return err
}

// refundable reports whether alg is sent refunds: a built-in algorithm, or
// a composite (whose parts that are a user's own are asked a peek).
func refundable(alg algorithms.Algorithm) bool {
	if _, ok := alg.(algorithms.Composite); ok {
		return true
	}
	return !ownAlgorithm(alg)
}

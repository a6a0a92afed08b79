package ratelimit

import (
	"context"
	"fmt"
	"hash/maphash"
	"math/bits"
	"sync"
	"sync/atomic"
	"time"

	"github.com/ratelimitkit/ratelimit/algorithms"
	"github.com/ratelimitkit/ratelimit/algorithms/forms"
	"github.com/ratelimitkit/ratelimit/store"
)

// WithLocalQuota makes the limiter decide most requests in process memory,
// from shares of each key's budget that it takes from the store: a share of
// s units is one request of cost s through the store's normal path (its
// Decider, the same written-once forms), so the store has counted it before
// any of it is spent. Requests are then admitted from the share, without a
// store call, until it is spent or lifetime has passed since it was taken;
// a share of units bound to their window (a fixed window's) also ends with
// the window the store counted it in. A key with no live share gives back
// what is left of it and takes a new share; a live share that holds less
// than a request's cost is topped up: the request spends what it holds and
// takes from the store only what it lacks (a new share of at least that),
// so a share is never dropped for holding too little (when the store
// counted the new units in a later fixed window, the request spends its
// whole cost from them, or is the store's decision alone). A
// request whose clock reading is older than the share (a caller that read
// its clock, then waited) spends from it: it is decided after the store
// counted the share.
//
// Reservations with a max delay (Limiter.Reserve, and Wait when it books
// its slot) and every refund (Reservation.Cancel) are not served from
// shares: they go to the store, which books and gives back exactly as it
// does without local quota. A reservation with a max delay of 0 is a
// decision like Allow's and may be served from a share; its Cancel gives
// the unit back to the store as any refund does.
//
// Share sizes follow demand, per key: the first share is 1 unit, the next
// doubles when a share was spent within a quarter of lifetime and halves
// when one expires unspent, never more than maxShare nor a quarter of the
// burst (the window's limit, the bucket's burst: at least four processes
// can hold shares at once), and never less than the request's cost. A
// share the store denies in full is asked again at what the store says
// remains, and a request that does not fit is the store's denial of it.
//
// The cost, in each direction, is bounded (docs/scaling.md, "Local quota",
// with the proofs): with N processes holding shares of at most S units,
//
//   - fixed window: no over-admission, in any window, across all processes;
//   - token bucket, leaky bucket, GCRA (rate r = limit/period, burst B):
//     over any span of length T, at most B + r·(T + lifetime) admitted,
//     so at most min(r·lifetime, N·S) more than without shares;
//   - sliding window and sliding log: at most N·S more than the limit in
//     any period;
//   - under-admission: at any instant at most N·(S−1) units are counted by
//     the store and held unspent (each process holds one share per key,
//     of which its taker spent at least one unit); each is spent or given
//     back within about a lifetime of its share's last use, so a window
//     (fixed window) loses at most N·(S−1), those held when it ends, and
//     nothing is lost past its period. A bucket's give-back keeps what
//     could have refilled while the share held it (rounded up to a unit);
//     a sliding log keeps what it counted until it leaves its period.
//
// A decision from a share has Source SourceStore (the store counted it);
// its Remaining is the share's unspent units plus what the store said
// remained when the share was taken, never more than Limit, and its
// ResetAfter counts down from the store's; a composite's has no Limits.
// Peek asks the store and adds the share's unspent units to Remaining. A
// leaky bucket's Delay is each unit's place in the share's turn in the
// queue.
//
// Unspent units go back to the store in one refund (algorithms.Request's
// Refund) whenever a share is replaced (it expired), when the limiter
// closes (Limiter.Close, which also stops taking shares) and when no
// request has spent from a share for half a lifetime (then the key's next
// share is half the size): a bucket gets
// back what has not refilled since, never more than its empty state; a
// window, what was counted in the window that is still current; a sliding
// log keeps them until they leave its period. What each algorithm's refund
// gives back, and how its counted units age, the link reads from the
// algorithm's facts (algorithms.Facts), never from its name. A goroutine
// of the limiter's does the idle give-backs while it holds shares, and
// ends when it holds none (two lifetimes after the last share was taken)
// or when it is closed. A give-back the store fails leaves its units to
// expire with their share.
//
// It composes with the deny cache (a denial is the store's, so the cache
// keeps it), the fallback and the breaker (a share is taken through them;
// what the fallback admits is not a share), tiers (a share is spent only at
// the numbers it was taken with; a request at other numbers gives it back)
// and composites without a queue part (a leaky bucket). maxShare below 1,
// a lifetime that is not a positive whole number of microseconds, an
// algorithm that is not built in (nor a composite of built-ins) or does
// not state its facts (algorithms.FactStater), or a composite with a queue
// part, is an error wrapping ErrInvalidParams.
//
// The memory the shares take is bounded by the keys decided within two
// lifetimes: a share that holds nothing is reclaimed when the map it lives
// in grows, and one that holds units once the idle give-back has run.
func WithLocalQuota(maxShare int, lifetime time.Duration) Option {
	return func(l *Limiter) error {
		if err := checkPositive("local quota max share", maxShare); err != nil {
			return err
		}
		if lifetime <= 0 || lifetime%time.Microsecond != 0 || lifetime > algorithms.MaxPeriod {
			return fmt.Errorf("%w: local quota lifetime %v must be a positive whole number of microseconds up to %v", ErrInvalidParams, lifetime, algorithms.MaxPeriod)
		}
		return l.addLink(quotaLink, func(c *chainOf, next link) (link, error) {
			q := &quota{next: next, ns: c.l.ns, now: c.l.now, after: c.l.clock.After,
				maxShare: int64(maxShare), lifetime: int64(lifetime / time.Microsecond), seed: maphash.MakeSeed(),
				done: make(chan struct{})}
			for i := range q.shards {
				q.shards[i].m = make(map[string]*share)
			}
			if _, err := q.numbers(c.l.alg); err != nil {
				return nil, err
			}
			q.slot = c.perTier(q.numbers)
			c.onClose(q.close)
			return q, nil
		})
	}
}

// quotaShards is how many shards the shares are split over.
const quotaShards = 16

// quota is WithLocalQuota's link.
type quota struct {
	next     link
	ns       string // the limiter's namespace, for the keys given back
	now      func() int64
	after    func(time.Duration) <-chan time.Time // the limiter's clock's
	maxShare int64
	lifetime int64 // µs
	slot     int   // Tier.local index of the tier's quotaNumbers
	seed     maphash.Seed
	shards   [quotaShards]quotaShard
	closed   atomic.Bool // set by Limiter.Close
	// idling is set while the goroutine that gives back idle shares
	// (idle) runs: only while some share is held. done ends it (close).
	idling atomic.Bool
	done   chan struct{}
}

type quotaShard struct {
	mu sync.Mutex
	m  map[string]*share
	// swept is the map's size after its last sweep of expired shares.
	swept int
	_     [32]byte // keeps shards on separate cache lines
}

// quotaNumbers is what the link keeps for a tier's numbers, from its
// algorithm's facts (algorithms.Facts): the link knows no algorithm by
// name.
type quotaNumbers struct {
	most int64 // the largest share
	// fixed lists the parts whose units belong to the window they were
	// counted in (Facts.WindowBound): a share of them lives within that
	// window.
	fixed []fixedPart
	// windows lists the window lengths (µs) of the parts that count in
	// aligned windows (Facts.Window), whose refunds give back within the
	// window Act names.
	windows []int64
	// perUnit is, for a queue (Facts.Queue: the leaky bucket), the µs one
	// unit takes to leave it (period / limit, rounded up); 0 otherwise.
	// period and limit are its numbers (µs, units).
	perUnit       int64
	period, limit int64
	// givesBack is set when a refund can give anything back (some part's
	// Facts.Refunds).
	givesBack bool
	// refills lists the rates (limit per period µs) of the parts that
	// refill continuously and give back as of now (Facts.Refills, not a
	// queue): a give-back keeps what they could have refilled since the
	// share was taken.
	refills []rateOf
}

// rateOf is limit units per period µs.
type rateOf struct{ limit, period int64 }

// refilled returns, rounded up, how many units rate r refills in elapsed
// µs, at most most.
func (r rateOf) refilled(elapsed, most int64) int64 {
	if elapsed <= 0 {
		return 0
	}
	hi, lo := bits.Mul64(uint64(elapsed), uint64(r.limit))
	if hi != 0 {
		return most
	}
	q, rem := lo/uint64(r.period), lo%uint64(r.period)
	if rem != 0 {
		q++
	}
	return int64(min(q, uint64(most)))
}

// fixedPart is a part whose units belong to their window: its index in a
// composite's Decision.Limits (-1 for a single algorithm) and its window
// (µs).
type fixedPart struct {
	part   int
	period int64
}

// numbers makes the link's numbers for alg from its facts, or says why it
// cannot take shares of it: it takes shares only of the built-in
// algorithms (and composites of them), which are the algorithms that are
// sent refunds, and only of those that state their facts.
func (q *quota) numbers(alg algorithms.Algorithm) (any, error) {
	n := &quotaNumbers{most: min(q.maxShare, alg.MaxCost())}
	var facts algorithms.Facts
	if s, ok := alg.(algorithms.FactStater); ok {
		facts = s.Facts()
	}
	algs, parts := []algorithms.Algorithm{alg}, []algorithms.Facts{facts}
	if c, ok := alg.(algorithms.Composite); ok {
		algs, parts = c.Parts(), facts.Parts
	}
	for i, p := range algs {
		var f algorithms.Facts
		if i < len(parts) {
			f = parts[i]
		}
		if forms.BuiltinOf(p) == nil || f.Limit < 1 || f.Burst < 1 || f.Period <= 0 {
			return nil, fmt.Errorf("%w: local quota: %s is not a built-in algorithm that states its facts, whose bounds with shares are known", ErrInvalidParams, p.Name())
		}
		n.most = min(n.most, max(1, f.Burst/4))
		if f.Window > 0 {
			n.windows = append(n.windows, int64(f.Window/time.Microsecond))
			if f.WindowBound {
				part := i
				if len(algs) == 1 {
					part = -1
				}
				n.fixed = append(n.fixed, fixedPart{part: part, period: int64(f.Window / time.Microsecond)})
			}
		}
		n.givesBack = n.givesBack || f.Refunds
		if f.Refills && !f.Queue {
			n.refills = append(n.refills, rateOf{limit: f.Limit, period: int64(f.Period / time.Microsecond)})
		}
		if f.Queue {
			if len(algs) > 1 {
				return nil, fmt.Errorf("%w: local quota: a composite with a queue part, %s (its shares' delays are not spread)", ErrInvalidParams, p.Name())
			}
			period := int64(f.Period / time.Microsecond)
			n.perUnit = (period + f.Limit - 1) / f.Limit
			n.period, n.limit = period, f.Limit
		}
	}
	return n, nil
}

// share is what the link holds for one key: its latest share of the
// key's budget, and the size of the next.
type share struct {
	tier  *Tier // the numbers it was taken with
	units int64 // unspent
	size  int64 // units taken
	next  int64 // the size of the next share
	taken int64 // µs: when it was taken (before the store counted it)
	used  int64 // µs: when a request last spent from it
	// counted is an instant (µs) within every window of a fixed part the
	// store counted the share in, at or after taken: the time a give-back
	// names, unless now still lies in those windows.
	counted int64
	expires int64 // µs: when it may no longer be spent
	full    bool  // it lives the whole lifetime (not cut short by a window)
	// The store's figures when it was taken.
	limit, remaining int64
	resetAt          int64 // µs
	turn             int64 // µs: a leaky bucket's first unit leaves the queue
	// fetching is closed when the share being taken arrives; nil when
	// none is.
	fetching chan struct{}
}

func (q *quota) shard(key string) *quotaShard {
	return &q.shards[maphash.String(q.seed, key)%quotaShards]
}

// live reports whether e may be spent at now. A reading older than the
// share (a caller that read its clock, then waited) may spend it: the
// request is decided after the store counted the share, whatever its
// reading says.
func (e *share) live(now int64) bool { return e.units > 0 && now < e.expires }

func (q *quota) decide(ctx context.Context, t *Tier, k store.Key, req algorithms.Request, d *Decision) error {
	switch {
	case req.Peek:
		return q.peek(ctx, t, k, req, d)
	case req.Refund || req.MaxDelay > 0:
		// A reservation, or the refund of one: the store books it and
		// gives it back as it does without local quota (a share's units
		// are all "now", and a share is not a place in the store's
		// future).
		return q.next.decide(ctx, t, k, req, d)
	}
	sh := q.shard(k.ID)
	sh.mu.Lock()
	var e *share
	for {
		e = sh.m[k.ID]
		if e == nil {
			if q.closed.Load() {
				sh.mu.Unlock()
				return q.next.decide(ctx, t, k, req, d)
			}
			e = &share{tier: t, next: 1}
			sh.add(k.ID, e, req.Now, q.lifetime)
		}
		if e.fetching == nil {
			break
		}
		// Another caller is taking a share for the key: wait for it,
		// then judge it by the clock as it is then, not by the reading
		// taken before the wait.
		ch := e.fetching
		sh.mu.Unlock()
		select {
		case <-ch:
		case <-ctx.Done():
			return ctx.Err()
		}
		if now := q.now(); now > req.Now && now <= algorithms.MaxExact/2 {
			req.Now = now
		}
		sh.mu.Lock()
	}
	nums := t.local[q.slot].(*quotaNumbers)
	var back unspent
	giving := false
	if e.tier != t && !t.sameNumbers(e.tier) {
		back, giving = e.unspent(k.ID) // given back at the numbers it was taken with
		*e = share{tier: t, next: 1}
	}
	if e.live(req.Now) && e.units >= req.Cost {
		e.spend(nums, req, d)
		sh.mu.Unlock()
		return nil
	}
	// Take a share, of a size that follows demand. A live share that holds
	// less than the cost is topped up, not replaced: the request spends
	// what is left of it and takes from the store only what it lacks (a
	// share of at least that), so no unit the store counted is left
	// unspent by a replacement (a sliding log cannot take them back, a
	// bucket's give-back keeps what could have refilled). What is left of
	// a share that is no longer live goes back to the store first, in one
	// refund.
	switch {
	case e.units > 0 && req.Now >= e.expires && e.full:
		e.next = max(1, e.next/2) // expired unspent
	case e.size > 0 && e.units < req.Cost && req.Now-e.taken < q.lifetime/4:
		e.next = e.next * 2 // spent quickly
	}
	e.next = min(e.next, nums.most)
	need, held := req.Cost, int64(0)
	if !giving && e.live(req.Now) {
		// Kept for the request while the rest is taken (restored to the
		// share if the store does not admit it).
		held, e.units = e.units, 0
		need -= held
	}
	size := max(e.next, need)
	if !giving && held == 0 {
		back, giving = e.unspent(k.ID)
		e.size = 0
	}
	ch := make(chan struct{})
	e.fetching = ch
	sh.mu.Unlock()

	if giving {
		// Best effort: a refund the store fails leaves the units to
		// expire, as a share held by a process that stopped would.
		_ = q.giveBack(ctx, back, req.Now)
	}
	size, err := q.take(ctx, t, k, req, need, size, d)
	after := q.now()

	sh.mu.Lock()
	e.fetching = nil
	close(ch)
	giving = false
	redo := false
	switch {
	case err == nil && d.Source == SourceStore && d.Allowed:
		counted := e.counted
		e.took(t, nums, req, size, need, q.lifetime, after, d)
		if held > 0 && nums.crossed(counted, e.counted) {
			// The store counted the new units in a later window than the
			// held ones, which are worth nothing there: the request spends
			// its whole cost from the new share, or, when that holds too
			// little, gives it back and is the store's decision alone.
			if e.units >= held {
				e.units -= held
				d.Remaining = int(min(e.remaining+e.units, e.limit))
			} else {
				e.units = size
				back, giving = e.unspent(k.ID)
				redo = true
				break
			}
		}
		if q.closed.Load() {
			// Closed while the share was taken: keep none, and give
			// back what is left of it.
			back, giving = e.unspent(k.ID)
		} else if e.units > 0 && !q.idling.Swap(true) {
			go q.idle()
		}
	case err == nil && d.Allowed:
		// The fallback admitted what the request lacked: it spends the
		// held units too.
	default:
		// Denied, or the store failed: the request spent nothing, and the
		// share keeps what it held.
		e.units = held
		if err == nil && d.Source == SourceStore {
			e.next = max(1, e.next/2)
			if held > 0 && d.Limit > 0 {
				d.Remaining = min(d.Remaining+int(held), d.Limit)
			}
		}
		if held > 0 && q.closed.Load() {
			back, giving = e.unspent(k.ID)
		}
	}
	sh.mu.Unlock()
	if giving {
		_ = q.giveBack(ctx, back, after)
	}
	if redo {
		*d = Decision{}
		return q.next.decide(ctx, t, k, req, d)
	}
	return err
}

// crossed reports whether a fixed part counted a share at counted in a
// later window than one at was (the instants within their windows that
// share.counted keeps).
func (n *quotaNumbers) crossed(was, counted int64) bool {
	for _, f := range n.fixed {
		if counted/f.period != was/f.period {
			return true
		}
	}
	return false
}

// take asks the rest of the chain for a share of size units (at least
// need, what req lacks), and when the store denies it, for what the store
// says remains, at least need: the store's decision of need units when
// less remains. It returns the size asked last.
func (q *quota) take(ctx context.Context, t *Tier, k store.Key, req algorithms.Request, need, size int64, d *Decision) (int64, error) {
	r := req
	r.Cost = size
	err := q.next.decide(ctx, t, k, r, d)
	if err != nil || d.Allowed || size == need || d.Source != SourceStore {
		return size, err
	}
	r.Cost = max(need, min(int64(d.Remaining), size-1))
	*d = Decision{}
	return r.Cost, q.next.decide(ctx, t, k, r, d)
}

// took makes e the share of size units the store admitted in d for req,
// of which req spends spent (its cost, less what it held of the last
// share), and makes d req's decision. after is the limiter's clock when
// the store had answered.
func (e *share) took(t *Tier, nums *quotaNumbers, req algorithms.Request, size, spent, lifetime, after int64, d *Decision) {
	e.tier = t
	e.size, e.units, e.taken, e.used = size, size-spent, req.Now, req.Now
	e.counted, e.expires, e.full = req.Now, req.Now+lifetime, true
	// A fixed window's share lives within the window it was counted in:
	// ResetAfter, counted from before the store's own clock read, is no
	// later than the window's end.
	for _, f := range nums.fixed {
		ra := d.ResetAfter
		if f.part >= 0 {
			if f.part >= len(d.Limits) {
				e.expires = req.Now // no figures: spend nothing locally
				continue
			}
			ra = d.Limits[f.part].ResetAfter
		}
		e.within(req.Now+int64(ra/time.Microsecond), f.period, after-req.Now)
	}
	e.limit, e.remaining = int64(d.Limit), int64(d.Remaining)
	e.resetAt = req.Now + int64(d.ResetAfter/time.Microsecond)
	e.turn = req.Now + int64(d.Delay/time.Microsecond)
	d.Remaining = int(min(e.remaining+e.units, e.limit))
}

// within keeps e's life within the window of period that ends at end by
// the limiter's clock (µs), which the store told within a call of
// duration µs, and makes e.counted an instant in that window. Windows are
// aligned (algorithms.Facts.Window): when the next multiple of period is
// within the call's duration of end, the clocks agree and it is the
// window's end; otherwise the window is taken as the period before end.
func (e *share) within(end, period, duration int64) {
	if end < e.expires {
		e.expires, e.full = end, false
	}
	start := end - period
	if aligned := (end + period - 1) / period * period; aligned-end <= duration {
		start = aligned - period
	}
	e.counted = max(e.counted, start)
}

// spend admits req from e, with nums, into d.
func (e *share) spend(nums *quotaNumbers, req algorithms.Request, d *Decision) {
	place := e.size - e.units // the request's first unit's place in the share
	e.units -= req.Cost
	e.used = max(e.used, req.Now)
	d.Allowed = true
	d.Limit = int(e.limit)
	d.Remaining = int(min(e.remaining+e.units, e.limit))
	d.ResetAfter = time.Duration(max(e.resetAt-req.Now, 0)) * time.Microsecond
	if nums.perUnit > 0 {
		// A leaky bucket: the share's units leave the queue one after
		// the other from its turn.
		d.Delay = time.Duration(max(e.turn+place*nums.perUnit-req.Now, 0)) * time.Microsecond
	}
	d.Source = SourceStore
}

// peek asks the store, and counts in the live share of the key.
func (q *quota) peek(ctx context.Context, t *Tier, k store.Key, req algorithms.Request, d *Decision) error {
	err := q.next.decide(ctx, t, k, req, d)
	if err != nil || d.Source != SourceStore {
		return err
	}
	sh := q.shard(k.ID)
	sh.mu.Lock()
	units := int64(0)
	if e := sh.m[k.ID]; e != nil && e.tier.sameNumbers(t) && e.live(req.Now) {
		units = e.units
	}
	sh.mu.Unlock()
	if units > 0 {
		d.Remaining = min(d.Remaining+int(units), d.Limit)
		if units >= req.Cost && !d.Allowed {
			d.Allowed, d.RetryAfter = true, 0
		}
	}
	return nil
}

// forget drops k's share, then has the rest of the chain forget k.
func (q *quota) forget(ctx context.Context, k store.Key) error {
	sh := q.shard(k.ID)
	sh.mu.Lock()
	delete(sh.m, k.ID)
	sh.mu.Unlock()
	return q.next.forget(ctx, k)
}

// close gives back every unspent share and stops taking new ones.
func (q *quota) close(ctx context.Context) error {
	if !q.closed.Swap(true) {
		close(q.done)
	}
	now := q.now()
	var first error
	for i := range q.shards {
		sh := &q.shards[i]
		sh.mu.Lock()
		held := sh.m
		sh.m = make(map[string]*share)
		var back []unspent
		for id, e := range held {
			if u, ok := e.unspent(id); ok {
				back = append(back, u)
			}
		}
		sh.mu.Unlock()
		for _, u := range back {
			if err := q.giveBack(ctx, u, now); err != nil && first == nil {
				first = err
			}
		}
	}
	return first
}

// unspent is what a share gives back: units taken at taken with tier's
// numbers, for key id.
type unspent struct {
	id                 string
	tier               *Tier
	units, size, taken int64
	counted            int64 // the share's
	turn               int64 // a leaky bucket's: the share's first unit leaves the queue
}

// unspent takes e's unspent units, if it holds any, for giving back: e then
// holds none. Call it with e's shard locked.
func (e *share) unspent(id string) (unspent, bool) {
	if e.fetching != nil || e.units <= 0 {
		return unspent{}, false
	}
	u := unspent{id: id, tier: e.tier, units: e.units, size: e.size, taken: e.taken,
		counted: e.counted, turn: e.turn}
	e.units = 0
	return u, true
}

// giveBack returns u's units to the store in one refund through the rest
// of the chain (the fallback and the deny cache never serve one), at the
// time to act that act names; it asks nothing when the refund could give
// nothing back.
func (q *quota) giveBack(ctx context.Context, u unspent, now int64) error {
	nums := u.tier.local[q.slot].(*quotaNumbers)
	act, ok := nums.act(u, now)
	// A bucket's refund as of now gives back whatever its state owes, up
	// to the cost: units the bucket refilled while the share held them
	// (it may have been full in between, then drained by others) must not
	// come back twice, so the give-back keeps what could have refilled
	// since the share was taken.
	cost := u.units
	for _, r := range nums.refills {
		cost = min(cost, u.units-r.refilled(now-u.taken, u.units))
	}
	if !ok || cost <= 0 {
		return nil
	}
	var d Decision
	req := algorithms.Request{Now: now, Cost: cost, Refund: true, Act: act}
	return q.next.decide(ctx, u.tier, store.Key{Namespace: q.ns, ID: u.id}, req, &d)
}

// act returns the time to act a refund of u's units at now names, by the
// facts of what each part's refund gives back, and false when it could
// give nothing back:
//
//   - a queue (algorithms.Facts.Queue): the queue place of the share's
//     first unspent unit, from the share's turn;
//   - otherwise now, while now lies in the window (of every part that
//     counts in windows) the share was counted in: the buckets
//     (Facts.Refills) give back what has not refilled, the windows within
//     their window; for a bucket, now plus the time the share was held
//     (see below);
//   - otherwise an instant of the windows the share was counted in: those
//     still current give back, the rest nothing (a fixed window's units
//     are worth nothing after their window); and nothing at all once no
//     window is current (a reading older than the share's window takes
//     it as current: the store counts into the window it holds).
func (n *quotaNumbers) act(u unspent, now int64) (int64, bool) {
	if !n.givesBack {
		return 0, false
	}
	if n.perUnit > 0 {
		spent := u.size - u.units
		return u.turn + (spent*n.period+n.limit-1)/n.limit, true
	}
	same, any := true, false
	for _, p := range n.windows {
		switch {
		case now/p == u.counted/p:
			any = true
		case now/p < u.counted/p:
			// A reading older than the window the store counted the share
			// in (another process's clock moved the key's window on): the
			// store still counts in that window.
			any, same = true, false
		default:
			same = false
		}
	}
	switch {
	case same && len(n.refills) > 0:
		// A bucket compares Act with its own clock, which on a store that
		// decides by its server's clock reads later than now: Act = now
		// would have passed by then and give nothing back. Name now plus
		// the time the share has been held, which the give-back's cost
		// already leaves out (what could have refilled meanwhile): the
		// bucket gives back no more than the units never spent, less what
		// later reservations built on. (Within the windows, when there
		// are any.)
		late := now + max(now-u.taken, 0)
		for _, p := range n.windows {
			if late/p != u.counted/p {
				return now, true
			}
		}
		return late, true
	case same:
		return now, true
	case any:
		return u.counted, true
	}
	return 0, false
}

// idle gives back, every half lifetime, the unspent units of the shares
// no request has spent from for half a lifetime (expired or not), and
// drops the shares taken two lifetimes ago, which hold none by then; it returns when the link holds no share (it is
// started again by the next share taken) or the limiter is closed.
func (q *quota) idle() {
	half := time.Duration(max(q.lifetime/2, 1)) * time.Microsecond
	for {
		select {
		case <-q.after(half):
		case <-q.done:
			q.idling.Store(false)
			return
		}
		now := q.now()
		held := 0
		for i := range q.shards {
			sh := &q.shards[i]
			var back []unspent
			sh.mu.Lock()
			for id, e := range sh.m {
				if e.fetching != nil {
					continue
				}
				if now-e.used >= q.lifetime/2 {
					if u, ok := e.unspent(id); ok {
						back = append(back, u)
						e.next = max(1, e.next/2) // a quiet key takes smaller shares
					}
				}
				if e.units == 0 && now-e.taken >= 2*q.lifetime {
					delete(sh.m, id)
				}
			}
			held += len(sh.m)
			sh.mu.Unlock()
			for _, u := range back {
				// Best effort: units the store does not take back in time
				// expire with their share (the store call is bounded by
				// the limiter's budget too).
				ctx, cancel := context.WithTimeout(context.Background(), max(half, time.Second))
				_ = q.giveBack(ctx, u, now)
				cancel()
			}
		}
		if held == 0 {
			q.idling.Store(false)
			// A share taken since the count started its own goroutine,
			// unless this one was still marked running: then carry on.
			if q.holds() && !q.idling.Swap(true) {
				continue
			}
			return
		}
	}
}

// holds reports whether any shard holds a share.
func (q *quota) holds() bool {
	for i := range q.shards {
		sh := &q.shards[i]
		sh.mu.Lock()
		n := len(sh.m)
		sh.mu.Unlock()
		if n > 0 {
			return true
		}
	}
	return false
}

// add inserts e for key, first sweeping from the shard the shares not
// taken for two lifetimes when it has doubled in size since its last sweep:
// what the shard holds is then bounded by the keys decided within two
// lifetimes (the second keeps a busy key's share size).
func (sh *quotaShard) add(key string, e *share, now, lifetime int64) {
	if len(sh.m) >= max(64, 2*sh.swept) {
		for id, old := range sh.m {
			// (A share with units left is the idle goroutine's to give
			// back first.)
			if old.fetching == nil && old.units == 0 && (now-old.taken >= 2*lifetime || now < old.taken) {
				delete(sh.m, id)
			}
		}
		sh.swept = len(sh.m)
	}
	sh.m[key] = e
}

package ratelimit

import (
	"context"
	"fmt"
	"hash/maphash"
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
// a fixed window's share also ends with the window the store counted it in.
// A key with no live share, or too little of one, takes a new share.
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
//   - under-admission: at most N·(S−1) units per window (fixed window) or
//     per lifetime (the others) counted by the store and never spent,
//     held by processes that went quiet.
//
// A decision from a share has Source SourceStore (the store counted it);
// its Remaining is the share's unspent units plus what the store said
// remained when the share was taken, never more than Limit, and its
// ResetAfter counts down from the store's; a composite's has no Limits.
// Peek asks the store and adds the share's unspent units to Remaining. A
// leaky bucket's Delay is each unit's place in the share's turn in the
// queue.
//
// Unspent units go back to the store (one refund, algorithms.Request's
// Refund) when the limiter closes (Limiter.Close, which also stops taking
// shares) and when no request has spent from a share for half a lifetime
// (then the key's next share is half the size): a bucket gets back what
// has not refilled since, never more than its empty state; a window, what
// was counted in the window that is still current; a sliding log keeps
// them until they leave its period. A goroutine of the limiter's does the
// idle give-backs while it holds shares, and ends when it holds none (two
// lifetimes after the last share was taken) or when it is closed.
//
// It composes with the deny cache (a denial is the store's, so the cache
// keeps it), the fallback and the breaker (a share is taken through them;
// what the fallback admits is not a share), tiers (a share is spent only at
// the numbers it was taken with; a request at other numbers drops it) and
// composites without a leaky bucket part. maxShare below 1, a lifetime
// that is not a positive whole number of microseconds, an algorithm that is
// not built in (nor a composite of built-ins), or a composite with a leaky
// bucket part, is an error wrapping ErrInvalidParams.
//
// The memory the shares take is bounded by the keys decided within one
// lifetime: an expired share is reclaimed when the map it lives in grows.
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

// quotaNumbers is what the link keeps for a tier's numbers.
type quotaNumbers struct {
	most int64 // the largest share
	// fixed lists the parts of a composite that are fixed windows, whose
	// shares live within their window, of the period at the same index of
	// periods (µs); whole is set for a single fixed window, of period
	// periods[0].
	fixed   []int
	periods []int64
	whole   bool
	// perUnit is, for a leaky bucket, the µs one unit takes to leave the
	// queue (period / limit, rounded up); 0 otherwise. period and limit
	// are its numbers (µs, units).
	perUnit       int64
	period, limit int64
	// bucket is set for a single token bucket, leaky bucket or GCRA, which
	// give back unspent units as of now (giveBack); keepsAll for a single
	// sliding log, which gives nothing back.
	bucket, keepsAll bool
}

// numbers makes the link's numbers for alg, or says why it cannot take
// shares of it.
func (q *quota) numbers(alg algorithms.Algorithm) (any, error) {
	n := &quotaNumbers{most: min(q.maxShare, alg.MaxCost())}
	parts := []algorithms.Algorithm{alg}
	if c, ok := alg.(algorithms.Composite); ok {
		parts = c.Parts()
	}
	for i, p := range parts {
		ps, ok := p.(algorithms.PolicyStater)
		if !ok || forms.BuiltinOf(p) == nil {
			return nil, fmt.Errorf("%w: local quota: %s is not a built-in algorithm, whose bounds with shares are known", ErrInvalidParams, p.Name())
		}
		pol := ps.Policy()
		n.most = min(n.most, max(1, pol.Burst/4))
		switch pol.Algorithm {
		case algorithms.GCRA(1, time.Second, 1).Name(), algorithms.TokenBucket(1, time.Second, 1).Name():
			n.bucket = len(parts) == 1
		case algorithms.SlidingLog(1, time.Second).Name():
			n.keepsAll = len(parts) == 1
		case algorithms.FixedWindow(1, time.Second).Name():
			if len(parts) == 1 {
				n.whole = true
			} else {
				n.fixed = append(n.fixed, i)
			}
			n.periods = append(n.periods, int64(pol.Period/time.Microsecond))
		case algorithms.LeakyBucket(1, time.Second, 1).Name():
			if len(parts) > 1 {
				return nil, fmt.Errorf("%w: local quota: a composite with a leaky bucket part (its shares' delays are not spread)", ErrInvalidParams)
			}
			period := int64(pol.Period / time.Microsecond)
			n.perUnit = (period + pol.Limit - 1) / pol.Limit
			n.period, n.limit = period, pol.Limit
			n.bucket = true
		}
	}
	return n, nil
}

// share is what the link holds for one key: its latest share of the
// key's budget, and the size of the next.
type share struct {
	tier    *Tier // the numbers it was taken with
	units   int64 // unspent
	size    int64 // units taken
	next    int64 // the size of the next share
	taken   int64 // µs: when it was taken (before the store counted it)
	used    int64 // µs: when a request last spent from it
	from    int64 // µs: when it may first be spent
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

// live reports whether e may be spent at now.
func (e *share) live(now int64) bool { return e.units > 0 && e.from <= now && now < e.expires }

func (q *quota) decide(ctx context.Context, t *Tier, k store.Key, req algorithms.Request, d *Decision) error {
	if req.Peek {
		return q.peek(ctx, t, k, req, d)
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
		// Another caller is taking a share for the key: wait for it.
		ch := e.fetching
		sh.mu.Unlock()
		select {
		case <-ch:
		case <-ctx.Done():
			return ctx.Err()
		}
		sh.mu.Lock()
	}
	nums := t.local[q.slot].(*quotaNumbers)
	if e.tier != t && !t.sameNumbers(e.tier) {
		*e = share{tier: t, next: 1}
	}
	if e.live(req.Now) && e.units >= req.Cost {
		e.spend(nums, req, d)
		sh.mu.Unlock()
		return nil
	}
	// Take a share, of a size that follows demand.
	switch {
	case e.units > 0 && req.Now >= e.expires && e.full:
		e.next = max(1, e.next/2) // expired unspent
	case e.size > 0 && e.units < req.Cost && req.Now-e.taken < q.lifetime/4:
		e.next = e.next * 2 // spent quickly
	}
	e.next = min(e.next, nums.most)
	size := max(e.next, req.Cost)
	e.units, e.size = 0, 0 // what is left is dropped: one share per key
	ch := make(chan struct{})
	e.fetching = ch
	sh.mu.Unlock()

	size, err := q.take(ctx, t, k, req, size, d)

	sh.mu.Lock()
	e.fetching = nil
	close(ch)
	if err == nil && d.Source == SourceStore {
		if d.Allowed {
			e.took(t, nums, req, size, q.lifetime, d)
			if q.closed.Load() {
				e.units = 0 // closed while the share was taken: keep none
			} else if e.units > 0 && !q.idling.Swap(true) {
				go q.idle()
			}
		} else {
			e.next = max(1, e.next/2)
		}
	}
	sh.mu.Unlock()
	return err
}

// take asks the rest of the chain for a share of size units (at least
// req.Cost), and when the store denies it, for what the store says
// remains, at least req.Cost: the store's decision of req itself when
// less remains. It returns the size asked last.
func (q *quota) take(ctx context.Context, t *Tier, k store.Key, req algorithms.Request, size int64, d *Decision) (int64, error) {
	r := req
	r.Cost = size
	err := q.next.decide(ctx, t, k, r, d)
	if err != nil || d.Allowed || size == req.Cost || d.Source != SourceStore {
		return size, err
	}
	r.Cost = max(req.Cost, min(int64(d.Remaining), size-1))
	*d = Decision{}
	return r.Cost, q.next.decide(ctx, t, k, r, d)
}

// took makes e the share of size units the store admitted in d for req,
// of which req spends its cost, and makes d req's decision.
func (e *share) took(t *Tier, nums *quotaNumbers, req algorithms.Request, size, lifetime int64, d *Decision) {
	e.tier = t
	e.size, e.units, e.taken, e.used = size, size-req.Cost, req.Now, req.Now
	e.from, e.expires, e.full = req.Now, req.Now+lifetime, true
	// A fixed window's share lives within the window it was counted in:
	// ResetAfter, counted from before the store's own clock read, is no
	// later than the window's end; and the window began a period before
	// (later than now when the store had already begun the next window by
	// another process's clock).
	if nums.whole {
		e.within(req.Now+int64(d.ResetAfter/time.Microsecond), nums.periods[0])
	}
	for j, i := range nums.fixed {
		if i < len(d.Limits) {
			e.within(req.Now+int64(d.Limits[i].ResetAfter/time.Microsecond), nums.periods[j])
		} else {
			e.expires = req.Now // no figures: spend nothing locally
		}
	}
	e.limit, e.remaining = int64(d.Limit), int64(d.Remaining)
	e.resetAt = req.Now + int64(d.ResetAfter/time.Microsecond)
	e.turn = req.Now + int64(d.Delay/time.Microsecond)
	d.Remaining = int(min(e.remaining+e.units, e.limit))
}

// within keeps e's life within the window of period that ends at end.
func (e *share) within(end, period int64) {
	if end < e.expires {
		e.expires, e.full = end, false
	}
	e.from = max(e.from, end-period)
}

// spend admits req from e, with nums, into d.
func (e *share) spend(nums *quotaNumbers, req algorithms.Request, d *Decision) {
	place := e.size - e.units // the request's first unit's place in the share
	e.units -= req.Cost
	e.used = req.Now
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
			if u, ok := e.unspent(id, now); ok {
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
	turn               int64 // a leaky bucket's: the share's first unit leaves the queue
}

// unspent takes e's unspent units, if it holds any it could still spend
// at now, for giving back: e then holds none. Call it with e's shard
// locked.
func (e *share) unspent(id string, now int64) (unspent, bool) {
	if e.fetching != nil || !e.live(now) {
		return unspent{}, false
	}
	u := unspent{id: id, tier: e.tier, units: e.units, size: e.size, taken: e.taken, turn: e.turn}
	e.units = 0
	return u, true
}

// giveBack returns u's units to the store in one refund through the rest
// of the chain (the fallback and the deny cache never serve one). A
// token bucket's or GCRA's units go back as of now: what has not refilled
// since the share was taken, never more than an empty bucket; a leaky
// bucket's, the queue places of the share's unspent units, from the turn
// of the first (what has left the queue since is gone); a window's, within
// the window the share was counted in, while it is the current one (a
// fixed window's share never outlives it); a sliding log keeps them until
// they leave its period.
func (q *quota) giveBack(ctx context.Context, u unspent, now int64) error {
	nums := u.tier.local[q.slot].(*quotaNumbers)
	if nums.keepsAll {
		return nil
	}
	act := u.taken
	switch {
	case nums.perUnit > 0:
		spent := u.size - u.units
		act = u.turn + (spent*nums.period+nums.limit-1)/nums.limit
	case nums.bucket:
		act = now
	}
	var d Decision
	req := algorithms.Request{Now: now, Cost: u.units, Refund: true, Act: act}
	return q.next.decide(ctx, u.tier, store.Key{Namespace: q.ns, ID: u.id}, req, &d)
}

// idle gives back, every half lifetime, the unspent units of the shares
// no request has spent from for half a lifetime, and drops the shares
// past their lifetime; it returns when the link holds no share (it is
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
				if e.fetching == nil && now-e.taken >= 2*q.lifetime {
					delete(sh.m, id)
					continue
				}
				if now-e.used >= q.lifetime/2 {
					if u, ok := e.unspent(id, now); ok {
						back = append(back, u)
						e.next = max(1, e.next/2) // a quiet key takes smaller shares
					}
				}
			}
			held += len(sh.m)
			sh.mu.Unlock()
			for _, u := range back {
				ctx, cancel := context.WithTimeout(context.Background(), half)
				_ = q.giveBack(ctx, u, now) // best effort: unreturned units expire with their share
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
			if old.fetching == nil && (now-old.taken >= 2*lifetime || now < old.taken) {
				delete(sh.m, id)
			}
		}
		sh.swept = len(sh.m)
	}
	sh.m[key] = e
}

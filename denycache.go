package ratelimit

import (
	"context"
	"hash/maphash"
	"sync"
	"time"

	"github.com/ratelimitkit/ratelimit/algorithms"
	"github.com/ratelimitkit/ratelimit/store"
)

// WithDenyCache keeps, for up to maxKeys keys, the store's latest denial in
// process memory: when the store denies a key's request of cost n until
// time T (its RetryAfter), requests for that key of cost n or more are
// denied locally until T, without a store round trip, with Source
// SourceDenyCache. A key under attack then costs the store about one call
// per refill instead of one per request.
//
// The cache only ever denies what the store itself would deny if nothing
// else happened to the key, so it admits nothing extra. A denial holds for
// the numbers it was made with: a request for the key at another Tier goes
// to the store and drops the entry (docs/tiers.md has the one case where
// the cache still denies what the store would admit). What it cannot see
// is a Reset or a change of numbers made by another process: such a key
// stays denied here until T (Reset on this limiter clears its entry).
// Requests of a smaller cost, which might fit sooner, still go to the
// store. RetryAfter and ResetAfter count down from the store's answer;
// Remaining is the store's figure at the time of the denial.
//
// The cache is off by default. maxKeys bounds its memory (about 100 bytes
// per key plus the key); when it is full, an entry that has expired, or
// else an arbitrary one, makes room. Times are read from the limiter's
// clock.
func WithDenyCache(maxKeys int) Option {
	return func(l *Limiter) error {
		if err := checkPositive("deny cache size", maxKeys); err != nil {
			return err
		}
		return l.addLink(denyLink, func(_ *chainOf, next link) (link, error) {
			c := newDenyCache(maxKeys)
			c.next = next
			return c, nil
		})
	}
}

// denyShards is the most shards a deny cache splits its keys over, so that
// callers on different keys rarely wait on one lock.
const denyShards = 16

// denyCache is WithDenyCache's link: it maps keys to the store's latest
// denial, in shards of bounded size.
type denyCache struct {
	next     link
	seed     maphash.Seed
	shards   []denyShard
	perShard int
}

type denyShard struct {
	mu sync.Mutex
	m  map[string]denial
	_  [40]byte // keeps shards on separate cache lines
}

// denial is a denial of cost by the store, as of the limiter's clock.
type denial struct {
	tier      *Tier // the numbers it was made with
	cost      int64 // the smallest cost the entry denies
	until     int64 // µs: when a request of cost may be admitted
	reset     int64 // µs: when the key is back to unused
	limit     int64
	remaining int64
}

func newDenyCache(maxKeys int) *denyCache {
	n := min(denyShards, maxKeys)
	c := &denyCache{seed: maphash.MakeSeed(), shards: make([]denyShard, n), perShard: maxKeys / n}
	for i := range c.shards {
		c.shards[i].m = make(map[string]denial)
	}
	return c
}

// decide denies req from a denial in the cache, or asks the rest of the
// chain and remembers a denial that comes back without an error: the
// store's. A reservation (which may be admitted for later where a request
// now is denied) and a refund are never answered from the cache, and a
// refund drops the key's denial, since it may have made room.
func (c *denyCache) decide(ctx context.Context, t *Tier, k store.Key, req algorithms.Request, d *Decision) error {
	if req.Refund || req.MaxDelay > 0 {
		if req.Refund {
			c.drop(k.ID)
		}
		return c.next.decide(ctx, t, k, req, d)
	}
	if c.lookup(k.ID, t, req, d) {
		return nil
	}
	err := c.next.decide(ctx, t, k, req, d)
	if err == nil && !d.Allowed {
		c.remember(k.ID, t, req, d)
	}
	return err
}

// forget drops k's denial, then has the rest of the chain forget k.
func (c *denyCache) forget(ctx context.Context, k store.Key) error {
	c.drop(k.ID)
	return c.next.forget(ctx, k)
}

func (c *denyCache) shard(key string) *denyShard {
	return &c.shards[maphash.String(c.seed, key)%uint64(len(c.shards))]
}

// lookup reports whether key's request at tier t is denied by a cached
// denial, and if so fills in d. A denial made at other numbers is dropped:
// the request goes to the store, and may change the key's state under
// numbers the denial did not see.
func (c *denyCache) lookup(key string, t *Tier, req algorithms.Request, d *Decision) bool {
	sh := c.shard(key)
	sh.mu.Lock()
	e, ok := sh.m[key]
	if ok && (req.Now >= e.until || !t.sameNumbers(e.tier)) {
		delete(sh.m, key)
		ok = false
	}
	sh.mu.Unlock()
	if !ok || req.Cost < e.cost {
		return false
	}
	*d = Decision{
		Limit:      int(e.limit),
		Remaining:  int(e.remaining),
		RetryAfter: time.Duration(e.until-req.Now) * time.Microsecond,
		ResetAfter: time.Duration(max(e.reset-req.Now, 0)) * time.Microsecond,
		Source:     SourceDenyCache,
	}
	return true
}

// remember records the store's denial d of req at tier t.
func (c *denyCache) remember(key string, t *Tier, req algorithms.Request, d *Decision) {
	retry := int64(d.RetryAfter / time.Microsecond)
	if retry <= 0 {
		return
	}
	e := denial{
		tier:      t,
		cost:      req.Cost,
		until:     req.Now + retry,
		reset:     req.Now + int64(d.ResetAfter/time.Microsecond),
		limit:     int64(d.Limit),
		remaining: int64(d.Remaining),
	}
	sh := c.shard(key)
	sh.mu.Lock()
	if _, ok := sh.m[key]; !ok && len(sh.m) >= c.perShard {
		sh.makeRoom(req.Now)
	}
	sh.m[key] = e
	sh.mu.Unlock()
}

// makeRoom removes one entry, preferring an expired one among a few
// visited in the map's random order.
func (sh *denyShard) makeRoom(now int64) {
	const visits = 8
	var victim string
	i := 0
	for k, e := range sh.m {
		if now >= e.until {
			victim = k
			break
		}
		if i == 0 {
			victim = k
		}
		if i++; i == visits {
			break
		}
	}
	delete(sh.m, victim)
}

// drop drops key's denial.
func (c *denyCache) drop(key string) {
	sh := c.shard(key)
	sh.mu.Lock()
	delete(sh.m, key)
	sh.mu.Unlock()
}

// len returns the number of keys held, for tests.
func (c *denyCache) len() int {
	n := 0
	for i := range c.shards {
		sh := &c.shards[i]
		sh.mu.Lock()
		n += len(sh.m)
		sh.mu.Unlock()
	}
	return n
}

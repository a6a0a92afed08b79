// Package memory is the in-process store: the embedded default, and the
// reference every other store is held to.
//
// It runs every algorithm, built-in or not, in Go under a per-shard mutex,
// with no allocation per decision on a key it already holds. Its memory is
// bounded: expired state is reclaimed as new keys arrive (and by Sweep),
// and a cap on keys evicts the state closest to expiring when reached.
package memory

import (
	"context"
	"fmt"
	"hash/maphash"
	"sync"

	"github.com/ratelimitkit/ratelimit"
	"github.com/ratelimitkit/ratelimit/algorithms"
)

// DefaultMaxKeys is the key cap of a store created without WithMaxKeys.
const DefaultMaxKeys = 1 << 20

const (
	shardCount = 64
	// sampleSize is how many entries an insertion examines for expired
	// state, or for the entry to evict when the shard is full.
	sampleSize = 8
	// inlineState is the state size kept inside an entry without a
	// separate allocation: every built-in algorithm but the sliding log.
	inlineState = 24
)

// Option configures a Store.
type Option func(*Store) error

// WithMaxKeys caps the number of keys the store holds (default
// DefaultMaxKeys). When a new key arrives at a full shard, the store first
// reclaims expired state; if none is found among a sample of entries, it
// evicts the sampled entry that would expire soonest. Forgetting a key's
// state lets it start afresh, so a cap that is too small admits more than
// the limit; size it above the number of keys active within one period.
func WithMaxKeys(n int) Option {
	return func(s *Store) error {
		if n < shardCount {
			return fmt.Errorf("%w: memory store max keys %d below %d", ratelimit.ErrInvalidParams, n, shardCount)
		}
		s.maxPerShard = (n + shardCount - 1) / shardCount
		return nil
	}
}

// Store is an in-process ratelimit.Store and ratelimit.Decider. Create it
// with New; the zero value is not usable. It is safe for concurrent use and
// starts no goroutines, so it needs no closing.
//
// Time comes from the requests (the limiter's clock): state whose TTL has
// passed by a request's time is treated as missing.
type Store struct {
	seed        maphash.Seed
	maxPerShard int
	shards      [shardCount]shard
}

type shard struct {
	mu      sync.Mutex
	entries map[ratelimit.Key]*entry
	// now is the latest request time this shard has seen; sweeping and
	// eviction judge expiry by it.
	now int64
	_   [40]byte // keep shards on separate cache lines
}

type entry struct {
	state   []byte
	expires int64 // microseconds since the epoch
	inline  [inlineState]byte
}

// New returns an empty store.
func New(opts ...Option) (*Store, error) {
	s := &Store{seed: maphash.MakeSeed(), maxPerShard: (DefaultMaxKeys + shardCount - 1) / shardCount}
	for _, opt := range opts {
		if err := opt(s); err != nil {
			return nil, err
		}
	}
	for i := range s.shards {
		s.shards[i].entries = make(map[ratelimit.Key]*entry)
	}
	return s, nil
}

// MustNew is New for options known to be valid; it panics on an error.
func MustNew(opts ...Option) *Store {
	s, err := New(opts...)
	if err != nil {
		panic(err)
	}
	return s
}

func (s *Store) shard(k ratelimit.Key) *shard {
	h := maphash.String(s.seed, k.ID) ^ maphash.String(s.seed, k.Namespace)*0x9e3779b97f4a7c15
	return &s.shards[h%shardCount]
}

// Decide implements ratelimit.Decider for every algorithm: it runs the Go
// form under the key's shard lock, reusing the key's memory for the next
// state.
func (s *Store) Decide(ctx context.Context, key ratelimit.Key, alg algorithms.Algorithm, req algorithms.Request) (algorithms.Decision, error) {
	if err := ctx.Err(); err != nil {
		return algorithms.Decision{}, err
	}
	sh := s.shard(key)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	sh.now = max(sh.now, req.Now)
	e := sh.entries[key]
	var cur []byte
	if e != nil && e.expires > req.Now {
		cur = e.state
	}
	step, err := alg.Decide(cur, req)
	if err != nil {
		return algorithms.Decision{}, err
	}
	if step.Next != nil && !req.Peek {
		s.put(sh, key, e, step.Next, req.Now, step.TTL)
	}
	return step.Decision, nil
}

// Update implements ratelimit.Store.
func (s *Store) Update(ctx context.Context, key ratelimit.Key, now int64, fn ratelimit.UpdateFunc) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	sh := s.shard(key)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	sh.now = max(sh.now, now)
	e := sh.entries[key]
	var cur []byte
	if e != nil && e.expires > now {
		cur = e.state
	}
	next, ttl, err := fn(cur, now)
	if err != nil || next == nil {
		return err
	}
	if ttl <= 0 {
		return fmt.Errorf("memory: state for %q written with ttl %d µs", key.ID, ttl)
	}
	s.put(sh, key, e, next, now, ttl)
	return nil
}

// Delete implements ratelimit.Store.
func (s *Store) Delete(ctx context.Context, key ratelimit.Key) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	sh := s.shard(key)
	sh.mu.Lock()
	delete(sh.entries, key)
	sh.mu.Unlock()
	return nil
}

// put stores next for key, whose current entry is e (or nil). The caller
// holds sh.mu.
func (s *Store) put(sh *shard, key ratelimit.Key, e *entry, next []byte, now, ttl int64) {
	if e == nil {
		s.makeRoom(sh)
		e = new(entry)
		sh.entries[key] = e
	}
	if len(next) <= inlineState {
		// Copy into the entry's own array (a no-op when next is already
		// there), so the caller's buffer is never retained.
		e.state = e.inline[:len(next)]
		copy(e.state, next)
	} else {
		e.state = next
	}
	e.expires = now + ttl
}

// makeRoom reclaims expired entries among a sample and, when the shard is
// still full, evicts the sampled entry that expires soonest. The caller
// holds sh.mu. Map iteration starts at a random place, so the samples
// cover the shard over time.
func (s *Store) makeRoom(sh *shard) {
	var victim ratelimit.Key
	soonest := int64(-1)
	seen := 0
	for k, e := range sh.entries {
		if e.expires <= sh.now {
			delete(sh.entries, k)
		} else if soonest < 0 || e.expires < soonest {
			victim, soonest = k, e.expires
		}
		if seen++; seen == sampleSize {
			break
		}
	}
	if len(sh.entries) >= s.maxPerShard && soonest >= 0 {
		delete(sh.entries, victim)
	}
}

// Sweep deletes every entry whose state has expired by the latest request
// time the store has seen, and returns how many it deleted. The store
// reclaims expired state as new keys arrive without it; call Sweep
// periodically to release memory after traffic stops.
func (s *Store) Sweep() int {
	n := 0
	for i := range s.shards {
		sh := &s.shards[i]
		sh.mu.Lock()
		for k, e := range sh.entries {
			if e.expires <= sh.now {
				delete(sh.entries, k)
				n++
			}
		}
		sh.mu.Unlock()
	}
	return n
}

// Len returns the number of keys the store holds, expired or not.
func (s *Store) Len() int {
	n := 0
	for i := range s.shards {
		sh := &s.shards[i]
		sh.mu.Lock()
		n += len(sh.entries)
		sh.mu.Unlock()
	}
	return n
}

// Expiries calls fn for every key the store holds with its expiry in
// microseconds since the epoch. The conformance suite uses it to check that
// every key carries an expiry.
func (s *Store) Expiries(fn func(key ratelimit.Key, expires int64)) {
	for i := range s.shards {
		sh := &s.shards[i]
		sh.mu.Lock()
		for k, e := range sh.entries {
			fn(k, e.expires)
		}
		sh.mu.Unlock()
	}
}

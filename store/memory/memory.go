// Package memory is the in-process store: the embedded default, and the
// reference every other store is held to.
//
// It runs every algorithm, built-in or not, in Go under the key's own
// mutex, with no allocation per decision on a key it already holds. A
// built-in algorithm's decision on a key the store holds finds the key
// without a lock (shards publish their index for lock-free reads), so
// decisions on different keys share no memory they write; a hot key is
// found before its key is hashed (the store remembers, now and then, an
// entry a decision found). Its memory is
// bounded: expired state is reclaimed as new keys arrive (and by Sweep),
// and a cap on keys evicts live state when reached, from the limiter that
// inserts (or the one that holds the most), never from a limiter holding
// no more than its fair share; see WithMaxKeys.
// Each key costs about 133 to 146 bytes when its ID is at most 16 bytes
// long (longer IDs add their length); a sliding log holding more than one
// entry adds a buffer of 16 bytes per entry and 16 more, with room to grow
// of up to as much again. A sliding log is decided where it is stored
// (forms.InPlaceDecider): a decision neither copies nor allocates,
// except when the log outgrows its buffer. docs/benchmarks.md has the
// measurements.
package memory

import (
	"context"
	"encoding/binary"
	"fmt"
	"hash/maphash"
	"math"
	"math/bits"
	"math/rand/v2"
	"strings"
	"sync"
	"sync/atomic"
	"unsafe"

	"github.com/ratelimitkit/ratelimit/algorithms"
	"github.com/ratelimitkit/ratelimit/algorithms/forms"
	"github.com/ratelimitkit/ratelimit/store"
)

// DefaultMaxKeys is the key cap of a store created without WithMaxKeys.
const DefaultMaxKeys = 1 << 20

const (
	shardBits  = 6
	shardCount = 1 << shardBits
	// sampleSize is how many entries an insertion examines for expired
	// state, or for the entry to evict when the shard is full.
	sampleSize = 8
	// inlineState is the state size kept inside an entry without a
	// separate allocation: every built-in algorithm but the sliding log.
	inlineState = 24
	// maxScratch is the largest state a shard keeps a reusable copy
	// buffer for; larger states are copied into a fresh allocation.
	maxScratch = 1024
	// inlineID is the longest key ID kept inside its entry; longer IDs
	// are copied into an allocation of their own.
	inlineID = 16
)

// Option configures a Store.
type Option func(*Store) error

// WithMaxKeys caps the number of keys the store holds (default
// DefaultMaxKeys). The cap is split evenly between the store's 64 shards,
// so the store never holds more than n keys, and may start evicting a
// little before n when keys spread unevenly.
//
// When a new key arrives at a full shard, the store first reclaims expired
// state among a sample of entries. If the shard is still full, a limiter
// (a Key.Namespace) pays for its own insertion: when it holds at least its
// fair share of the shard (the shard's cap divided by the number of
// limiters with keys there), the store evicts the one of its own sampled
// keys that would expire soonest; below its share, it evicts that way from
// the limiter holding the most keys in the shard instead. So a flood of
// new keys through one limiter recycles that limiter's own keys, and never
// takes live state from a limiter holding no more than its fair share.
//
// Forgetting a key's state lets it start afresh, so a cap that is too
// small admits more than the limit; size it above the number of keys all
// limiters hold active within one period.
func WithMaxKeys(n int) Option {
	return func(s *Store) error {
		if n < shardCount {
			return fmt.Errorf("%w: memory store max keys %d below %d", algorithms.ErrInvalidParams, n, shardCount)
		}
		s.maxPerShard = n / shardCount
		return nil
	}
}

// Store is an in-process store.Store and store.Decider. Create it
// with New; the zero value is not usable. It is safe for concurrent use and
// starts no goroutines, so it needs no closing. A Limiter calls its Decide;
// Sweep, Len and Expiries are for housekeeping and tests.
//
// Time comes from the requests (the limiter's clock): state whose TTL has
// passed by a request's time is treated as missing.
//
// The store keeps its own copy of each key's ID, so a key cut from a large
// buffer does not keep the buffer alive.
type Store struct {
	seed maphash.Seed
	// key0, key1 and key2 seed the hash of short IDs (hashShort).
	key0, key1, key2 uint64
	maxPerShard      int
	// hot is the shard of the entry a decision found last, written only
	// now and then (see remember): with that shard's hot, it lets a
	// decision on a hot key skip hashing its key and the lookup.
	hot    atomic.Pointer[shard]
	shards [shardCount]shard
}

// A shard is one mutex and the entries whose key hashes select it. Its
// mutex guards the shard's fields and the set of entries (adding and
// removing them); each entry's own mutex guards its state and expiry. The
// shard's index is published for lookups that take no lock (find): a
// decision on a key the shard holds takes only the entry's mutex, and
// reads the shard's fields without writing them, so decisions on
// different keys share no cache line that either writes.
//
// Lock order: a shard's mutex, then an entry's. Removing an entry takes
// both and marks it removed (entry.removed), so that a decision which
// found it without the shard's lock, and locked it after, sees that and
// starts again under the shard's lock.
//
// Its fields take 104 bytes; the padding gives each shard 256, so no two
// shards' fields share a cache line (or an adjacent-line prefetch pair)
// whatever the Store's alignment.
type shard struct {
	mu sync.Mutex
	// index holds the entries by the hash of their key (see slot).
	index index
	// n is the number of entries. Guarded by mu.
	n int
	// spaces counts the entries of each namespace (limiter), for
	// eviction: see WithMaxKeys. Guarded by mu.
	spaces map[string]int
	// now is the latest request time this shard has seen, to within
	// nowSlack (a decision without the shard's lock writes it only when
	// it has moved on by more); sweeping and eviction judge expiry by it.
	now atomic.Int64
	// earliest is a lower bound on the entries' expiries: while now is
	// before it, nothing has expired and insertions skip reclaiming.
	earliest atomic.Int64
	// buf, for inline states, and scratch, for larger ones, receive a
	// copy of the state being decided, so that an algorithm writing into
	// it leaves the entry untouched until put. Guarded by mu.
	buf     [inlineState]byte
	scratch []byte
	// hot is an entry of this shard that a decision found (see
	// Store.hot); only ever one of this shard's.
	hot atomic.Pointer[entry]
	_   [144]byte
}

// nowSlack is how far, in microseconds, a shard's now may lag the latest
// request time a decision without the shard's lock has seen: such a
// decision writes now only when it has moved on by more, so that the
// shard's cache line is written about once a millisecond, not on every
// decision. Insertions, deletions and updates keep it exact.
const nowSlack = 1000

// observe records, for a decision made without the shard's lock, its
// request time now and the entry's expiry exp, keeping the shard's now
// (to within nowSlack) and earliest. It only reads them unless they
// change, which is rare.
func (sh *shard) observe(now, exp int64) {
	if now > sh.now.Load()+nowSlack || exp < sh.earliest.Load() {
		sh.record(now, exp)
	}
}

// record is observe when the shard's now or earliest changes.
func (sh *shard) record(now, exp int64) {
	for {
		cur := sh.now.Load()
		if now <= cur+nowSlack || sh.now.CompareAndSwap(cur, now) {
			break
		}
	}
	sh.lower(exp)
}

// advance raises the shard's now to at least now.
func (sh *shard) advance(now int64) {
	for {
		cur := sh.now.Load()
		if now <= cur || sh.now.CompareAndSwap(cur, now) {
			return
		}
	}
}

// lower lowers the shard's earliest to at most exp.
func (sh *shard) lower(exp int64) {
	for {
		cur := sh.earliest.Load()
		if exp >= cur || sh.earliest.CompareAndSwap(cur, exp) {
			return
		}
	}
}

// A slot is one place in a shard's index: an entry and its key's hash, or
// nothing (e nil), or a removed entry's place (e is tombstone). Both
// fields are written under the shard's mutex and read with atomics by
// lookups that take no lock (find).
type slot struct {
	hash atomic.Uint64
	e    atomic.Pointer[entry]
}

// tombstone marks a slot whose entry was removed, so that a lookup probes
// past it. Its key is empty, which no key a lookup asks for is.
var tombstone = new(entry)

// An index is an open-addressing hash table of entries by their key's hash,
// probed linearly: a key hashing to h sits in the first slot from h & mask
// on that holds it, with no empty slot between. Keys with the same hash
// take a slot each and are told apart by comparing them whole. It is kept
// at most seven eighths used (entries and tombstones, as a Go map's
// groups), so probes are short and the table small: 16 to 24 bytes per
// key.
//
// It replaces a Go map[uint64]*entry: finding a key among many reads one
// slot (hash and entry side by side, four to a cache line) and then the
// entry, where the map hashed the hash again and read a control word, a
// slot and then the entry, each likely a cache miss.
//
// Its table is published through an atomic pointer, for lookups that take
// no lock: a rehash builds a new table and publishes it whole, and a
// lookup that still reads the old one finds at worst an entry since
// removed (which it sees marked) or nothing, and then looks again under
// the shard's mutex.
type index struct {
	t    atomic.Pointer[table] // nil until the first key
	used int                   // slots holding an entry or a tombstone
}

// A table is an index's slots, a power of two of them.
type table struct {
	slots []slot
}

// slots returns the index's slots, nil before the first key. The caller
// holds the shard's mutex.
func (x *index) slots() []slot {
	if t := x.t.Load(); t != nil {
		return t.slots
	}
	return nil
}

// minSlots is the size of a shard's index when its first key arrives.
const minSlots = 16

// An entry is one key's state. States of up to inlineState bytes live in
// the entry itself, so a decision on a held key allocates nothing; so do
// IDs of up to inlineID bytes, so that finding a key among many reads one
// object, not the entry and then its ID's bytes elsewhere in memory. An
// entry takes 112 bytes (its size class), and is never copied (key.ID may
// point into it).
//
// mu guards state and expires; key and id are written before the entry is
// published in the index, and never after. The fields a decision writes
// come last, 56 bytes after the mutex, which a core waiting for it reads
// over and over: in three of the four places an entry can start within a
// cache line they are on another line than the mutex, and in the fourth
// only the state's pointer, which a decision on a held key rewrites with
// the same value only when its length changes, shares the mutex's line.
type entry struct {
	mu  sync.Mutex
	key store.Key
	id  [inlineID]byte
	// state is the key's state: never nil while the entry is in its
	// shard's index, and nil once it is removed (see removed).
	state   []byte
	inline  [inlineState]byte
	expires int64 // microseconds since the epoch
}

// removed reports whether e has been taken out of its shard's index, so
// that a decision which found it without the shard's mutex must look
// again. The caller holds e.mu.
func (e *entry) removed() bool { return e.state == nil }

// kill marks e removed and drops its state. The caller holds the shard's
// mutex, and removes e from the index.
func (e *entry) kill() {
	e.mu.Lock()
	e.state = nil
	e.mu.Unlock()
}

// newEntry returns an entry for key holding its own copy of key.ID.
func newEntry(key store.Key) *entry {
	e := &entry{key: store.Key{Namespace: key.Namespace}}
	if n := len(key.ID); n <= inlineID {
		copy(e.id[:], key.ID)
		e.key.ID = unsafe.String(&e.id[0], n)
	} else {
		e.key.ID = strings.Clone(key.ID)
	}
	return e
}

// New returns an empty store.
func New(opts ...Option) (*Store, error) {
	s := &Store{seed: maphash.MakeSeed(), maxPerShard: DefaultMaxKeys / shardCount}
	s.key0, s.key1, s.key2 = rand.Uint64()|1, rand.Uint64()|1, rand.Uint64()|1
	for _, opt := range opts {
		if err := opt(s); err != nil {
			return nil, err
		}
	}
	for i := range s.shards {
		s.shards[i].spaces = make(map[string]int)
		s.shards[i].earliest.Store(math.MaxInt64)
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

// hash returns key's hash: its top bits pick the shard, and its low bits
// the key's place in the shard's index, so a key is hashed once per call.
//
// Only the ID's bytes are hashed; the namespace contributes its length.
// Keys whose hashes collide are told apart by comparing them whole, so two
// limiters with the same user key (a handful at most) share a hash, while
// every call saves hashing the namespace, which is the same for all of a
// limiter's keys.
func (s *Store) hash(k store.Key) uint64 {
	var h uint64
	if n := len(k.ID); n <= 16 {
		h = s.hashShort(k.ID)
	} else {
		h = maphash.String(s.seed, k.ID)
	}
	return h + uint64(len(k.Namespace))*0x9e3779b97f4a7c15
}

// hashShort hashes an ID of at most 16 bytes, most keys (user IDs,
// addresses), the way the Go runtime hashes map keys on machines without
// AES instructions (wyhash: the bytes read as two words, each mixed with a
// random seed of the store's by a 64×64→128-bit multiplication), here
// inlined, which is cheaper than maphash's call into the runtime.
func (s *Store) hashShort(id string) uint64 {
	n := uint64(len(id))
	b := unsafe.Slice(unsafe.StringData(id), n)
	var x, y uint64
	switch {
	case n == 0:
		return s.key0
	case n < 4:
		x = uint64(b[0]) | uint64(b[n>>1])<<8 | uint64(b[n-1])<<16
	case n < 8:
		x = uint64(binary.LittleEndian.Uint32(b))
		y = uint64(binary.LittleEndian.Uint32(b[n-4:]))
	default:
		x = binary.LittleEndian.Uint64(b)
		y = binary.LittleEndian.Uint64(b[n-8:])
	}
	return mix(s.key2^n, mix(x^s.key1, y^s.key0))
}

// mix folds the 128-bit product of a and b into 64 bits.
func mix(a, b uint64) uint64 {
	hi, lo := bits.Mul64(a, b)
	return hi ^ lo
}

// lock returns key's hash and its shard, locked.
func (s *Store) lock(k store.Key) (uint64, *shard) {
	h := s.hash(k)
	sh := &s.shards[h>>(64-shardBits)]
	sh.mu.Lock()
	return h, sh
}

// Decide implements store.Decider for every algorithm: it runs the Go
// form under the key's lock.
func (s *Store) Decide(ctx context.Context, key store.Key, alg algorithms.Algorithm, req algorithms.Request) (algorithms.Decision, error) {
	if td, ok := alg.(forms.ToDecider); ok {
		var d algorithms.Decision
		var err error
		d.Allowed, d.Limit, d.Remaining, d.RetryAfter, d.ResetAfter, d.Delay, err = s.decideTo(ctx, key, td, req)
		return d, err
	}
	if err := ctx.Err(); err != nil {
		return algorithms.Decision{}, err
	}
	// Other algorithms (a user's own, a composite) decide under the
	// shard's mutex too: the copy of the state they decide on is the
	// shard's (copyState).
	h, sh := s.lock(key)
	defer sh.mu.Unlock()
	sh.advance(req.Now)
	e := sh.get(h, key)
	if e != nil {
		e.mu.Lock()
		defer e.mu.Unlock()
	}
	var (
		cur  []byte
		step algorithms.Step
		err  error
		ip   forms.InPlaceDecider
	)
	// Only a large state (of an algorithm that implements InPlaceDecider
	// but not ToDecider) is decided in place: an inline one is cheaper to
	// copy than to ask alg.
	inPlace := false
	if e == nil || len(e.state) > inlineState {
		ip, inPlace = alg.(forms.InPlaceDecider)
	}
	if inPlace {
		// A large state (a sliding log) is decided where it is stored,
		// not copied first; an expired one is passed empty, to reuse its
		// buffer.
		if e != nil {
			cur = e.state
			if e.expires <= req.Now {
				cur = cur[:0]
			}
		}
		step, err = ip.DecideInPlace(cur, req)
	} else {
		cur = sh.copyState(e, req.Now)
		step, err = alg.Decide(cur, req)
	}
	if err != nil {
		return algorithms.Decision{}, err
	}
	if step.Next != nil && !req.Peek {
		if err := s.put(sh, h, key, e, step.Next, req.Now, step.TTL, inPlace); err != nil {
			return algorithms.Decision{}, err
		}
	}
	return step.Decision, nil
}

// decideTo is Decide for an forms.ToDecider (every built-in), with the
// decision's fields as its results, which a Limiter calls (fastpath.go
// registers it): they travel in registers, where Decide's Decision and the
// algorithm's Step are copied through memory, a noticeable part of a
// decision made in process. The Decision's Parts, which only a composite
// sets, is always nil for a ToDecider.
//
// On a key the store holds, it takes no lock but the key's own.
func (s *Store) decideTo(ctx context.Context, key store.Key, alg forms.ToDecider, req algorithms.Request) (allowed bool, limit, remaining, retryAfter, resetAfter, delay int64, err error) {
	if err := ctx.Err(); err != nil {
		return false, 0, 0, 0, 0, 0, err
	}
	if sh := s.hot.Load(); sh != nil {
		if e := sh.hot.Load(); e != nil && sameKey(e.key, key) {
			e.mu.Lock()
			if !e.removed() {
				return s.decideEntry(sh, e, key, alg, req)
			}
			e.mu.Unlock()
		}
	}
	h := s.hash(key)
	sh := &s.shards[h>>(64-shardBits)]
	if e := sh.find(h, key); e != nil {
		e.mu.Lock()
		if !e.removed() {
			s.remember(sh, e, req.Now)
			return s.decideEntry(sh, e, key, alg, req)
		}
		// Removed since find saw it: look again under the shard's lock.
		e.mu.Unlock()
	}
	return s.decideLocked(h, sh, key, alg, req)
}

// remember makes e, of shard sh, the entry a decision looks at before
// hashing its key, in one microsecond of every hotEvery (by the request
// time now): often enough that a hot key is soon found there, and rarely
// enough that decisions on many keys, each of which misses it, seldom
// write the line every core reads.
func (s *Store) remember(sh *shard, e *entry, now int64) {
	if now%hotEvery == 0 {
		sh.hot.Store(e)
		s.hot.Store(sh)
	}
}

// sameKey reports whether a and b are the same key. It is a == b, first
// comparing the IDs' lengths and last bytes (up to 8, read at once), which
// tell most IDs of one length apart (their numbers usually end them), so
// that a decision on one of many keys, which compares its key with the hot
// entry's, rarely calls the runtime to compare the strings.
func sameKey(a, b store.Key) bool {
	n := len(a.ID)
	if n != len(b.ID) {
		return false
	}
	if n >= 8 && lastWord(a.ID) != lastWord(b.ID) {
		return false
	}
	return a == b
}

// lastWord returns the last 8 bytes of id, which has at least 8, as one
// integer.
func lastWord(id string) uint64 {
	return binary.LittleEndian.Uint64(unsafe.Slice(unsafe.StringData(id[len(id)-8:]), 8))
}

// hotEvery is remember's period in microseconds.
const hotEvery = 256

// decideLocked is decideTo under the shard's mutex, for a key that find
// did not see: a new key, or one just removed or moved by a rehash.
func (s *Store) decideLocked(h uint64, sh *shard, key store.Key, alg forms.ToDecider, req algorithms.Request) (bool, int64, int64, int64, int64, int64, error) {
	sh.mu.Lock()
	defer sh.mu.Unlock()
	sh.advance(req.Now)
	if e := sh.get(h, key); e != nil {
		e.mu.Lock()
		return s.decideEntry(sh, e, key, alg, req)
	}
	next, ttl, allowed, limit, remaining, retryAfter, resetAfter, delay, err := alg.DecideTo(nil, req)
	if err != nil {
		return false, 0, 0, 0, 0, 0, err
	}
	if next != nil && !req.Peek {
		// An InPlaceDecider's next state is its own memory, the store's to
		// keep; another's is copied into the entry.
		_, owned := alg.(forms.InPlaceDecider)
		if err := s.put(sh, h, key, nil, next, req.Now, ttl, owned); err != nil {
			return false, 0, 0, 0, 0, 0, err
		}
	}
	return allowed, limit, remaining, retryAfter, resetAfter, delay, nil
}

// decideEntry decides on e, key's entry, which the caller has locked and
// found not removed, and unlocks it. The state is decided where it is
// stored, not copied first: a ToDecider writes into it only when it
// returns a next state. An expired state is passed as nil, except to an
// InPlaceDecider (the sliding log), whose state outgrows an entry's inline
// bytes: it is passed the state's buffer emptied, to reuse, and its next
// state, in that buffer at any offset or in memory of its own, is kept as
// it is.
func (s *Store) decideEntry(sh *shard, e *entry, key store.Key, alg forms.ToDecider, req algorithms.Request) (bool, int64, int64, int64, int64, int64, error) {
	cur := e.state
	if e.expires <= req.Now {
		cur = nil
		if len(e.state) > inlineState {
			if _, ok := alg.(forms.InPlaceDecider); ok {
				cur = e.state[:0]
			}
		}
	}
	next, ttl, allowed, limit, remaining, retryAfter, resetAfter, delay, err := alg.DecideTo(cur, req)
	if err != nil {
		e.mu.Unlock()
		return false, 0, 0, 0, 0, 0, err
	}
	exp := int64(math.MaxInt64)
	if next != nil && !req.Peek {
		if ttl <= 0 {
			e.mu.Unlock()
			return false, 0, 0, 0, 0, 0, ttlError(key, ttl)
		}
		// next is cur's memory, written in place, or new when cur is nil
		// (an InPlaceDecider's may also be new, or at an offset in cur's
		// memory: the store's to keep all the same).
		if cur != nil && cap(next) <= maxScratch {
			// Unchanged, the slice is not written again: see entry.
			if len(next) != len(cur) || unsafe.SliceData(next) != unsafe.SliceData(cur) {
				e.state = next
			}
		} else {
			e.setState(next, cur != nil)
		}
		exp = req.Now + ttl
		e.expires = exp
	}
	e.mu.Unlock()
	sh.observe(req.Now, exp)
	return allowed, limit, remaining, retryAfter, resetAfter, delay, nil
}

// ttlError is the error for a state written with a TTL that is not
// positive.
func ttlError(key store.Key, ttl int64) error {
	return fmt.Errorf("memory: state for %q written with ttl %d µs", key.ID, ttl)
}

// Update implements store.Store.
func (s *Store) Update(ctx context.Context, key store.Key, now int64, fn store.UpdateFunc) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	h, sh := s.lock(key)
	defer sh.mu.Unlock()
	sh.advance(now)
	e := sh.get(h, key)
	if e != nil {
		e.mu.Lock()
		defer e.mu.Unlock()
	}
	next, ttl, err := fn(sh.copyState(e, now), now)
	if err != nil || next == nil {
		return err
	}
	return s.put(sh, h, key, e, next, now, ttl, false)
}

// Delete implements store.Store.
func (s *Store) Delete(ctx context.Context, key store.Key) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	h, sh := s.lock(key)
	defer sh.mu.Unlock()
	if e := sh.get(h, key); e != nil {
		sh.remove(h, e)
	}
	return nil
}

// copyState returns a copy of e's state for an algorithm to decide on: nil
// when e is nil or its state has expired by now. The caller holds sh.mu,
// and e.mu when e is not nil.
func (sh *shard) copyState(e *entry, now int64) []byte {
	if e == nil || e.expires <= now {
		return nil
	}
	switch n := len(e.state); {
	case n <= inlineState:
		sh.buf = e.inline // one fixed-size move
		return sh.buf[:n]
	case n <= maxScratch:
		sh.scratch = append(sh.scratch[:0], e.state...)
		return sh.scratch
	default:
		return append([]byte(nil), e.state...)
	}
}

// put stores next as key's state until now+ttl; e is key's entry or nil.
// It stores a copy, unless owned says next is the store's to keep (what an
// forms.InPlaceDecider returns). The caller holds sh.mu, and e.mu when
// e is not nil; a new entry is complete before it is published.
func (s *Store) put(sh *shard, h uint64, key store.Key, e *entry, next []byte, now, ttl int64, owned bool) error {
	if ttl <= 0 {
		return ttlError(key, ttl)
	}
	exp := now + ttl
	if e == nil {
		s.makeRoom(sh, key.Namespace)
		e = newEntry(key)
		e.setState(next, owned)
		e.expires = exp
		sh.add(h, e)
	} else {
		e.setState(next, owned)
		e.expires = exp
	}
	sh.lower(exp)
	return nil
}

// setState stores next as e's state: a copy, unless owned says next is the
// store's to keep. The state it leaves is never nil (see entry.removed).
// The caller holds e.mu, or has not published e yet.
func (e *entry) setState(next []byte, owned bool) {
	switch {
	case owned && cap(next) > maxScratch && cap(next) > 4*len(next):
		// The state has shrunk a lot (a sliding log emptying): let the
		// large buffer go.
		e.state = clone(next)
	case owned:
		e.state = next
	case len(next) == inlineState: // most built-in algorithms
		e.inline = [inlineState]byte(next)
		e.state = e.inline[:]
	case len(next) <= inlineState:
		e.state = e.inline[:copy(e.inline[:], next)]
	case cap(e.state) > 4*len(next):
		// The state has shrunk a lot (a sliding log emptying): let the
		// large buffer go.
		e.state = clone(next)
	default:
		e.state = append(e.state[:0], next...)
	}
}

// clone returns a copy of b in memory of its own, never nil.
func clone(b []byte) []byte {
	return append(make([]byte, 0, len(b)), b...)
}

// find returns key's entry, or nil, without the shard's mutex: it reads
// the published index with atomics. Without the mutex it may miss an
// entry being added or moved, and may return one being removed (which the
// caller sees marked, under the entry's mutex); with the mutex its answer
// is exact.
func (sh *shard) find(h uint64, key store.Key) *entry {
	t := sh.index.t.Load()
	if t == nil {
		return nil
	}
	slots := t.slots
	mask := uint64(len(slots) - 1)
	// The bound ends the probe when adds and removals racing with it
	// leave it no empty slot to stop at.
	for i, n := h&mask, len(slots); n > 0; i, n = (i+1)&mask, n-1 {
		sl := &slots[i]
		e := sl.e.Load()
		if e == nil {
			return nil
		}
		if sl.hash.Load() == h && e.key == key {
			return e
		}
	}
	return nil
}

// get returns key's entry, or nil. The caller holds sh.mu.
func (sh *shard) get(h uint64, key store.Key) *entry {
	return sh.find(h, key)
}

// add inserts e, whose key hashes to h and is not in the shard, and
// publishes it to lookups without the mutex: e must be complete. The
// caller holds sh.mu.
func (sh *shard) add(h uint64, e *entry) {
	x := &sh.index
	if 8*(x.used+1) > 7*len(x.slots()) {
		x.rehash(sh.n + 1)
	}
	slots := x.slots()
	mask := uint64(len(slots) - 1)
	i := h & mask
	for {
		if old := slots[i].e.Load(); old == nil || old == tombstone {
			break
		}
		i = (i + 1) & mask
	}
	if slots[i].e.Load() == nil {
		x.used++
	}
	// The hash first: a lookup that sees e sees its hash.
	slots[i].hash.Store(h)
	slots[i].e.Store(e)
	sh.n++
	sh.spaces[e.key.Namespace]++
}

// rehash moves the index's entries into a new table, dropping its
// tombstones: the smallest that n entries fill to at most 13/16, so that
// at least a sixteenth of it is left before the next rehash. The new table
// is published once complete.
func (x *index) rehash(n int) {
	size := minSlots
	for 16*n > 13*size {
		size *= 2
	}
	old := x.slots()
	slots, used := make([]slot, size), 0
	mask := uint64(size - 1)
	for k := range old {
		e := old[k].e.Load()
		if e == nil || e == tombstone {
			continue
		}
		h := old[k].hash.Load()
		i := h & mask
		for slots[i].e.Load() != nil {
			i = (i + 1) & mask
		}
		slots[i].hash.Store(h)
		slots[i].e.Store(e)
		used++
	}
	x.used = used
	x.t.Store(&table{slots: slots})
}

// shrink rebuilds the index smaller when its n entries fill less than an
// eighth of it (most of its keys gone), so that sampling it for expired or
// evictable entries, and sweeping it, do not walk a mostly empty table.
func (x *index) shrink(n int) {
	if l := len(x.slots()); l > minSlots && 8*n < l {
		x.rehash(n)
	}
}

// forget updates the namespace count for a removed entry. The caller holds
// sh.mu.
func (sh *shard) forget(e *entry) {
	if n := sh.spaces[e.key.Namespace]; n > 1 {
		sh.spaces[e.key.Namespace] = n - 1
	} else {
		delete(sh.spaces, e.key.Namespace)
	}
}

// remove deletes e, whose key hashes to h. The caller holds sh.mu.
func (sh *shard) remove(h uint64, e *entry) {
	slots := sh.index.slots()
	mask := uint64(len(slots) - 1)
	i := h & mask
	for slots[i].e.Load() != e {
		i = (i + 1) & mask
	}
	sh.removeAt(i)
}

// removeAt deletes the entry in slot i, marking it removed first. The
// caller holds sh.mu.
func (sh *shard) removeAt(i uint64) {
	sh.index.slots()[i].e.Load().kill()
	sh.unlinkAt(i)
}

// unlinkAt takes the entry in slot i, already marked removed, out of the
// index. The slot becomes a tombstone, or empty when the next slot is
// empty (no probe goes through it then), and so do the tombstones before
// it. Slots after i keep their places, so an iteration over the slots that
// removes what it finds sees every entry once; and every other entry
// stays reachable by a probe from its hash, so a lookup without the mutex
// that runs meanwhile misses none of them. The caller holds sh.mu.
func (sh *shard) unlinkAt(i uint64) {
	x := &sh.index
	slots := x.slots()
	e := slots[i].e.Load()
	mask := uint64(len(slots) - 1)
	if slots[(i+1)&mask].e.Load() != nil {
		slots[i].e.Store(tombstone)
	} else {
		for {
			slots[i].e.Store(nil)
			slots[i].hash.Store(0)
			x.used--
			i = (i - 1) & mask
			if slots[i].e.Load() != tombstone {
				break
			}
		}
	}
	sh.n--
	sh.forget(e)
}

// reclaimAt deletes the entry in slot i when its state has expired by
// sh.now, and reports whether it did, with the entry's expiry when it did
// not. Expiry is judged and the entry marked removed under the entry's
// mutex, so a decision that renews the state meanwhile either comes first
// (and the entry stays) or finds it removed (and starts afresh). The
// caller holds sh.mu.
func (sh *shard) reclaimAt(i uint64) (bool, int64) {
	e := sh.index.slots()[i].e.Load()
	if e == nil || e == tombstone {
		return false, math.MaxInt64
	}
	e.mu.Lock()
	if exp := e.expires; exp > sh.now.Load() {
		e.mu.Unlock()
		return false, exp
	}
	e.state = nil
	e.mu.Unlock()
	sh.unlinkAt(i)
	return true, 0
}

// expiry returns e's expiry, read under its mutex.
func (e *entry) expiry() int64 {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.expires
}

// entries calls fn for each slot holding an entry, in slot order from a
// random place, until fn returns false. fn may remove the entry it is
// given (and no other). The caller holds the shard's mutex.
func (x *index) entries(fn func(i uint64, e *entry) bool) {
	slots := x.slots()
	n := uint64(len(slots))
	if n == 0 {
		return
	}
	start := rand.Uint64() & (n - 1)
	for k := uint64(0); k < n; k++ {
		i := (start + k) & (n - 1)
		if e := slots[i].e.Load(); e != nil && e != tombstone && !fn(i, e) {
			return
		}
	}
}

// makeRoom reclaims expired entries among a sample and, when the shard is
// still full, evicts a live entry for a new key of namespace ns: ns pays
// when it holds at least its fair share of the shard, and the namespace
// holding the most entries pays otherwise (see WithMaxKeys). The caller
// holds sh.mu. Map iteration starts at a random place, so the samples
// cover the shard over time.
func (s *Store) makeRoom(sh *shard, ns string) {
	if sh.n < s.maxPerShard && sh.now.Load() < sh.earliest.Load() {
		return // nothing to reclaim, and room to spare
	}
	sh.index.shrink(sh.n)
	seen := 0
	sh.index.entries(func(i uint64, _ *entry) bool {
		sh.reclaimAt(i)
		seen++
		return seen < sampleSize
	})
	if sh.n < s.maxPerShard {
		return
	}
	payer := ns
	held, spaces := sh.spaces[ns], len(sh.spaces)
	if held == 0 {
		spaces++ // ns is about to hold a key here
	}
	if held*spaces < s.maxPerShard {
		// ns is below its fair share: the largest namespace, which is
		// above its own, pays.
		most := 0
		for name, n := range sh.spaces {
			if n > most {
				payer, most = name, n
			}
		}
	}
	s.evict(sh, payer)
}

// evict removes, among the first sampleSize entries of namespace ns found
// in the shard, the one that expires soonest. ns holds at least one entry.
// The caller holds sh.mu.
func (s *Store) evict(sh *shard, ns string) {
	var at uint64
	soonest := int64(math.MaxInt64)
	found := 0
	sh.index.entries(func(i uint64, e *entry) bool {
		if e.key.Namespace != ns {
			return true
		}
		if exp := e.expiry(); found == 0 || exp < soonest {
			soonest, at = exp, i
		}
		found++
		return found < sampleSize
	})
	if found > 0 {
		sh.removeAt(at)
	}
}

// Sweep deletes every entry whose state has expired by the latest request
// time the store has seen (in any shard: the store has no clock of its
// own), and returns how many it deleted. The latest time is known to
// within a millisecond (nowSlack): decisions on keys the store holds
// record it only when it has moved on by more. The store reclaims expired
// state as new keys arrive without it; call Sweep periodically to release
// memory after traffic slows down. State that expires after the last
// request is reclaimed once requests resume.
func (s *Store) Sweep() int {
	// The store has no clock of its own: the latest request time any
	// shard has seen is its best knowledge of now.
	latest := int64(0)
	for i := range s.shards {
		latest = max(latest, s.shards[i].now.Load())
	}
	n := 0
	for i := range s.shards {
		sh := &s.shards[i]
		sh.mu.Lock()
		sh.advance(latest)
		// Decisions lower earliest as they renew entries, also while
		// this runs: each either lowers it after this store, or wrote
		// the expiry that the loop then reads.
		sh.earliest.Store(math.MaxInt64)
		sh.index.entries(func(i uint64, e *entry) bool {
			if gone, exp := sh.reclaimAt(i); gone {
				n++
			} else {
				sh.lower(exp)
			}
			return true
		})
		sh.index.shrink(sh.n)
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
		n += sh.n
		sh.mu.Unlock()
	}
	return n
}

// Expiries calls fn for every key the store holds with its expiry in
// microseconds since the epoch. The conformance suite uses it to check that
// every key carries an expiry. fn must not call the store.
func (s *Store) Expiries(fn func(key store.Key, expires int64)) {
	for i := range s.shards {
		sh := &s.shards[i]
		sh.mu.Lock()
		sh.index.entries(func(_ uint64, e *entry) bool {
			fn(e.key, e.expiry())
			return true
		})
		sh.mu.Unlock()
	}
}

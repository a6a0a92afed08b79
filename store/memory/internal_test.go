package memory

import (
	"math"
	"math/rand/v2"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"unsafe"

	"github.com/ratelimitkit/ratelimit/store"
)

func TestShardSize(t *testing.T) {
	if size := unsafe.Sizeof(shard{}); size != 256 {
		t.Errorf("shard is %d bytes, want 256: adjust its padding", size)
	}
}

// TestHashCollisions puts keys with one hash into one shard, as a 64-bit
// hash collision would, and checks that each keeps its own state through
// lookup, removal, reclamation, Sweep, Len and Expiries.
func TestHashCollisions(t *testing.T) {
	s := MustNew()
	sh := &s.shards[0]
	const h = 42
	keys := []store.Key{{Namespace: "a:x", ID: "1"}, {Namespace: "a:x", ID: "2"}, {Namespace: "b:x", ID: "1"}, {Namespace: "a:x", ID: "3"}}
	for i, k := range keys {
		e := &entry{key: k, expires: int64(10 * (i + 1))} // 10, 20, 30, 40
		e.state = append(e.inline[:0], byte(i))
		sh.add(h, e)
	}
	check := func(wantIDs ...int) {
		t.Helper()
		for i, k := range keys {
			e := sh.get(h, k)
			want := false
			for _, w := range wantIDs {
				want = want || w == i
			}
			switch {
			case want && (e == nil || e.state[0] != byte(i)):
				t.Errorf("get(%v) = %v, want its own entry", k, e)
			case !want && e != nil:
				t.Errorf("get(%v) = %v, want nil", k, e)
			}
		}
		if sh.n != len(wantIDs) {
			t.Errorf("n = %d, want %d", sh.n, len(wantIDs))
		}
		if got := s.Len(); got != len(wantIDs) {
			t.Errorf("Len = %d, want %d", got, len(wantIDs))
		}
		seen := 0
		s.Expiries(func(store.Key, int64) { seen++ })
		if seen != len(wantIDs) {
			t.Errorf("Expiries lists %d keys, want %d", seen, len(wantIDs))
		}
	}
	check(0, 1, 2, 3)
	sh.remove(h, sh.get(h, keys[1])) // from the middle of the chain
	check(0, 2, 3)
	sh.now.Store(10) // the first key's state expires
	if n := sh.reclaim(h); n != 1 {
		t.Errorf("reclaim = %d, want 1", n)
	}
	check(2, 3)
	sh.now.Store(30)
	if n := s.Sweep(); n != 1 {
		t.Errorf("Sweep = %d, want 1", n)
	}
	check(3)
	sh.remove(h, sh.get(h, keys[3]))
	check()
	if sh.index.used != 0 {
		t.Errorf("%d slots of the index are still used", sh.index.used)
	}
}

// TestEntryLayout checks the entry's size (what its doc says) and that a short ID is copied into the entry and a long one
// into memory of its own, neither sharing the caller's bytes.
func TestEntryLayout(t *testing.T) {
	if got := unsafe.Sizeof(entry{}); got != 112 {
		t.Errorf("an entry takes %d bytes, want 112", got)
	}
	for _, id := range []string{"k", "0123456789abcdef", "0123456789abcdefg"} {
		buf := []byte(id)
		key := store.Key{Namespace: "n:gcra", ID: string(buf)}
		e := newEntry(key)
		inside := unsafe.StringData(e.key.ID) == &e.id[0]
		if want := len(id) <= inlineID; inside != want {
			t.Errorf("ID %q held inside its entry: %v, want %v", id, inside, want)
		}
		if e.key != key || unsafe.StringData(e.key.ID) == unsafe.StringData(key.ID) {
			t.Errorf("entry key %+v for %+v: want an equal key holding its own copy", e.key, key)
		}
	}
}

// TestRemovedEntryMarked checks that an entry removed, reclaimed or
// evicted is marked removed (so that a decision which found it without the
// shard's lock looks again) and is no longer found.
func TestRemovedEntryMarked(t *testing.T) {
	s := MustNew(WithMaxKeys(shardCount)) // one key per shard
	sh := &s.shards[0]
	k := store.Key{Namespace: "a:x", ID: "1"}
	const h = 7
	add := func(expires int64) *entry {
		e := newEntry(k)
		e.setState([]byte{1}, false)
		e.expires = expires
		sh.add(h, e)
		if got := sh.find(h, k); got != e || e.removed() {
			t.Fatalf("find = %p (removed %v), want the entry %p", got, e.removed(), e)
		}
		return e
	}
	gone := func(what string, e *entry) {
		t.Helper()
		if !e.removed() || sh.find(h, k) != nil {
			t.Errorf("after %s: removed = %v, find = %p, want true, nil", what, e.removed(), sh.find(h, k))
		}
	}

	e := add(100)
	sh.remove(h, e)
	gone("remove", e)

	e = add(100)
	sh.now.Store(100)
	if n := sh.reclaim(h); n != 1 {
		t.Fatalf("reclaim = %d, want 1", n)
	}
	gone("reclaim", e)

	sh.now.Store(0)
	e = add(1000)
	s.makeRoom(sh, "b:x") // the shard is full: k's entry is evicted
	if sh.n != 0 {
		t.Errorf("after eviction: n = %d, want 0", sh.n)
	}
	gone("eviction", e)
}

// reclaim deletes the expired entries whose key hashes to h, and returns
// how many it deleted. The caller holds sh.mu.
func (sh *shard) reclaim(h uint64) int {
	slots := sh.index.slots()
	if slots == nil {
		return 0
	}
	mask := uint64(len(slots) - 1)
	n := 0
	for i := h & mask; slots[i].e.Load() != nil; i = (i + 1) & mask {
		if slots[i].hash.Load() != h {
			continue
		}
		if gone, _ := sh.reclaimAt(i); gone {
			n++
		}
	}
	return n
}

// TestIndexAgainstMap runs random insertions, lookups, removals and
// reclamations on one shard, with hashes drawn from a small set so that
// keys collide and probes wrap around the table, and checks every lookup,
// the counts and the slots against a map of what the shard should hold.
func TestIndexAgainstMap(t *testing.T) {
	s := MustNew()
	sh := &s.shards[0]
	rng := rand.New(rand.NewPCG(1, 2))
	type held struct {
		h uint64
		e *entry
	}
	want := map[store.Key]held{}
	for step := range 200_000 {
		k := store.Key{Namespace: "n:x", ID: strconv.Itoa(rng.IntN(300))}
		h := uint64(rng.IntN(40)) * 0x9e3779b97f4a7c15 // collisions on purpose
		if w, ok := want[k]; ok {
			h = w.h
		}
		switch op := rng.IntN(10); {
		case op < 4: // lookup, insert when missing
			e := sh.get(h, k)
			if w, ok := want[k]; ok != (e != nil) || ok && w.e != e {
				t.Fatalf("step %d: get(%v) = %p, want %p", step, k, e, w.e)
			}
			if e == nil {
				e = &entry{key: k, expires: int64(rng.IntN(1000))}
				sh.add(h, e)
				want[k] = held{h, e}
			}
		case op < 7: // remove
			if w, ok := want[k]; ok {
				sh.remove(w.h, w.e)
				delete(want, k)
			}
		case op < 9: // reclaim what has expired by a random time
			sh.now.Store(int64(rng.IntN(1000)))
			n := sh.reclaim(h)
			for k2, w := range want {
				if w.h == h && w.e.expires <= sh.now.Load() {
					delete(want, k2)
					n--
				}
			}
			if n != 0 {
				t.Fatalf("step %d: reclaim(%x) deleted %d more than expected", step, h, n)
			}
		default: // sample as makeRoom does
			sh.now.Store(int64(rng.IntN(1000)))
			sh.index.entries(func(i uint64, e *entry) bool {
				if gone, _ := sh.reclaimAt(i); gone {
					delete(want, e.key)
				}
				return rng.IntN(8) != 0
			})
		}
		if sh.n != len(want) {
			t.Fatalf("step %d: n = %d, want %d", step, sh.n, len(want))
		}
		if step%1000 == 0 {
			used, live := 0, 0
			slots := sh.index.slots()
			for i := range slots {
				e := slots[i].e.Load()
				if e != nil {
					used++
				}
				if e != nil && e != tombstone {
					live++
				}
			}
			if used != sh.index.used || live != sh.n || 8*used > 7*len(slots) {
				t.Fatalf("step %d: %d slots used (%d counted), %d live (n %d), of %d", step, used, sh.index.used, live, sh.n, len(slots))
			}
		}
	}
}

// TestHashShort checks that the hash of short IDs reads every byte: IDs of
// every length up to 17 bytes (the first past the short hash), each
// differing from another in one byte at each position, hash differently,
// and their hashes spread over the shards.
func TestHashShort(t *testing.T) {
	s := MustNew()
	rng := rand.New(rand.NewPCG(3, 4))
	shards := map[uint64]bool{}
	for n := 1; n <= 17; n++ {
		for range 50 {
			id := make([]byte, n)
			for i := range id {
				id[i] = byte(rng.IntN(256))
			}
			k := store.Key{Namespace: "n:x", ID: string(id)}
			h := s.hash(k)
			shards[h>>(64-shardBits)] = true
			for i := range id {
				other := append([]byte(nil), id...)
				other[i] ^= 1 << rng.IntN(8)
				if s.hash(store.Key{Namespace: "n:x", ID: string(other)}) == h {
					t.Fatalf("IDs %q and %q (differing at byte %d) hash alike", id, other, i)
				}
			}
		}
	}
	if len(shards) < shardCount*3/4 {
		t.Errorf("850 IDs hash to %d of %d shards", len(shards), shardCount)
	}
}

// TestIndexShrinks checks that a shard's index, grown by many keys, is
// rebuilt smaller once most of them are gone (by Sweep here), so that
// sampling it does not walk a mostly empty table.
func TestIndexShrinks(t *testing.T) {
	s := MustNew()
	sh := &s.shards[0]
	for i := range 10_000 {
		k := store.Key{Namespace: "n:x", ID: strconv.Itoa(i)}
		expires := int64(10)
		if i < 10 {
			expires = 1000 // these stay
		}
		sh.add(s.hash(k), &entry{key: k, expires: expires})
	}
	grown := len(sh.index.slots())
	sh.now.Store(100)
	if n := s.Sweep(); n != 9_990 {
		t.Fatalf("Sweep = %d, want 9990", n)
	}
	if got := len(sh.index.slots()); got*8 > grown || got > 64 {
		t.Errorf("index of %d slots for 10 keys, after %d for 10,000", got, grown)
	}
	for i := range 10 {
		k := store.Key{Namespace: "n:x", ID: strconv.Itoa(i)}
		if sh.get(s.hash(k), k) == nil {
			t.Errorf("key %d lost by the rebuild", i)
		}
	}
}

// TestFindDuringChurn looks keys up without the shard's mutex (find), as a
// decision does, while another goroutine adds and removes other keys in the
// same shard under the mutex, through rehashes, shrinks and tombstones: a
// key held throughout is always found, as its own entry, and a key never
// added never is. Many of the keys share a few hashes, so that the churn
// runs through the held keys' probe chains.
func TestFindDuringChurn(t *testing.T) {
	s := MustNew()
	sh := &s.shards[0]
	hashOf := func(i int) uint64 {
		if i%2 == 0 {
			return uint64(i%8) * 0x9e3779b97f4a7c15 // a shared hash
		}
		return uint64(i) * 0xbf58476d1ce4e5b9
	}
	type held struct {
		h uint64
		e *entry
	}
	var stable []held
	sh.mu.Lock()
	for i := range 40 {
		e := newEntry(store.Key{Namespace: "s", ID: strconv.Itoa(i)})
		e.setState([]byte{byte(i)}, false)
		e.expires = math.MaxInt64
		sh.add(hashOf(i), e)
		stable = append(stable, held{hashOf(i), e})
	}
	sh.mu.Unlock()

	rounds := 12
	var done atomic.Bool
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		defer done.Store(true)
		rng := rand.New(rand.NewPCG(5, 6))
		for range rounds {
			var added []held
			for i := range 1 + rng.IntN(1500) {
				sh.mu.Lock()
				e := newEntry(store.Key{Namespace: "c", ID: strconv.Itoa(i)})
				e.setState([]byte{1}, false)
				h := hashOf(rng.IntN(1 << 20))
				sh.add(h, e)
				sh.mu.Unlock()
				added = append(added, held{h, e})
			}
			rng.Shuffle(len(added), func(i, j int) { added[i], added[j] = added[j], added[i] })
			for _, a := range added {
				sh.mu.Lock()
				sh.remove(a.h, a.e)
				sh.index.shrink(sh.n)
				sh.mu.Unlock()
			}
		}
	}()
	for r := range 2 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			absent := store.Key{Namespace: "s", ID: "absent"}
			for n := 0; !done.Load(); n++ {
				w := stable[(n+r)%len(stable)]
				if got := sh.find(w.h, w.e.key); got != w.e {
					t.Errorf("find(%v) = %p during churn, want its entry %p", w.e.key, got, w.e)
					return
				}
				if got := sh.find(w.h, absent); got != nil {
					t.Errorf("find(%v) = %p, want nil", absent, got)
					return
				}
			}
		}()
	}
	wg.Wait()
}

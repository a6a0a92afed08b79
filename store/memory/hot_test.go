package memory

import (
	"context"
	"testing"
	"time"

	"github.com/ratelimitkit/ratelimit/algorithms"
	"github.com/ratelimitkit/ratelimit/algorithms/forms"
	"github.com/ratelimitkit/ratelimit/store"
)

// TestHotEntry holds the entry a decision looks at before hashing its key
// (Store.hot): a decision on that entry's key decides on it, one on any
// other key (another namespace, an ID of the same length and last bytes)
// does not, and one after the entry is removed starts afresh.
func TestHotEntry(t *testing.T) {
	ctx := context.Background()
	alg := algorithms.FixedWindow(10, time.Hour).(forms.ToDecider)
	k := store.Key{Namespace: "ns", ID: "user-00000001"}
	decide := func(s *Store, k store.Key, now int64) int64 {
		t.Helper()
		allowed, _, remaining, _, _, _, err := s.decideTo(ctx, k, alg, algorithms.Request{Now: now, Cost: 1})
		if err != nil || !allowed {
			t.Fatalf("decision on %v at %d: allowed %v, %v", k, now, allowed, err)
		}
		return remaining
	}

	// An entry that the store's index does not hold, planted as the hot
	// one: only a decision that reads the hot entry sees its count.
	other := MustNew()
	for now := int64(1); now <= 4; now++ {
		decide(other, k, now)
	}
	planted := other.shards[other.hash(k)>>(64-shardBits)].find(other.hash(k), k)
	if planted == nil {
		t.Fatal("no entry for the key in the store it was decided in")
	}
	s := MustNew()
	sh := &s.shards[0]
	sh.hot.Store(planted)
	s.hot.Store(sh)
	if got := decide(s, k, 5); got != 5 {
		t.Errorf("decision on the hot entry's key: remaining %d, want 5 (the planted entry's count)", got)
	}
	for _, o := range []store.Key{
		{Namespace: "other", ID: k.ID},
		{Namespace: k.Namespace, ID: "xser-00000001"},
		{Namespace: k.Namespace, ID: "user-0000001"},
	} {
		if got := decide(s, o, 6); got != 9 {
			t.Errorf("decision on %v beside the hot entry of %v: remaining %d, want 9 (a key of its own)", o, k, got)
		}
	}

	// Removed, the hot entry is passed by.
	planted.kill()
	if got := decide(s, k, 7); got != 9 {
		t.Errorf("decision after the hot entry was removed: remaining %d, want 9 (afresh)", got)
	}
	if e := s.shards[s.hash(k)>>(64-shardBits)].find(s.hash(k), k); e == nil || e == planted {
		t.Errorf("decision after the hot entry was removed: the store's index holds %p for the key, want a new entry", e)
	}

	// A decision found by the index in a microsecond remember samples
	// makes its entry the hot one.
	s = MustNew()
	decide(s, k, 1)
	decide(s, k, hotEvery)
	if sh := s.hot.Load(); sh == nil || sh.hot.Load() == nil || sh.hot.Load().key != k {
		t.Fatalf("after a decision at %d µs the hot entry is not the key's", int64(hotEvery))
	}
	if got := decide(s, k, hotEvery+1); got != 7 {
		t.Errorf("third decision: remaining %d, want 7", got)
	}
	if err := s.Delete(ctx, k); err != nil {
		t.Fatal(err)
	}
	if got := decide(s, k, hotEvery+2); got != 9 {
		t.Errorf("decision after Delete: remaining %d, want 9 (afresh)", got)
	}
}

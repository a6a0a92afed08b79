// Package mapstore is a complete, minimal store.Store: state in a Go
// map guarded by a mutex, in this process only. It is written to be
// copied: start a store of your own from it, replace the map with your
// backend, and keep its tests, which run the conformance suite
// (docs/writing-a-store.md walks through it).
//
// It implements what every store implements, store.Store (Update and
// Delete), and one optional capability, store.Exporter (Export), so
// that ratelimit.Count and ratelimit.Export, and with them `ratelimit
// move`, work on it. It has no store.Decider: the limiter runs every
// algorithm, built-in or a user's own, through Update. For production in
// one process, use store/memory, which is bounded and faster.
package mapstore

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"

	"github.com/ratelimitkit/ratelimit/store"
)

// Store keeps rate-limit state in a map. Create it with New; the zero
// value is not usable. It is safe for concurrent use.
type Store struct {
	mu     sync.Mutex
	items  map[store.Key]item
	writes int // since the last sweep
}

// item is one key's state and when its TTL passes, in microseconds since
// the Unix epoch on the clock that wrote it.
type item struct {
	state   []byte
	expires int64
}

// sweepEvery is how many writes pass between two sweeps of expired state.
const sweepEvery = 1024

var (
	_ store.Store    = (*Store)(nil)
	_ store.Exporter = (*Store)(nil)
)

// New returns an empty store.
func New() *Store { return &Store{items: make(map[store.Key]item)} }

// Update implements store.Store. It holds the store's lock from the
// read to the write, so nothing interleaves (the contract's atomicity);
// your backend's way is a transaction with a row lock, a conditional
// write or a script. State whose TTL has passed at now is handed to fn as
// nil, whether or not a sweep has removed it yet. Every write carries its
// expiry, now + ttl, and every sweepEvery writes the expired entries are
// deleted, so the map does not keep what no decision can read.
func (s *Store) Update(ctx context.Context, key store.Key, now int64, fn store.UpdateFunc) error {
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("mapstore: update %q: %w", key.String(), err)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	var cur []byte
	if it, ok := s.items[key]; ok && it.expires > now {
		// A copy: fn may write into it, and when fn fails the stored
		// state must stay as it was.
		cur = slices.Clone(it.state)
	}
	next, ttl, err := fn(cur, now)
	if err != nil {
		return err // unchanged, as the contract asks
	}
	if next == nil {
		return nil // nothing to write: the state and its expiry stay
	}
	s.items[key] = item{state: slices.Clone(next), expires: now + max(ttl, 1)}
	if s.writes++; s.writes >= sweepEvery {
		s.writes = 0
		for k, it := range s.items {
			if it.expires <= now {
				delete(s.items, k)
			}
		}
	}
	return nil
}

// Delete implements store.Store: it forgets key's state. Deleting a
// key that holds nothing is not an error.
func (s *Store) Delete(ctx context.Context, key store.Key) error {
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("mapstore: delete %q: %w", key.String(), err)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.items, key)
	return nil
}

// Export implements store.Exporter: it yields every key under
// namespace (every key for "") whose state is live at now, copied out
// under the lock and yielded without it, and stops at yield's first error.
func (s *Store) Export(ctx context.Context, namespace string, now int64, yield func(store.Entry) error) error {
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("mapstore: export: %w", err)
	}
	s.mu.Lock()
	var entries []store.Entry
	for k, it := range s.items {
		if it.expires > now && (namespace == "" || k.Namespace == namespace) {
			entries = append(entries, store.Entry{Key: k, State: slices.Clone(it.state), Expires: it.expires})
		}
	}
	s.mu.Unlock()
	slices.SortFunc(entries, func(a, b store.Entry) int { return strings.Compare(a.Key.String(), b.Key.String()) })
	for _, e := range entries {
		if err := ctx.Err(); err != nil {
			return fmt.Errorf("mapstore: export: %w", err)
		}
		if err := yield(e); err != nil {
			return err
		}
	}
	return nil
}

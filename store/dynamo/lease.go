package dynamo

import (
	"context"

	"github.com/ratelimitkit/ratelimit/lease/leasewire"
	"github.com/ratelimitkit/ratelimit/store"
)

// RunLease implements leasewire.Runner. The lease's transition (leasewire.Step)
// runs through Update, as on any store, with one difference: an outcome
// that writes nothing (the key is held by another owner, or the caller's
// lease is gone) is never taken from this process's cache, which cannot
// know that another process released the key or took it over; it is
// computed again from a consistent read of the item first. So a key
// released by one process can be taken by another within one of its
// polls, at the cost of one read per poll on a held key. Decisions of
// limiters keep answering denials from the cache.
func (s *Store) RunLease(ctx context.Context, key store.Key, now int64, req leasewire.Request) (leasewire.Result, error) {
	var res leasewire.Result
	err := s.update(ctx, key, now, func(cur []byte, now int64) ([]byte, int64, error) {
		next, ttl, r, err := leasewire.Step(cur, now, req)
		res = r
		return next, ttl, err
	}, true)
	if err != nil {
		// The queue's worker may still be running the transition for a
		// caller that stopped waiting: res is not ours to read.
		return leasewire.Result{}, err
	}
	return res, nil
}

package redis

import (
	"context"

	"github.com/ratelimitkit/ratelimit/internal/redisengine"
	"github.com/ratelimitkit/ratelimit/store"
)

// State reads a key's state as the Go form encodes it: Harness.State.
func State(s *Store) func(context.Context, store.Key) ([]byte, int64, error) {
	return redisengine.StateReader(s.engine)
}

// Queued returns how many decisions wait behind the batch in flight.
func Queued(s *Store) int { return redisengine.Queued(s.engine) }

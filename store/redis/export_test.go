package redis

import (
	"context"

	"github.com/ratelimitkit/ratelimit"
	"github.com/ratelimitkit/ratelimit/internal/redisengine"
)

// State reads a key's state as the Go form encodes it, for the conformance
// suite's Harness.State.
func State(s *Store) func(ctx context.Context, key ratelimit.Key) ([]byte, int64, error) {
	return func(ctx context.Context, key ratelimit.Key) ([]byte, int64, error) {
		return redisengine.State(ctx, s.engine, key)
	}
}

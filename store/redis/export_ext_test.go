package redis_test

import (
	"context"
	"errors"
	"testing"

	goredis "github.com/redis/go-redis/v9"

	"github.com/ratelimitkit/ratelimit"
	"github.com/ratelimitkit/ratelimit/store/redis"
)

// ownClient is a caller's own UniversalClient: the store cannot know how to
// reach every node through it. Its nil embedded client panics, failing the
// test, if called.
type ownClient struct{ goredis.UniversalClient }

// TestExportUnsupported checks that a client the store cannot scan every
// node through says so with ErrUnsupported. Exports on real servers are
// tested with the move command (cmd/ratelimit).
func TestExportUnsupported(t *testing.T) {
	s, err := redis.New(ownClient{}, redis.WithServerClock(false))
	if err != nil {
		t.Fatal(err)
	}
	err = s.Export(context.Background(), "a:gcra", 0, func(ratelimit.Entry) error { return nil })
	if !errors.Is(err, ratelimit.ErrUnsupported) {
		t.Fatalf("Export through a %T = %v, want ErrUnsupported", ownClient{}, err)
	}
}

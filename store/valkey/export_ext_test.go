package valkey_test

import (
	"testing"

	"github.com/ratelimitkit/ratelimit/internal/redisengine/storetest"
	"github.com/ratelimitkit/ratelimit/store"
	"github.com/ratelimitkit/ratelimit/store/valkey"
)

// TestExportBoundedOnFrozenServer runs storetest.ExportBounded (Count on
// a frozen server fails within about 1 s and works after the thaw).
func TestExportBoundedOnFrozenServer(t *testing.T) {
	storetest.ExportBounded(t, func(t *testing.T, addr string) []store.Store {
		s, err := valkey.New(newClient(t, addr), valkey.WithPrefix("frozen"))
		if err != nil {
			t.Fatal(err)
		}
		return []store.Store{s}
	})
}

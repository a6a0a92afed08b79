package valkey_test

import (
	"testing"

	vk "github.com/valkey-io/valkey-go"

	"github.com/ratelimitkit/ratelimit/internal/redisengine/storetest"
	"github.com/ratelimitkit/ratelimit/store"
	"github.com/ratelimitkit/ratelimit/store/valkey"
)

// TestHungServerBoundsEveryCaller runs storetest.Hung (every caller on a
// frozen server gets its context's error within its deadline; nothing is
// left running after the thaw) on a redis-server of the test's own, which
// valkey-go speaks to.
func TestHungServerBoundsEveryCaller(t *testing.T) {
	storetest.Hung(t, func(t *testing.T, addr string) (store.Store, func()) {
		c, err := vk.NewClient(vk.ClientOption{InitAddress: []string{addr}, DisableCache: true})
		if err != nil {
			t.Fatal(err)
		}
		s, err := valkey.New(c)
		if err != nil {
			c.Close()
			t.Fatal(err)
		}
		return s, c.Close
	}, func(s store.Store) int { return valkey.Queued(s.(*valkey.Store)) })
}

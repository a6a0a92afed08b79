package valkey_test

import (
	"testing"

	vk "github.com/valkey-io/valkey-go"

	"github.com/ratelimitkit/ratelimit/internal/redisengine/storetest"
	"github.com/ratelimitkit/ratelimit/store"
	"github.com/ratelimitkit/ratelimit/store/valkey"
)

// documented returns a store on a client of addr with the options
// docs/stores/redis.md shows, closed after t, or the client's error.
func documented(t *testing.T, addr string) (store.Store, error) {
	c, err := vk.NewClient(vk.ClientOption{InitAddress: []string{addr}})
	if err != nil {
		return nil, err
	}
	t.Cleanup(c.Close)
	return valkey.New(c)
}

// TestRefusedConnection: valkey-go dials when the client is created, so a
// port nothing listens on fails vk.NewClient at once, with "connection
// refused".
func TestRefusedConnection(t *testing.T) {
	storetest.Refused(t, "valkey", documented)
}

// TestServerKilled kills a private server under load: from the kill on,
// every call answers within 100ms, and decisions come back after a restart.
func TestServerKilled(t *testing.T) {
	storetest.Killed(t, func(t *testing.T, addr string) store.Store {
		s, err := documented(t, addr)
		if err != nil {
			t.Fatal(err)
		}
		return s
	})
}

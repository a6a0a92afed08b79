package valkey_test

import (
	"github.com/ratelimitkit/ratelimit/lease/leasewire"
	"github.com/ratelimitkit/ratelimit/store/valkey"
)

// The store runs the lease's Lua form (the engine's RunLease).
var _ leasewire.Runner = (*valkey.Store)(nil)

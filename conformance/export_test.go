package conformance

import (
	"time"

	"github.com/ratelimitkit/ratelimit"
	"github.com/ratelimitkit/ratelimit/algorithms"
	"github.com/ratelimitkit/ratelimit/lease"
	"github.com/ratelimitkit/ratelimit/store"
)

// Limiter and Locker are the fault groups' subjects, for the suite's own
// tests.
type (
	Limiter = limiter
	Locker  = locker
)

// SetLocker makes the fault groups test the lockers newLocker makes.
func SetLocker(newLocker func(s store.Store, ttl time.Duration, opts ...lease.Option) (Locker, error)) {
	subjects.locker = newLocker
}

// SetBreakerLimiter makes the fault groups test the limiters with a circuit
// breaker that newLimiter makes.
func SetBreakerLimiter(newLimiter func(s store.Store, alg algorithms.Algorithm, failures int, coolDown time.Duration, opts ...ratelimit.Option) (Limiter, error)) {
	subjects.breakerLimiter = newLimiter
}

// SetQuotaLimiter makes the LocalQuota group test the limiters newLimiter
// makes: with local quota of shares of at most maxShare units, living
// lifetime.
func SetQuotaLimiter(newLimiter func(s store.Store, alg algorithms.Algorithm, maxShare int, lifetime time.Duration, opts ...ratelimit.Option) (Limiter, error)) {
	subjects.quotaLimiter = newLimiter
}

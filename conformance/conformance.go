// Package conformance is the test suite every ratelimit.Store must pass.
// Users run it on their own stores from an ordinary test:
//
//	func TestConformance(t *testing.T) {
//		conformance.Run(t, func(t *testing.T) conformance.Harness {
//			return conformance.Harness{Store: newMyStore(t)}
//		})
//	}
//
// Run calls the factory once per subtest, so each starts from a fresh,
// empty store; name subtests with go test -run as usual. The store must use
// the time the limiter passes it (see ratelimit.Store.Update): a store that
// prefers its server's clock must be built with that turned off here.
//
// The suite covers exact admission under concurrency (on an existing key
// and on the first-create race), every algorithm's window and refill
// boundaries with an injected clock, expiry of every key written, decisions
// that stay right when expiry never fires, key isolation and odd keys,
// costs above one, Peek, Reset, context cancellation, and, for stores that
// implement ratelimit.Decider, equality of the server-side forms with the Go
// forms on seeded random sequences.
package conformance

import (
	"context"
	"time"

	"github.com/ratelimitkit/ratelimit"
)

// Harness is a store under test, with what the suite needs to inspect it.
type Harness struct {
	// Store is a fresh, empty store (or one whose keys the other
	// harnesses do not see, such as a unique key prefix on a shared
	// server).
	Store ratelimit.Store

	// Expiries lists every backend key or row the store holds, with its
	// expiry, so the suite can prove that every write carries one. A
	// store whose backend has no way to list them leaves it nil, and
	// the expiry subtests skip saying so.
	Expiries func(ctx context.Context) ([]Expiry, error)

	// RealTimeExpiry reports that the backend expires keys by the real
	// clock rather than by the times the limiter passes, as Redis does.
	// The suite then judges Expiry.At against time.Now instead of its
	// fake clock. Such a store must still keep state at least until its
	// TTL has passed on the limiter's clock, which in tests may run slower
	// than real time: add some slack to the backend's expiry when the
	// store uses the limiter's clock, or the Differential group fails.
	RealTimeExpiry bool
}

// Expiry is one backend key (or row, or item) and its expiry.
type Expiry struct {
	// Key is the backend's name for it, for messages.
	Key string
	// Never reports that it has no expiry at all: always a defect.
	Never bool
	// At is when it expires: on the real clock when the harness sets
	// RealTimeExpiry, on the limiter's (fake) clock otherwise. It may be
	// in the past for state that has expired and is not reclaimed yet.
	At time.Time
}

// Package conformance is the test suite every store.Store must pass.
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
// the time the limiter passes it (see store.Store.Update): a store that
// prefers its server's clock must be built with that turned off here.
//
// The suite covers exact admission under concurrency (on an existing key
// and on the first-create race), every algorithm's window and refill
// boundaries with an injected clock, expiry of every key written, decisions
// that stay right when expiry never fires, key isolation and odd keys,
// costs above one, Peek, Reset, context cancellation, and, for stores that
// implement store.Decider, equality of the server-side forms with the Go
// forms on seeded random sequences: clocks that step backwards, several
// parameter sets switched mid-sequence under one name, values near the
// parameter checks' bounds, costs above one, peeks, reservations with max
// delays up to the longest period and their cancellation, with every decision,
// and where the harness can read it every stored state and TTL, compared to
// the Go form's; and, where the store can read its server's clock, the same
// in real time on that clock. Its Tiers group moves keys between tiers
// (ratelimit.Limiter.Tier): each algorithm's state carries across as
// docs/tiers.md says, a denial's RetryAfter under the new numbers holds,
// and admission at a tier is exact under concurrency. Its Composite group
// holds composites (algorithms.All) to the same standards on both paths
// (boundaries, concurrency exactness with no partial consumption,
// differential against the Go form, expiry, key isolation, bad
// compositions). Its Reservation group checks ratelimit.Limiter.Reserve
// and Reservation.Cancel per algorithm with exact expectations: delays
// into the future where the algorithm reserves them, cancellation that
// gives back once, never above a fresh key, nothing once too late, and
// what later reservations built on kept. Its Fault groups put the store behind a wrapper that
// injects faults (a store that hangs, answers slowly or after the caller's
// deadline, fails, or fails after its write took effect) and, where the
// harness can freeze the backend (Harness.Freeze), real ones: every Limiter
// and lease call returns within its bound, the circuit breaker opens only
// on store faults, lease.Locker.Do never runs the work past its lease and
// releases on a panic, and the failure policy answers as documented.
// Its concurrency groups spread their goroutines over the Store and its
// Twin (Harness.Twin), so that a store atomic only inside one instance
// fails them.
//
// Check is the model-based checker (docs/checker.md): it draws traces of
// calls over algorithms, the root package's options, two instances,
// concurrent callers and clocks that disagree or read out of order, and
// holds every outcome to the algorithm's promise (Model): never more than
// it may admit over any span, never a denial where it must admit, a Cancel
// never giving back more than it took. A failing trace is shrunk by rapid
// and reported as readable calls and as a Trace for CheckTrace:
//
//	func TestChecker(t *testing.T) {
//		conformance.Check(t, func(t *testing.T) conformance.Harness {
//			return conformance.Harness{Store: newMyStore(t)}
//		}, conformance.CheckConfig{})
//	}
package conformance

import (
	"context"
	"testing"
	"time"

	"github.com/ratelimitkit/ratelimit/store"
)

// Harness is a store under test, with what the suite needs to inspect it.
type Harness struct {
	// Store is a fresh, empty store (or one whose keys the other
	// harnesses do not see, such as a unique key prefix on a shared
	// server).
	Store store.Store

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
	// The suite accepts a backend expiry of up to twice the state's TTL
	// (plus a second) from such a store, so the slack may follow the TTL.
	RealTimeExpiry bool

	// State reads the state the store holds for key, translated into the
	// Go form's encoding (for the built-in algorithms: the little-endian
	// int64 fields their docs list, and for the sliding log its (time,
	// cost) entries in the Go form's order), with the time its TTL passes,
	// in microseconds since the Unix epoch on the clock that decided. It
	// returns a nil state when the key holds none. The Differential groups
	// then hold every write to the Go form's next state and TTL, not only
	// the decisions. A store whose state does not map to the Go form's
	// leaves it nil, and only decisions are compared.
	State func(ctx context.Context, key store.Key) (state []byte, expires int64, err error)

	// ServerClock, for a store that can read its server's clock, returns
	// a store on the same backend and keys as Store that does (Store
	// itself must use the limiter's time). The DifferentialServerClock
	// group then runs sequences in real time and holds each decision, and
	// with State each write, to the Go form at some time within the call,
	// by this machine's clock: the server's clock must agree with it, as
	// it does for a server on the same machine. Nil skips that group.
	ServerClock func(t *testing.T) store.Store

	// DecidesAllBuiltins reports that the store's Decider has a server
	// form for every built-in algorithm. The suite then fails, instead of
	// skipping, when Decide answers ErrUnsupported for one: a limiter
	// would silently fall back to Update.
	DecidesAllBuiltins bool
	// Twin returns a second, separate instance of the store over the same
	// backend and key prefix as Store (its own client or connection pool
	// where the store has one), as a second process would open. The
	// concurrency groups (Concurrency, OwnAlgorithm, Composite's and
	// Tiers' concurrency subtests) then spread their goroutines over
	// limiters on Store and on the Twin, so that a store whose
	// read-modify-write is atomic only inside one instance (a mutex of its
	// own over a shared backend) fails them; the lease groups prove mutual
	// exclusion between the two instances; and Check runs two processes.
	// Every store on a backend that processes share should set it; a store
	// with no such thing (one in process memory) leaves it nil, or returns
	// Store itself, and those subtests run on one instance or skip saying
	// so.
	Twin func(t *testing.T) store.Store

	// Staleness is how long after another instance's Reset or Cancel a
	// store instance may still decide an outcome that writes nothing (a
	// denial, a Peek) from what it saw of the key before, by the
	// limiter's clock: the bound a store with a per-process cache
	// documents (store/dynamo's WithMaxStaleness). The Reset group, with
	// a Twin, holds the store to it (the Twin admits once Staleness has
	// passed on the clock after the Store's Reset), and Check does not
	// hold a denial to the algorithm's lower bound within Staleness of
	// another instance's Reset or Cancel. Zero: instances see each
	// other's at once.
	Staleness time.Duration

	// Freeze, for a store whose backend the test can stop answering (a
	// private server frozen with SIGSTOP, say), returns a fresh store on
	// such a backend and a function that freezes it: connections stay
	// open and no request is answered until the test ends, when the
	// harness thaws or stops it. The FaultHungStore group then holds every
	// Limiter and lease call on the frozen store to its bound, which only
	// a store that honours its context keeps, also while a call waits for
	// a connection another call is opening. Nil skips those subtests (the
	// group's wrapper-injected hang still runs).
	Freeze func(t *testing.T) (store store.Store, freeze func())

	// Timeout is how long a subtest may run without another starting or
	// ending before the suite's watchdog ends the run with a panic naming
	// it (zero: DefaultTimeout; negative: no watchdog, for debugging).
	// The latest harness's value applies from its subtest on.
	Timeout time.Duration
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

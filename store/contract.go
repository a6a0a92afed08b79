// Package store is the contract between a Limiter (package ratelimit) and
// the place it keeps state: the store author's API, as database/sql/driver
// is to database/sql. A user picks a store from its subpackages (memory,
// redis, valkey, dynamo, postgres) and never needs this package; a store
// author implements Store, the two-method atomic contract every store
// keeps, and whichever optional capabilities the backend offers:
//
//   - Decider, to run the built-in algorithms next to the data in one round
//     trip (their server forms are in package algorithms/forms);
//   - ServerClocker, to decide by the server's clock;
//   - Exporter and Importer, to move state between stores (package
//     statefile and the ratelimit move command).
//
// The exported conformance suite (package conformance) holds a store to all
// of it; docs/writing-a-store.md walks through a complete store, and
// examples/mapstore is one a user can copy.
package store

import (
	"context"
	"errors"
	"strings"

	"github.com/ratelimitkit/ratelimit/algorithms"
	"github.com/ratelimitkit/ratelimit/internal/names"
)

// Key names the state of one user key under one limiter. Stores receive it
// already validated: Namespace is "<limiter name>:<algorithm name>", each
// part matching [A-Za-z0-9_.-]{1,64} (so it holds exactly one ':' and no
// braces), and ID is 1 to MaxKeyLen bytes of anything (braces, spaces,
// unicode, binary).
//
// A store maps a Key to its own key space however it likes, provided that
// two different Keys never share state. The String form is one safe choice.
type Key struct {
	// Namespace identifies the limiter: its name and algorithm.
	Namespace string
	// ID is the caller's key, such as a user ID or an IP address.
	ID string
}

// String returns Namespace + ":" + ID. Since Namespace holds exactly one
// ':' and ID comes last, distinct Keys give distinct strings.
func (k Key) String() string { return k.Namespace + ":" + k.ID }

// MaxKeyLen is the longest Key.ID, in bytes, a Limiter accepts.
const MaxKeyLen = 512

// Store holds rate-limit state. It is the narrow contract every store
// implements and the conformance suite enforces; a store contains no
// algorithm logic. Implementations must be safe for concurrent use.
//
// Stores that can run a built-in algorithm next to their data also
// implement Decider; every store implements Store, so every algorithm,
// including a user's own, runs on every store.
type Store interface {
	// Update atomically replaces the state of key with what fn computes
	// from it: between the read that fn sees and the write of its result,
	// nothing else changes key's state. This holds across goroutines,
	// processes and machines sharing the backend.
	//
	// now is the time in microseconds since the Unix epoch from the
	// limiter's clock. A store that is configured to use its own clock (a
	// database server's) passes its own reading to fn instead; otherwise
	// it passes now unchanged.
	//
	// fn receives the current state, or nil when key holds none or its
	// state has outlived its TTL (whether or not the backend has deleted
	// it yet). fn may overwrite current's memory. It returns the next
	// state and how long, in microseconds, that state must be kept; a nil
	// next leaves the stored state and its expiry exactly as they are.
	// When ttl has passed, the store must treat the state as missing, and
	// it should reclaim the space; it must never keep state without an
	// expiry.
	//
	// A store may call fn more than once, for instance after losing a
	// compare-and-swap race, passing fresh state each time; only the
	// result of the last call may be stored. When fn returns an error,
	// Update stores nothing and returns that error unchanged. A store may
	// call fn on a goroutine other than the caller's (one that batches a
	// key's queued requests, say), and after an Update that returns an
	// error (the caller's context ended while its request was queued or in
	// flight), fn may still run; callers must not rely on what fn saw
	// unless Update returned nil.
	//
	// Update returns ctx.Err() (possibly wrapped) when the context ends
	// first, and backend failures wrapped so that errors.As reaches the
	// backend's error.
	Update(ctx context.Context, key Key, now int64, fn UpdateFunc) error

	// Delete removes key's state. Deleting a key that holds nothing is not
	// an error.
	Delete(ctx context.Context, key Key) error
}

// UpdateFunc computes a key's next state; see Store.Update.
type UpdateFunc func(current []byte, now int64) (next []byte, ttl int64, err error)

// Decider is implemented by stores that can run an algorithm next to their
// data: a Lua script in Redis, a SQL function in PostgreSQL, the Go form
// itself in the memory store. For the algorithms it supports, one call is
// one round trip to the backend, atomic, with no retries.
//
// Decide applies alg to key's state as alg.Decide would, and stores the
// resulting state with its TTL unless req.Peek is set. The decision must
// equal the Go form's for the same sequence of requests (the conformance
// suite checks this). The clock rule is Store.Update's: req.Now is the
// limiter's clock, which a store configured to use its own clock replaces.
// So is the expiry rule: state whose TTL has passed by that time is
// treated as missing, whether or not the backend has removed it yet.
//
// For an algorithm it has no form for, Decide returns an error wrapping
// ErrUnsupported without touching the backend, and the limiter falls back
// to Update.
type Decider interface {
	Decide(ctx context.Context, key Key, alg algorithms.Algorithm, req algorithms.Request) (algorithms.Decision, error)
}

// ErrUnsupported is returned by Decider.Decide for an algorithm the store
// cannot run next to its data, and by statefile.Count and Export for a
// store that cannot enumerate its keys; the wrapping message says which.
var ErrUnsupported = errors.New("ratelimit: not supported by the store")

// Errors a store returns, beside ErrUnsupported, algorithms.ErrInvalidParams
// (for an unusable option or constructor argument) and
// algorithms.ErrCorruptState (for stored state the store cannot read back).
// Package ratelimit exports each under the same name (ratelimit.ErrInvalidKey
// is store.ErrInvalidKey), so a user's errors.Is sees one value whichever
// package the error came from; a store never needs to import package
// ratelimit, as a database/sql driver never imports database/sql. Their
// messages say "ratelimit:", the module's name, as every error of the
// module's does: a user reads them without knowing this package.
var (
	// ErrInvalidKey reports a key that is empty, longer than MaxKeyLen, or
	// (from a store) longer than the store can map to its key space.
	ErrInvalidKey = names.ErrInvalidKey
	// ErrInvalidCost reports a request's cost below 1 or above what the
	// algorithm could ever admit (its MaxCost): a Decider returns it for
	// such a req.Cost.
	ErrInvalidCost = errors.New("ratelimit: invalid cost")
	// ErrInvalidTime reports a time, in microseconds since the Unix epoch,
	// before the epoch or too far after it to be held exactly (a request's
	// Now, a reservation's deadline, a lease's clock reading).
	ErrInvalidTime = errors.New("ratelimit: invalid time")
)

// ServerClocker is implemented by stores that can decide by their server's
// clock instead of the time the limiter passes (Redis, Valkey, PostgreSQL).
// Each such store configures it with an option spelled WithServerClock(on),
// and it is on by default: in production every application machine then
// shares the server's timeline.
//
// ServerClock reports whether the store currently uses its server's clock.
// New refuses a clock other than clock.System (ratelimit.WithClock) with a
// store that reports true, since the store would ignore it. A store that does not
// implement ServerClocker is taken to use the time the limiter passes.
type ServerClocker interface {
	ServerClock() bool
}

// Moving state between stores: the capabilities a store offers to it.
//
// A store that can enumerate its keys implements Exporter; one that must
// write state in a form of its own (the Lua forms' doubles in Redis, say)
// implements Importer. Both are optional, detected by type assertion, in
// the manner of database/sql/driver: a store without Exporter cannot be
// counted or exported (ErrUnsupported), and a store without Importer is
// imported into through its Update, which every store has. Users call
// neither: package statefile counts, exports and imports through them,
// and reads and writes the state file. docs/moving-state.md describes the
// format and each store's support.

// Entry is one key's state, in the store-independent form every store
// exports and imports: the Go form's state bytes (what the algorithm's
// Decide takes) and when that state's TTL passes.
type Entry struct {
	// Key names the state: the limiter's namespace and the user's key.
	Key Key
	// State is the Go form's encoding of the state.
	State []byte
	// Expires is when the state's TTL passes, in microseconds since the
	// Unix epoch, on the clock that decided; after it the state counts as
	// missing.
	Expires int64
}

// Exporter is implemented by stores that can enumerate the keys they hold.
//
// Export calls yield for every key under namespace (every key the store
// holds when namespace is "") whose state is live at now: its expiry is
// after now, on the store's clock rule (Store.Update's). It stops at the
// first error yield returns and returns that error unchanged. Keys written
// or deleted while Export runs may or may not be seen, and a store whose
// backend scans without a snapshot (Redis SCAN) may yield a key twice;
// importing the second copy writes nothing. yield must not call the store
// from within a lock the store holds; the built-in stores call it holding
// none.
//
// A store that cannot enumerate its keys in some configuration returns an
// error wrapping ErrUnsupported that says why.
//
// Export bounds each of its round trips to the backend (a page, a batch of
// keys) whatever ctx allows, so that a store that hangs fails a count or
// an export (package statefile) within about one bound, and a long export
// of a live store is not cut off: the built-in stores give each round
// trip a second.
type Exporter interface {
	Export(ctx context.Context, namespace string, now int64, yield func(Entry) error) error
}

// Importer is implemented by stores whose decisions for some algorithms do
// not read the state Update writes (the Redis and Valkey stores keep the
// Lua forms' state apart). Stores without it are imported into through
// Update, which is exactly right for them.
//
// Import writes e's state under e.Key, with an expiry at e.Expires, in the
// form the store's decisions for alg read, unless the key already holds
// live state at now, which it keeps; it reports whether it wrote. alg is
// nil when the algorithm is not known (then the state goes where Update
// keeps it). An entry already expired at now is not written. Like Update,
// it is atomic per key and uses the store's own clock where configured.
type Importer interface {
	Import(ctx context.Context, alg algorithms.Algorithm, e Entry, now int64) (bool, error)
}

// ParseKey is the inverse of Key.String: since a namespace holds exactly
// one ':', the second ':' ends it, and the ID, which may hold any bytes,
// follows. It reports false when s holds fewer than two ':' or the
// namespace is not one a Limiter makes (see Key).
func ParseKey(s string) (Key, bool) {
	i := strings.IndexByte(s, ':')
	if i < 0 {
		return Key{}, false
	}
	j := strings.IndexByte(s[i+1:], ':')
	if j < 0 {
		return Key{}, false
	}
	k := Key{Namespace: s[:i+1+j], ID: s[i+2+j:]}
	if names.CheckNamespace(k.Namespace) != nil {
		return Key{}, false
	}
	return k, true
}

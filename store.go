package ratelimit

import (
	"context"
	"errors"

	"github.com/ratelimitkit/ratelimit/algorithms"
	"github.com/ratelimitkit/ratelimit/algorithms/forms"
	"github.com/ratelimitkit/ratelimit/internal/fastpath"
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

// toDecider decides, for an forms.ToDecider, with the decision's fields
// as results (the memory store's, which it registers with
// internal/fastpath, so that no exported method exists for it alone): a
// Limiter prefers it, as the fields travel in registers, where a Decision
// returned by value is copied through memory, a noticeable part of a
// decision made in process. Its errors are Decide's.
type toDecider = func(ctx context.Context, key Key, alg forms.ToDecider, req algorithms.Request) (allowed bool, limit, remaining, retryAfter, resetAfter, delay int64, err error)

// toDeciderOf returns store's toDecider, or nil when it has none.
func toDeciderOf(store Store) toDecider {
	f, _ := fastpath.DecideTo(store).(toDecider)
	return f
}

// ErrUnsupported is returned by Decider.Decide for an algorithm the store
// cannot run next to its data, and by statefile.Count and Export for a
// store that cannot enumerate its keys; the wrapping message says which.
var ErrUnsupported = errors.New("ratelimit: not supported by the store")

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

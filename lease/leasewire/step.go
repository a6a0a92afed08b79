// Package leasewire is the store author's side of package lease, as
// algorithms/forms is of algorithms: the lease's transition written once
// (Step, on a Request, with a Result), its server-side form for Redis and
// Valkey (Lua), and Runner, the capability a store implements to run Step
// next to its data in one round trip. A user taking leases needs none of
// it; a store that has only Update needs none of it either, as a Locker
// runs Step through Update.
package leasewire

import (
	"context"
	_ "embed"
	"encoding/binary"
	"fmt"

	"github.com/ratelimitkit/ratelimit/algorithms"
	"github.com/ratelimitkit/ratelimit/store"
)

// The lease's transitions, written once as a pure function of the stored
// record and the store's time. The Locker runs them through
// store.Store.Update; a store with a server-side form (see Runner) runs
// the same transitions next to its data, held equal to Step by a
// differential test.
//
// The server-side form, lease.lua, is written by hand rather than
// generated from Step as the algorithms' forms are (algorithms/internal/
// formgen): Step is outside the generator's subset (bytes, an owner token,
// a switch, an error return), and teaching the generator a second kind of
// form would cost more than the script it replaces. Its header says why;
// the conformance group LeaseDifferential holds it to Step on every store
// that runs it.

// Lua is Step as a Redis and Valkey script, which the stores run as their
// Runner. It keeps the value format of their Update (an 8-byte
// little-endian expiry, then the record), so both paths share one record;
// the conformance group LeaseDifferential holds it equal to Step. One run
// takes one request (KEYS[1], ARGV[1]) or several, each on its own key, in
// order (KEYS[i], ARGV[i]), reading the server's TIME once for them all,
// and then replies with an array of their replies: the stores send a
// batch's concurrent lease calls so.
//
//go:embed lease.lua
var Lua string

// Op is what a Request asks of a key's record.
type Op uint8

const (
	// OpAcquire takes a free key, or returns the lease again to the owner
	// that already holds it (a retried acquire whose reply was lost).
	OpAcquire Op = 1
	// OpExtend moves the owner's expiry to now + TTL.
	OpExtend Op = 2
	// OpRelease frees the key if the owner still holds it.
	OpRelease Op = 3
	// OpRead changes nothing and reports the record.
	OpRead Op = 4
)

// Token is a lease's owner token: 128 random bits, fixed for the lease's
// life.
type Token [16]byte

// String returns the token in hex.
func (t Token) String() string { return fmt.Sprintf("%x", t[:]) }

// Request is one transition of a key's record.
type Request struct {
	// Op is the transition.
	Op Op
	// Owner is the caller's owner token.
	Owner Token
	// Fence is the caller's fence, for OpExtend and OpRelease.
	Fence int64
	// TTL is the lease's time to live in microseconds: how long OpAcquire
	// and OpExtend hold the key, and how long OpRelease keeps the released
	// record (so that a retried Release finds it).
	TTL int64
}

// Code is the outcome of a transition.
type Code uint8

const (
	// OK: the transition happened (for OpRead: the record was read).
	OK Code = 1
	// Held: another owner holds the key until Result.Expires.
	Held Code = 2
	// Lost: the caller's lease is gone; Result says what holds the key.
	Lost Code = 3
)

// Result is what a transition found and did. Times are microseconds since
// the Unix epoch on the store's clock.
type Result struct {
	Code Code
	// Now is the store's time the transition ran at.
	Now int64
	// Fence is the caller's fence when Code is OK; otherwise the fence of
	// the record found (0 when there was none).
	Fence int64
	// Expires is when the lease of the record found (or, when Code is
	// OK, written) runs out; 0 when the key is free.
	Expires int64
	// Owner is the owner of the record found or written (zero when none).
	Owner Token
	// Released reports that the record found was released by its owner.
	Released bool
	// Found reports that a record was found.
	Found bool
}

// Record layout: a version byte, a flags byte (bit 0: released), the fence
// and the lease's expiry as big-endian int64s, and the owner token.
const (
	recordVersion = 1
	recordLen     = 2 + 8 + 8 + 16
	flagReleased  = 1
)

type record struct {
	released bool
	fence    int64
	expires  int64
	owner    Token
}

func decodeRecord(b []byte) (record, error) {
	if len(b) != recordLen || b[0] != recordVersion || b[1]&^flagReleased != 0 {
		return record{}, fmt.Errorf("%w: lease record of %d bytes (version %d) is not one this package wrote", algorithms.ErrCorruptState, len(b), first(b))
	}
	r := record{
		released: b[1]&flagReleased != 0,
		fence:    int64(binary.BigEndian.Uint64(b[2:10])),
		expires:  int64(binary.BigEndian.Uint64(b[10:18])),
	}
	copy(r.owner[:], b[18:34])
	if r.fence < 1 || r.fence >= algorithms.MaxExact || r.expires < 0 {
		return record{}, fmt.Errorf("%w: lease record with fence %d and expiry %d", algorithms.ErrCorruptState, r.fence, r.expires)
	}
	return r, nil
}

func first(b []byte) int {
	if len(b) == 0 {
		return -1
	}
	return int(b[0])
}

func (r record) encode() []byte {
	b := make([]byte, recordLen)
	b[0] = recordVersion
	if r.released {
		b[1] = flagReleased
	}
	binary.BigEndian.PutUint64(b[2:10], uint64(r.fence))
	binary.BigEndian.PutUint64(b[10:18], uint64(r.expires))
	copy(b[18:34], r.owner[:])
	return b
}

// keep is how long, in microseconds, a record written at now must be kept:
// at least for the lease (ttl), and until the store's clock has passed its
// fence, so that a record found missing (expired, reclaimed or lost) only
// ever at a time after its fence, when a fence of "now" is greater.
func keep(r record, now, ttl int64) int64 {
	return max(ttl, r.fence-now+1, 1)
}

// Check reports whether Step can apply r at now: a time in 0..2^52 µs
// since the epoch, a TTL in 1..2^52 µs, a known Op. A server-side form
// checks with it before sending r.
func (r Request) Check(now int64) error {
	if now < 0 || now > algorithms.MaxExact/2 {
		return fmt.Errorf("%w: %d µs since the epoch", store.ErrInvalidTime, now)
	}
	if r.Op < OpAcquire || r.Op > OpRead {
		return fmt.Errorf("%w: unknown lease op %d", algorithms.ErrInvalidParams, r.Op)
	}
	if r.Op != OpRead && (r.TTL < 1 || r.TTL > algorithms.MaxExact/2) {
		return fmt.Errorf("%w: lease TTL of %d µs", algorithms.ErrInvalidParams, r.TTL)
	}
	return nil
}

// Step is the lease's transition: given a key's stored record (nil when it
// holds none) and the store's time in microseconds since the Unix epoch, it
// returns the next record (nil to leave the stored one as it is), how long
// to keep it in microseconds, and the outcome.
//
// An acquire mints the fence in the same step: max(previous fence + 1,
// now), or now when no record is found. A record is kept at least until
// now has passed its fence, so any later acquire that finds no record gets
// a fence above every earlier one, provided the store's clock never steps
// back below a fence it has issued (docs/leases.md has the argument).
//
// Step errs only on a record it cannot read (ErrCorruptState), a time
// outside 0..2^52, a non-positive TTL or an unknown Op
// (algorithms.ErrInvalidParams).
func Step(cur []byte, now int64, req Request) (next []byte, ttl int64, res Result, err error) {
	if err := req.Check(now); err != nil {
		return nil, 0, Result{}, err
	}
	res = Result{Now: now}
	var r record
	if cur != nil {
		if r, err = decodeRecord(cur); err != nil {
			return nil, 0, Result{}, err
		}
		res.Found, res.Fence, res.Owner, res.Released = true, r.fence, r.owner, r.released
		if !r.released {
			res.Expires = r.expires
		}
	}
	live := cur != nil && !r.released && r.expires > now
	mine := cur != nil && r.owner == req.Owner
	switch req.Op {
	case OpRead:
		res.Code = OK
		return nil, 0, res, nil
	case OpAcquire:
		if live && !mine {
			res.Code = Held
			return nil, 0, res, nil
		}
		fence := now
		if live {
			fence = r.fence // the same owner again: the same lease
		} else if cur != nil && r.fence >= fence {
			fence = r.fence + 1
		}
		if fence < 1 {
			fence = 1
		}
		if fence >= algorithms.MaxExact {
			return nil, 0, Result{}, fmt.Errorf("%w: fence %d would reach 2^53", algorithms.ErrCorruptState, fence)
		}
		w := record{fence: fence, expires: now + req.TTL, owner: req.Owner}
		return w.encode(), keep(w, now, req.TTL), Result{Code: OK, Now: now, Fence: fence, Expires: w.expires, Owner: req.Owner, Found: cur != nil}, nil
	case OpExtend:
		if !live || !mine || r.fence != req.Fence {
			res.Code = Lost
			return nil, 0, res, nil
		}
		w := record{fence: r.fence, expires: now + req.TTL, owner: req.Owner}
		return w.encode(), keep(w, now, req.TTL), Result{Code: OK, Now: now, Fence: w.fence, Expires: w.expires, Owner: req.Owner, Found: true}, nil
	case OpRelease:
		if !mine || r.fence != req.Fence {
			res.Code = Lost
			return nil, 0, res, nil
		}
		if r.released {
			res.Code = OK // released already: a retried Release
			return nil, 0, res, nil
		}
		if !live {
			res.Code = Lost // it ran out before the release
			return nil, 0, res, nil
		}
		w := record{released: true, fence: r.fence, owner: r.owner}
		return w.encode(), keep(w, now, req.TTL), Result{Code: OK, Now: now, Fence: w.fence, Owner: w.owner, Released: true, Found: true}, nil
	}
	return nil, 0, Result{}, fmt.Errorf("%w: unknown lease op %d", algorithms.ErrInvalidParams, req.Op)
}

// Runner is implemented by stores that run the lease's transition (Step)
// next to their data in one round trip, such as a Lua script on Redis. It
// is optional: a lease.Locker uses RunLease when its store has it, and
// Store.Update otherwise. RunLease must apply Step to key's record exactly
// as Update would, atomically, with the same clock rule (now is the
// locker's clock, which a store configured to use its own clock replaces),
// and return Step's Result; the conformance suite checks both paths.
type Runner interface {
	RunLease(ctx context.Context, key store.Key, now int64, req Request) (Result, error)
}

// NamespaceSuffix ends the namespace of a locker's keys: the namespace is
// "<name>:@lease". A limiter's namespace is "<name>:<algorithm>", and an
// algorithm's name cannot hold '@', so a locker never shares state with a
// limiter.
const NamespaceSuffix = ":@lease"

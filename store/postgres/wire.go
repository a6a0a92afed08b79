package postgres

import (
	"database/sql/driver"
	"encoding/binary"
	"fmt"
	"strconv"
	"sync"
	"sync/atomic"

	"github.com/jackc/pgx/v5/pgtype"

	"github.com/ratelimitkit/ratelimit/store"
)

// The client's side of a decision, written for few allocations: the row key,
// the statement's argument list and the result share one object
// (decideCall), reused from a sync.Pool; an algorithm's arguments go to the
// server one bigint each (the statement that calls a row form) or as the
// text form of a bigint[] (the decide functions; pgx sends a string as text
// without encoding it), both built once per distinct argument list and
// kept in a small cache; and the decision comes back as the bigint[]'s
// bytes, decoded here instead of by reflection.

// decideCall is what one decision gives pgx and gets back, in one object:
// the row key, encoded into buf when pgx asks for it, and the result's
// bytes. Decide takes one from callPool and puts it back once it has
// decoded the result (pgx holds on to neither the arguments nor the
// result's bytes after Scan returns).
type decideCall struct {
	key  store.Key
	buf  [64]byte
	raw  pgtype.UndecodedBytes
	argv [16]any // the statement's arguments, when they fit
}

var callPool = sync.Pool{New: func() any { return new(decideCall) }}

// newDecideCall returns a decideCall for key, from callPool.
func newDecideCall(key store.Key) *decideCall {
	c := callPool.Get().(*decideCall)
	c.key = key
	return c
}

// release puts c back into callPool, keeping no reference to the key or
// the result.
func (c *decideCall) release() {
	c.key, c.raw = store.Key{}, nil
	clear(c.argv[:])
	callPool.Put(c)
}

// BytesValue implements pgtype.BytesValuer: the row key (see keyBytes).
// pgx uses it when it knows the parameter is a bytea (from a prepared or
// described statement).
func (c *decideCall) BytesValue() ([]byte, error) {
	return appendKey(c.buf[:0], c.key), nil
}

// Value implements driver.Valuer: the row key, for the query modes in
// which pgx does not know the parameter's type (exec, simple protocol).
func (c *decideCall) Value() (driver.Value, error) {
	return c.BytesValue()
}

// argsCacheSize is the number of argument lists argsCache keeps: more than
// the distinct algorithms most processes use with one store. A process that
// uses more builds the text of some of them again now and then.
const argsCacheSize = 32

// argsCache maps ServerArgs to their text form, a bigint[] literal such as
// "{1,2,3}". It is safe for concurrent use and never grows: an entry's slot
// is chosen by a hash of the arguments, and a newer list replaces an older
// one in its slot.
type argsCache [argsCacheSize]atomic.Pointer[argsEntry]

type argsEntry struct {
	args  []int64 // a copy of the arguments
	text  any     // the literal as a string, boxed once for QueryRow
	boxed []any   // the arguments, each boxed once for QueryRow
}

// text returns the bigint[] literal of args, as a string.
func (c *argsCache) text(args []int64) any { return c.get(args).text }

// get returns the entry of args: their bigint[] literal and the arguments
// boxed one by one.
func (c *argsCache) get(args []int64) *argsEntry {
	h := uint64(len(args))
	for _, a := range args {
		h = (h ^ uint64(a)) * 0x100000001b3
	}
	slot := &c[h%argsCacheSize]
	if e := slot.Load(); e != nil && equalArgs(e.args, args) {
		return e
	}
	b := make([]byte, 0, 2+21*len(args))
	b = append(b, '{')
	for i, a := range args {
		if i > 0 {
			b = append(b, ',')
		}
		b = strconv.AppendInt(b, a, 10)
	}
	b = append(b, '}')
	e := &argsEntry{args: append([]int64(nil), args...), text: any(string(b)), boxed: make([]any, len(args))}
	for i, a := range args {
		e.boxed[i] = a
	}
	slot.Store(e)
	return e
}

func equalArgs(a, b []int64) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// decodeDecision reads the decide function's result, a bigint[] of
// len(v) elements, into v: in PostgreSQL's binary format (what pgx asks
// for by default) or in its text format (the simple protocol).
func decodeDecision(raw []byte, v *[6]int64) error { return decodeInts(raw, v[:]) }

// decodeInts reads a bigint[] of exactly len(v) elements into v, as
// decodeDecision does: a composite's decision is six elements per part.
func decodeInts(raw []byte, v []int64) error {
	if len(raw) > 0 && raw[0] == '{' {
		return decodeDecisionText(raw, v)
	}
	// Binary: ndim, has-nulls flag, element type, then per dimension its
	// length and lower bound, then per element its length and bytes.
	const header = 12 + 8
	if len(raw) != header+len(v)*12 || binary.BigEndian.Uint32(raw) != 1 ||
		binary.BigEndian.Uint32(raw[4:]) != 0 || binary.BigEndian.Uint32(raw[12:]) != uint32(len(v)) {
		return fmt.Errorf("unexpected decision of %d bytes % x", len(raw), raw)
	}
	for i := range v {
		el := raw[header+12*i:]
		if binary.BigEndian.Uint32(el) != 8 {
			return fmt.Errorf("unexpected decision element of %d bytes", int32(binary.BigEndian.Uint32(el)))
		}
		v[i] = int64(binary.BigEndian.Uint64(el[4:]))
	}
	return nil
}

func decodeDecisionText(raw []byte, v []int64) error {
	if raw[len(raw)-1] != '}' {
		return fmt.Errorf("unexpected decision %q", raw)
	}
	rest := raw[1 : len(raw)-1]
	for i := range v {
		end := 0
		for end < len(rest) && rest[end] != ',' {
			end++
		}
		n, err := strconv.ParseInt(string(rest[:end]), 10, 64)
		if err != nil || (i < len(v)-1) != (end < len(rest)) {
			return fmt.Errorf("unexpected decision %q", raw)
		}
		v[i] = n
		if end < len(rest) {
			rest = rest[end+1:]
		}
	}
	return nil
}

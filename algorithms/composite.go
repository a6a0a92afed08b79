package algorithms

import (
	"encoding/binary"
	"fmt"
	"hash/fnv"
	"reflect"
	"strings"
)

// MaxParts is the most limits a composite (All) may hold.
const MaxParts = 8

// All returns the composite of parts: one algorithm that applies every
// part, with its own numbers, to the same key in one atomic decision. A
// request is admitted only if every part admits it, and then every part
// consumes it; when any part denies it, no part consumes anything. For
// example, ten a second with bursts of ten, and a thousand a day:
//
//	algorithms.All(algorithms.GCRA(10, time.Second, 10), algorithms.FixedWindow(1000, 24*time.Hour))
//
// The decision is the most restrictive view of the parts' decisions (see
// Combine), and Decision.Parts holds each part's own, in the order given.
//
// Validate reports an error wrapping ErrInvalidParams for no parts, more
// than MaxParts, a nil part, a part that is itself a composite, or a part
// whose own Validate fails. MaxCost is the smallest of the parts'.
//
// The composite's state is every part's state, each with its own expiry,
// kept under one key (see the Composite type for the encoding); the key's
// TTL is the longest of the parts'. Its Name is "all-" and a hash of the
// parts' names in order, so a composite never shares state with a single
// algorithm or with a composite of other algorithms, and changing a part's
// numbers under a limiter name applies to existing keys, as it does for a
// single algorithm.
//
// The Redis, Valkey and PostgreSQL stores decide a composite of built-in
// algorithms in one round trip, with the composite server form that
// internal/formgen generates from the parts' Go forms (package forms:
// lua/all.lua, sql/all.sql; the sliding log's part is written by hand beside its Go
// form, and reads and writes its whole log). A composite holding a user's
// algorithm runs through Store.Update, as a user's algorithm does.
func All(parts ...Algorithm) Algorithm {
	c := &composite{parts: append([]Algorithm(nil), parts...)}
	c.err = c.validate()
	if c.err == nil {
		h := fnv.New64a()
		for _, p := range c.parts {
			h.Write([]byte(p.Name()))
			h.Write([]byte{0})
		}
		c.name = fmt.Sprintf("all-%016x", h.Sum64())
		c.maxCost = c.parts[0].MaxCost()
		for _, p := range c.parts[1:] {
			c.maxCost = min(c.maxCost, p.MaxCost())
		}
	} else {
		c.name = "all-invalid"
	}
	return c
}

// Composite is implemented by the composites All returns, so that stores
// and the HTTP middleware can see their parts.
//
// A composite's state (what its Decide takes and returns) is, for each
// part in order, three little-endian int64 fields followed by bytes: when
// the part's state expires (µs since the Unix epoch; after it the part
// counts as having no state), the length in bytes of the part's state, and
// the part's own state. A part with no state is written as expiry 0 and
// length 0. For parts whose states are int64 fields, as every built-in's
// but the sliding log's are, the whole state is int64 fields, which is how
// the server forms keep it (as doubles in Redis and Valkey, as a bigint[]
// in PostgreSQL).
type Composite interface {
	Algorithm
	// Parts returns the composite's limits, in order. The returned slice
	// must not be modified.
	Parts() []Algorithm
}

type composite struct {
	parts   []Algorithm
	name    string
	maxCost int64
	err     error
}

func (c *composite) Name() string       { return c.name }
func (c *composite) Validate() error    { return c.err }
func (c *composite) MaxCost() int64     { return c.maxCost }
func (c *composite) Parts() []Algorithm { return c.parts }

// String lists the parts, so that a limiter without a name derives its
// namespace from every part's numbers.
func (c *composite) String() string {
	var b strings.Builder
	b.WriteString("All(")
	for i, p := range c.parts {
		if i > 0 {
			b.WriteString(", ")
		}
		fmt.Fprintf(&b, "%v", p)
	}
	b.WriteString(")")
	return b.String()
}

func (c *composite) validate() error {
	switch n := len(c.parts); {
	case n == 0:
		return fmt.Errorf("%w: All needs at least one limit", ErrInvalidParams)
	case n > MaxParts:
		return fmt.Errorf("%w: All of %d limits exceeds the maximum %d", ErrInvalidParams, n, MaxParts)
	}
	for i, p := range c.parts {
		if p == nil || reflect.ValueOf(p).Kind() == reflect.Pointer && reflect.ValueOf(p).IsNil() {
			return fmt.Errorf("%w: All: limit %d is nil", ErrInvalidParams, i+1)
		}
		if _, ok := p.(Composite); ok {
			return fmt.Errorf("%w: All: limit %d is itself a composite; list its limits instead", ErrInvalidParams, i+1)
		}
		if err := p.Validate(); err != nil {
			return fmt.Errorf("All: limit %d (%s): %w", i+1, p.Name(), err)
		}
		if p.MaxCost() <= 0 {
			return fmt.Errorf("%w: All: limit %d (%s) has max cost %d", ErrInvalidParams, i+1, p.Name(), p.MaxCost())
		}
	}
	return nil
}

// Decide implements Algorithm in two phases. Check: every part decides the
// request as a peek on its own state. Unless every part admits (or the
// request is a peek), the decision is the combination of those peeks and
// nothing is written. Commit: every part decides the request for real, and
// the next state holds every part's next state. A part whose commit denies
// what its check admitted (which no built-in does) denies the request, and
// nothing is written. A refund (Request.Refund) skips the check: every
// built-in part gives back what it can, and a user's part is asked a peek.
func (c *composite) Decide(state []byte, req Request) (Step, error) {
	if c.err != nil {
		return Step{}, c.err
	}
	var buf [MaxParts]partState
	parts := buf[:len(c.parts)]
	if err := decodeParts(state, req.Now, parts); err != nil {
		return Step{}, err
	}
	decs := make([]Decision, len(c.parts))
	check := req
	check.Peek = true
	ok := true
	for i, p := range c.parts {
		if req.Refund {
			break // a refund has no check: every part gives back what it can
		}
		st, err := p.Decide(parts[i].state, check)
		if err != nil {
			return Step{}, fmt.Errorf("All: limit %d (%s): %w", i+1, p.Name(), err)
		}
		decs[i] = st.Decision
		ok = ok && st.Decision.Allowed
	}
	if !ok || req.Peek && !req.Refund {
		return Step{Decision: Combine(decs)}, nil
	}
	commit := req
	commit.Peek = false
	next := make([]byte, 0, len(state)+24*len(c.parts))
	top := int64(0)
	for i, p := range c.parts {
		if req.Refund && builtinOf(p) == nil {
			commit.Refund, commit.Peek = false, true // a user's part never sees a refund
		} else {
			commit.Refund, commit.Peek = req.Refund, false
		}
		st, err := p.Decide(parts[i].state, commit)
		if err != nil {
			return Step{}, fmt.Errorf("All: limit %d (%s): %w", i+1, p.Name(), err)
		}
		decs[i] = st.Decision
		ok = ok && (st.Decision.Allowed || req.Refund)
		exp, s := int64(0), []byte(nil)
		switch {
		case st.Next != nil:
			exp, s = req.Now+max(st.TTL, 1), st.Next
		case parts[i].state != nil:
			exp, s = parts[i].expires, parts[i].state
		}
		top = max(top, exp)
		next = binary.LittleEndian.AppendUint64(next, uint64(exp))
		next = binary.LittleEndian.AppendUint64(next, uint64(len(s)))
		next = append(next, s...)
	}
	if !ok || top <= req.Now {
		return Step{Decision: Combine(decs)}, nil
	}
	return Step{Decision: Combine(decs), Next: next, TTL: top - req.Now}, nil
}

// partState is one part's live state in a composite's state.
type partState struct {
	state   []byte // nil when the part has no live state
	expires int64
}

// decodeParts splits a composite's state into its parts' live states (see
// Composite for the encoding). Each part's slice has its own length as its
// capacity, so a part that writes its next state into it cannot reach the
// next part's.
func decodeParts(state []byte, now int64, parts []partState) error {
	if state == nil {
		return nil
	}
	rest := state
	for i := range parts {
		if len(rest) < 16 {
			return fmt.Errorf("%w: composite state ends before limit %d", ErrCorruptState, i+1)
		}
		exp := int64(binary.LittleEndian.Uint64(rest))
		n := binary.LittleEndian.Uint64(rest[8:])
		rest = rest[16:]
		if exp < 0 || exp > MaxExact || n > uint64(len(rest)) {
			return fmt.Errorf("%w: composite limit %d has expiry %d and length %d", ErrCorruptState, i+1, exp, n)
		}
		if n > 0 && now < exp {
			parts[i] = partState{state: rest[:n:n], expires: exp}
		}
		rest = rest[n:]
	}
	if len(rest) != 0 {
		return fmt.Errorf("%w: composite state has %d bytes after its %d limits", ErrCorruptState, len(rest), len(parts))
	}
	return nil
}

// Combine returns the decision of a composite whose parts decided parts,
// the most restrictive view of them: admitted only when every part admits;
// Remaining the least of the parts' (and Limit that part's, the first of
// them on a tie); RetryAfter, ResetAfter and Delay the longest of the
// parts'. Parts is parts itself. The stores call it on the parts'
// decisions that a composite server form replies with, so the combination
// is written once.
func Combine(parts []Decision) Decision {
	if len(parts) == 0 {
		return Decision{}
	}
	d := parts[0]
	d.Parts = parts
	for _, p := range parts[1:] {
		d.Allowed = d.Allowed && p.Allowed
		if p.Remaining < d.Remaining {
			d.Remaining, d.Limit = p.Remaining, p.Limit
		}
		d.RetryAfter = max(d.RetryAfter, p.RetryAfter)
		d.ResetAfter = max(d.ResetAfter, p.ResetAfter)
		d.Delay = max(d.Delay, p.Delay)
	}
	return d
}

// Divide implements Divisible: the composite of its parts each divided by
// n (see the package function Divide). A part that cannot be divided makes
// the result invalid, with that part's error from Validate.
func (c *composite) Divide(n int64) Algorithm {
	parts := make([]Algorithm, len(c.parts))
	for i, p := range c.parts {
		d, err := Divide(p, n)
		if err != nil {
			return &composite{parts: c.parts, name: "all-invalid", err: fmt.Errorf("All: limit %d (%s): %w", i+1, p.Name(), err)}
		}
		parts[i] = d
	}
	return All(parts...)
}

package algorithms

import (
	"encoding/binary"
	"fmt"
	"hash/fnv"
	"reflect"
	"slices"
	"strings"
	"time"
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
// Every part has a name of its own (Composite.PartNames): the one given
// with Named, or else one derived from the part's algorithm and period,
// such as "gcra-1s" or "fixed_window-1d" (a part of a user's algorithm
// that states no Policy is named by its Name). The composite keeps each
// part's state under its name, never under its place in the list, so
// that under one limiter name (ratelimit.WithName) a part added later
// starts from no state while every other part keeps its own, a part
// removed no longer counts (its state is kept, unread, until it expires,
// see Composite), the parts may be listed in any order, and a part
// whose numbers change but whose name does not keeps its state, as a
// single algorithm does. Give parts names with Named to change a part's
// period without losing its state, or to hold two parts of one algorithm
// and period.
//
// Validate reports an error wrapping ErrInvalidParams for no parts, more
// than MaxParts, a nil part, a part that is itself a composite, a part
// whose own Validate fails, a part name that is not 1 to 64 characters of
// [A-Za-z0-9_.-], or two parts of one name. MaxCost is the smallest of the
// parts'.
//
// The composite's state is the state of every part that has one, each
// with its name's hash and its own expiry, kept under one key (see the
// Composite type for the encoding); the key's TTL is the longest of the
// parts'. Its Name is "all", whatever its parts: a limiter's namespace
// ("<limiter name>:all") is the user's name for the composite, so a
// composite never shares state with a single algorithm, and a limiter
// without a name derives its namespace from the parts and their numbers
// (String, which lists them by name), so that the order of the parts
// never matters.
//
// The Redis, Valkey and PostgreSQL stores decide a composite of built-in
// algorithms in one round trip, with the composite server form that
// internal/formgen generates from the parts' Go forms (package forms:
// lua/all.lua, sql/all.sql; the sliding log's part is written by hand beside its Go
// form, and reads and writes its whole log). A composite holding a user's
// algorithm runs through Store.Update, as a user's algorithm does.
func All(parts ...Algorithm) Algorithm {
	c := &composite{parts: make([]Algorithm, len(parts)), names: make([]string, len(parts)), name: "all"}
	given := make([]bool, len(parts))
	for i, p := range parts {
		if n, ok := p.(*namedPart); ok && n != nil {
			c.parts[i], c.names[i], given[i] = n.alg, n.name, true
		} else {
			c.parts[i] = p
		}
	}
	c.err = c.validate(given)
	if c.err == nil {
		c.maxCost = c.parts[0].MaxCost()
		for _, p := range c.parts[1:] {
			c.maxCost = min(c.maxCost, p.MaxCost())
		}
	}
	return c
}

// Named returns alg as a part of a composite named name, for All: the
// composite keeps the part's state under that name (see All), whatever
// its place among the parts and whatever its numbers. A name is 1 to 64
// characters of [A-Za-z0-9_.-]. For example, a plan whose daily limit
// may change its numbers, and later its period, without losing its
// count:
//
//	algorithms.All(
//		algorithms.Named("burst", algorithms.GCRA(10, time.Second, 10)),
//		algorithms.Named("daily", algorithms.FixedWindow(1000, 24*time.Hour)))
//
// A named part is a part of All and nothing else: outside All its
// Validate reports an error wrapping ErrInvalidParams.
func Named(name string, alg Algorithm) Algorithm { return &namedPart{alg: alg, name: name} }

// namedPart is a part that Named named, which All unwraps.
type namedPart struct {
	alg  Algorithm
	name string
}

func (n *namedPart) Name() string { return "named" }
func (n *namedPart) Validate() error {
	return fmt.Errorf("%w: algorithms.Named(%q, ...) is a part of a composite: pass it to All", ErrInvalidParams, n.name)
}
func (n *namedPart) MaxCost() int64 { return 0 }
func (n *namedPart) Decide([]byte, Request) (Step, error) {
	return Step{}, n.Validate()
}
func (n *namedPart) String() string { return fmt.Sprintf("Named(%q, %v)", n.name, n.alg) }

// Composite is implemented by the composites All returns, so that stores
// and the HTTP middleware can see their parts.
//
// A composite's state (what its Decide takes and returns) is a sequence
// of little-endian int64 fields: first -1, which marks the state as keyed
// by part, then, for each part that has state, in the composite's order:
// the part's ID (partIDs), when the part's state expires (µs since the
// Unix epoch), the length in bytes of the part's state, and the part's
// own state. A part with no state is not written. Reading, a part finds
// its state by its ID, wherever it was written. The live state of an ID
// that is not one of the composite's parts (a part removed, or one that
// another composite deciding on the same key has: the release before
// during a rolling deploy, another tier) is carried at the next write as
// it was, after the parts', until it expires, so that two composites on
// one key never erase each other's counts; a state holds at most
// 2 × MaxParts entries, and entries carried past that are dropped. Two
// entries of one ID, or more than 2 × MaxParts, are corrupt state.
//
// State written before parts were keyed by name (without the leading -1:
// for each part in order, its expiry, its length and its state, a part
// with no state as expiry 0 and length 0) is still read, by position,
// when it holds as many parts as the composite; it is written in the
// keyed form at the next write.
//
// For parts whose states are int64 fields, as every built-in's but the
// sliding log's are, the whole state is int64 fields, which is how the
// server forms keep it (as doubles in Redis and Valkey, as a bigint[] in
// PostgreSQL).
type Composite interface {
	Algorithm
	// Parts returns the composite's limits, in order. The returned slice
	// must not be modified.
	Parts() []Algorithm
	// PartNames returns each part's name (see All), in the order of
	// Parts. The returned slice must not be modified.
	PartNames() []string
}

// partIDs returns, for each part of c in order, the ID under which c
// keeps the part's state (see Composite): the part's name hashed
// (FNV-64a, its top 48 bits), times 16, plus a number that says which
// built-in algorithm the part is (1 fixed window, 2 sliding log, 3
// sliding window, 4 token bucket, 5 GCRA, 6 leaky bucket; 0 for a user's
// algorithm). IDs are below 2^52, exact in every form's arithmetic. The
// composite server forms take them with the parts' parameters (see
// package forms, CompositeForm). It returns nil for a composite whose
// Validate fails.
func partIDs(c Composite) []int64 {
	if cc, ok := c.(*composite); ok {
		if cc.err != nil {
			return nil
		}
		return cc.ids
	}
	var ids []int64
	for i, p := range c.Parts() {
		ids = append(ids, partID(c.PartNames()[i], p))
	}
	return ids
}

// partKind returns the built-in algorithm a part ID (partIDs) says its
// part is: the algorithm's Name, or "" for a user's algorithm or a number
// that names none.
func partKind(id int64) string {
	k := int(id & 15)
	if k >= 1 && k < len(partKinds) {
		return partKinds[k]
	}
	return ""
}

// partKinds numbers the built-ins in part IDs. The numbers are stored, so
// they never change; a new built-in takes the next one.
var partKinds = [...]string{"", "fixed_window", "sliding_log", "sliding_window", "token_bucket", "gcra", "leaky_bucket"}

// partID is the ID of the part named name (see partIDs).
func partID(name string, p Algorithm) int64 {
	h := fnv.New64a()
	h.Write([]byte(name))
	kind := 0
	if builtinOf(p) != nil {
		kind = slices.Index(partKinds[:], p.Name())
		kind = max(kind, 0)
	}
	return int64(h.Sum64()>>16)<<4 | int64(kind)
}

type composite struct {
	parts   []Algorithm
	names   []string
	ids     []int64
	name    string
	maxCost int64
	err     error
}

func (c *composite) Name() string        { return c.name }
func (c *composite) Validate() error     { return c.err }
func (c *composite) MaxCost() int64      { return c.maxCost }
func (c *composite) Parts() []Algorithm  { return c.parts }
func (c *composite) PartNames() []string { return c.names }

// String lists the parts by name, in the order of their names, each with
// its numbers: "All(fixed_window-1d=FixedWindow(...), gcra-1s=GCRA(...))"
// (an invalid composite's in the order given).
// A limiter without a name derives its namespace from it, so that its
// state follows the parts and their numbers but not their order.
func (c *composite) String() string {
	order := make([]int, len(c.parts))
	for i := range order {
		order[i] = i
	}
	if c.err == nil {
		slices.SortFunc(order, func(a, b int) int { return strings.Compare(c.names[a], c.names[b]) })
	}
	var b strings.Builder
	b.WriteString("All(")
	for j, i := range order {
		if j > 0 {
			b.WriteString(", ")
		}
		if c.names[i] != "" {
			b.WriteString(c.names[i] + "=")
		}
		fmt.Fprintf(&b, "%v", c.parts[i])
	}
	b.WriteString(")")
	return b.String()
}

// derivedName is the name of a part not given one: its algorithm's name
// and its period, or its name alone when it states no Policy.
func derivedName(p Algorithm) string {
	ps, ok := p.(PolicyStater)
	if !ok {
		return p.Name()
	}
	return p.Name() + "-" + shortDuration(ps.Policy().Period)
}

// shortDuration writes d in the largest unit that divides it: "1d",
// "90s", "250ms", "7us".
func shortDuration(d time.Duration) string {
	for _, u := range []struct {
		d    time.Duration
		name string
	}{{24 * time.Hour, "d"}, {time.Hour, "h"}, {time.Minute, "m"}, {time.Second, "s"}, {time.Millisecond, "ms"}, {time.Microsecond, "us"}} {
		if d > 0 && d%u.d == 0 {
			return fmt.Sprintf("%d%s", d/u.d, u.name)
		}
	}
	return fmt.Sprintf("%dns", int64(d))
}

// validPartName reports whether name is 1 to 64 characters of
// [A-Za-z0-9_.-].
func validPartName(name string) bool {
	if len(name) == 0 || len(name) > 64 {
		return false
	}
	for _, r := range []byte(name) {
		if !('a' <= r && r <= 'z' || 'A' <= r && r <= 'Z' || '0' <= r && r <= '9' || r == '_' || r == '.' || r == '-') {
			return false
		}
	}
	return true
}

func (c *composite) validate(given []bool) error {
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
		if _, ok := p.(*namedPart); ok {
			return fmt.Errorf("%w: All: limit %d is named twice", ErrInvalidParams, i+1)
		}
		if err := p.Validate(); err != nil {
			return fmt.Errorf("All: limit %d (%s): %w", i+1, p.Name(), err)
		}
		if p.MaxCost() <= 0 {
			return fmt.Errorf("%w: All: limit %d (%s) has max cost %d", ErrInvalidParams, i+1, p.Name(), p.MaxCost())
		}
		if !given[i] {
			c.names[i] = derivedName(p)
		} else if !validPartName(c.names[i]) {
			return fmt.Errorf("%w: All: limit %d has name %q, not 1 to 64 characters of [A-Za-z0-9_.-]", ErrInvalidParams, i+1, c.names[i])
		}
	}
	c.ids = make([]int64, len(c.parts))
	for i, p := range c.parts {
		c.ids[i] = partID(c.names[i], p)
		for j := range i {
			switch {
			case c.names[j] == c.names[i]:
				return fmt.Errorf("%w: All: limits %d and %d are both named %q; give them names of their own with algorithms.Named",
					ErrInvalidParams, j+1, i+1, c.names[i])
			case c.ids[j]>>4 == c.ids[i]>>4:
				return fmt.Errorf("%w: All: the names %q and %q of limits %d and %d hash alike; rename one with algorithms.Named",
					ErrInvalidParams, c.names[j], c.names[i], j+1, i+1)
			}
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
	var others [maxEntries][]byte
	nothers, err := decodeParts(state, req.Now, c.ids, parts, &others)
	if err != nil {
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
			return Step{}, fmt.Errorf("All: limit %d (%s): %w", i+1, c.names[i], err)
		}
		decs[i] = st.Decision
		ok = ok && st.Decision.Allowed
	}
	if !ok || req.Peek && !req.Refund {
		return Step{Decision: Combine(decs)}, nil
	}
	commit := req
	commit.Peek = false
	next := make([]byte, 0, len(state)+32*len(c.parts)+8)
	next = binary.LittleEndian.AppendUint64(next, keyedMark)
	top, written := int64(0), 0
	for i, p := range c.parts {
		if req.Refund && builtinOf(p) == nil {
			commit.Refund, commit.Peek = false, true // a user's part never sees a refund
		} else {
			commit.Refund, commit.Peek = req.Refund, false
		}
		st, err := p.Decide(parts[i].state, commit)
		if err != nil {
			return Step{}, fmt.Errorf("All: limit %d (%s): %w", i+1, c.names[i], err)
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
		if len(s) == 0 {
			continue // no state: not written
		}
		top = max(top, exp)
		written++
		next = binary.LittleEndian.AppendUint64(next, uint64(c.ids[i]))
		next = binary.LittleEndian.AppendUint64(next, uint64(exp))
		next = binary.LittleEndian.AppendUint64(next, uint64(len(s)))
		next = append(next, s...)
	}
	// The live state of parts this composite does not have, carried as it
	// was (see Composite), while the entries number at most maxEntries.
	for _, e := range others[:min(nothers, maxEntries-written)] {
		top = max(top, int64(binary.LittleEndian.Uint64(e[8:])))
		next = append(next, e...)
	}
	if !ok || top <= req.Now {
		return Step{Decision: Combine(decs)}, nil
	}
	return Step{Decision: Combine(decs), Next: next, TTL: top - req.Now}, nil
}

// keyedMark is the first field of a composite's state keyed by part (-1).
const keyedMark = ^uint64(0)

// maxEntries is the most entries a composite's state keyed by part holds:
// its parts' and those it carries for parts it does not have.
const maxEntries = 2 * MaxParts

// partState is one part's live state in a composite's state.
type partState struct {
	state   []byte // nil when the part has no live state
	expires int64
}

// decodeParts splits a composite's state into its parts' live states (see
// Composite for the encoding), the part with ids[i] into parts[i], and
// the live entries of IDs no part has, whole (header and state), into
// others, returning how many. Each part's slice has its own length as its
// capacity, so a part that writes its next state into it cannot reach the
// next part's.
func decodeParts(state []byte, now int64, ids []int64, parts []partState, others *[maxEntries][]byte) (int, error) {
	if state == nil {
		return 0, nil
	}
	if len(state) >= 8 && binary.LittleEndian.Uint64(state) == keyedMark {
		return decodeKeyed(state[8:], now, ids, parts, others)
	}
	// The state of before parts were keyed: by place.
	rest := state
	for i := range parts {
		if len(rest) < 16 {
			return 0, fmt.Errorf("%w: composite state ends before limit %d", ErrCorruptState, i+1)
		}
		exp := int64(binary.LittleEndian.Uint64(rest))
		n := binary.LittleEndian.Uint64(rest[8:])
		rest = rest[16:]
		if exp < 0 || exp > MaxExact || n > uint64(len(rest)) {
			return 0, fmt.Errorf("%w: composite limit %d has expiry %d and length %d", ErrCorruptState, i+1, exp, n)
		}
		if n > 0 && now < exp {
			parts[i] = partState{state: rest[:n:n], expires: exp}
		}
		rest = rest[n:]
	}
	if len(rest) != 0 {
		return 0, fmt.Errorf("%w: composite state has %d bytes after its %d limits", ErrCorruptState, len(rest), len(parts))
	}
	return 0, nil
}

// decodeKeyed reads the entries of a state keyed by part (after its mark).
func decodeKeyed(rest []byte, now int64, ids []int64, parts []partState, others *[maxEntries][]byte) (int, error) {
	var seen [maxEntries]int64
	n, nothers := 0, 0
	for k := 1; len(rest) > 0; k++ {
		if len(rest) < 24 {
			return 0, fmt.Errorf("%w: composite state entry %d ends in its header", ErrCorruptState, k)
		}
		id := int64(binary.LittleEndian.Uint64(rest))
		exp := int64(binary.LittleEndian.Uint64(rest[8:]))
		size := binary.LittleEndian.Uint64(rest[16:])
		if id < 0 || id >= MaxExact/2 || exp < 1 || exp > MaxExact || size == 0 || size > uint64(len(rest)-24) {
			return 0, fmt.Errorf("%w: composite state entry %d has ID %d, expiry %d and length %d", ErrCorruptState, k, id, exp, size)
		}
		if n == len(seen) || slices.Contains(seen[:n], id) {
			return 0, fmt.Errorf("%w: composite state entry %d repeats ID %d or exceeds %d entries", ErrCorruptState, k, id, len(seen))
		}
		seen[n] = id
		n++
		entry := rest[: 24+size : 24+size]
		switch i := slices.Index(ids, id); {
		case now >= exp:
		case i >= 0:
			parts[i] = partState{state: entry[24:], expires: exp}
		default:
			others[nothers] = entry
			nothers++
		}
		rest = rest[24+size:]
	}
	return nothers, nil
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
	if c.err != nil {
		return c
	}
	parts := make([]Algorithm, len(c.parts))
	for i, p := range c.parts {
		d, err := Divide(p, n)
		if err != nil {
			return &composite{parts: c.parts, names: c.names, name: c.name, err: fmt.Errorf("All: limit %d (%s): %w", i+1, c.names[i], err)}
		}
		parts[i] = Named(c.names[i], d) // each divided part keeps its name, and so its state
	}
	return All(parts...)
}

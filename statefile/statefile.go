package statefile

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/ratelimitkit/ratelimit/algorithms"
	"github.com/ratelimitkit/ratelimit/algorithms/forms"
	"github.com/ratelimitkit/ratelimit/internal/names"
	"github.com/ratelimitkit/ratelimit/store"
)

// Count returns how many keys under namespace (every key when namespace is
// "") hold live state in store at now. It returns an error wrapping
// store.ErrUnsupported when store is not a store.Exporter or
// cannot enumerate its keys. On a built-in store that hangs it fails
// within about a second (see store.Exporter), however long ctx allows.
func Count(ctx context.Context, st store.Store, namespace string, now time.Time) (int, error) {
	n := 0
	err := Export(ctx, st, namespace, now, func(store.Entry) error { n++; return nil })
	return n, err
}

// Export calls yield for every key under namespace (every key when
// namespace is "") that holds live state in store at now, with a copy of
// that state, and stops at the first error yield returns, which it returns
// unchanged. A Writer's Write makes it write a file:
//
//	w := statefile.NewWriter(f)
//	err := statefile.Export(ctx, store, namespace, time.Now(), w.Write)
//	// then, if err is nil, w.Close()
//
// Decisions may go on while it runs; store.Exporter says what a key
// written meanwhile may look like. It returns an error wrapping
// store.ErrUnsupported when store is not a store.Exporter. On a
// built-in store that hangs it fails within about a second, however long
// ctx allows.
func Export(ctx context.Context, st store.Store, namespace string, now time.Time, yield func(store.Entry) error) error {
	x, ok := st.(store.Exporter)
	if !ok {
		return fmt.Errorf("statefile: %T cannot enumerate its keys, it is not a store.Exporter: %w", st, store.ErrUnsupported)
	}
	return x.Export(ctx, namespace, now.UnixMicro(), yield)
}

// Import writes e into store unless e.Key already holds live state there
// at now, and reports whether it wrote. The stored state expires at
// e.Expires, exactly as if a decision had written it; an entry already
// expired at now is skipped. To import a file, call it from Read:
//
//	err := statefile.Read(f, func(e store.Entry) error {
//		_, err := statefile.Import(ctx, store, e, time.Now())
//		return err
//	})
//
// The destination's live state wins because it is the newer: a move copies
// from a store that no longer decides, so state already in the destination
// was either copied by an earlier, interrupted run of the same move (and is
// the same) or written by decisions made since the switch, which a copy
// must not undo. Running a move twice therefore loses no admission.
//
// The namespace ("<limiter name>:<algorithm name>") tells which algorithm
// the state belongs to when that is a built-in or a composite
// (algorithms.All, "<limiter name>:all", whose state names each part's
// algorithm in the part's ID; see forms.PartIDs) of built-ins: Import
// then checks, before writing anything, that the state decodes as that
// algorithm's (an error wrapping
// ratelimit.ErrCorruptState names the key when it does not), and a store
// that keeps that algorithm's state in a form of its own (a
// store.Importer, such as Redis's) writes it in that form. The state of
// a user's own algorithm goes where Update keeps it, which is where its
// decisions read it on every store. A bad key or namespace is an error
// wrapping ratelimit.ErrInvalidKey.
func Import(ctx context.Context, st store.Store, e store.Entry, now time.Time) (bool, error) {
	if err := checkEntry(e); err != nil {
		return false, err
	}
	at := now.UnixMicro()
	alg, checked, err := algorithmOf(e.Key.Namespace, e.State, at)
	if err != nil {
		return false, fmt.Errorf("statefile: entry for %q is not composite state: %w", e.Key.String(), err)
	}
	if !checked {
		if err := checkState(alg, e, at); err != nil {
			return false, err
		}
	}
	if im, ok := st.(store.Importer); ok {
		return im.Import(ctx, alg, e, at)
	}
	wrote := false
	err = st.Update(ctx, e.Key, at, func(cur []byte, now int64) ([]byte, int64, error) {
		wrote = false
		if cur != nil || e.Expires <= now {
			return nil, 0, nil
		}
		wrote = true
		return append([]byte(nil), e.State...), e.Expires - now, nil
	})
	return wrote && err == nil, err
}

// algorithmOf returns an algorithm of the kind that namespace ("<limiter
// name>:<algorithm name>") names, or nil when it cannot tell: a built-in;
// a composite (algorithms.All, named "all") whose state (st, at now)
// names built-ins with composite server forms in its parts' IDs
// (compositeState); or a composite of the name of before parts were keyed
// by name, "all-<hash>", which it matches against every sequence of up to
// algorithms.MaxParts built-ins. Its numbers are placeholders (a limit of
// 1 over algorithms.MaxPeriod): it tells Import which form the state takes
// and lets Import check that the state decodes, nothing more. A composite
// with a part of the user's own is nil, like the user's own algorithm. It
// returns an error wrapping ratelimit.ErrCorruptState for the state of a
// composite that does not frame as one, and checked when it has checked
// the state itself (a composite named "all"), which a peek of the
// placeholder would not read as it was written.
func algorithmOf(namespace string, st []byte, now int64) (alg algorithms.Algorithm, checked bool, err error) {
	_, name, _ := strings.Cut(namespace, ":")
	for _, b := range forms.Builtins() {
		if b.Name == name {
			return placeholder(b), false, nil
		}
	}
	switch {
	case name == "all":
		alg, err = compositeState(st, now)
		return alg, true, err
	case strings.HasPrefix(name, "all-"):
		return compositeOf(name), false, nil
	}
	return nil, false, nil
}

// compositeState returns a composite of placeholder built-ins for st, a
// composite's state (see algorithms.Composite), or nil when a part of it
// is not a built-in with a composite server form (its state is where
// Update keeps it). Each live part's state is checked with its built-in's
// placeholder (a peek at now). State of before parts were keyed, which
// says nothing of its parts' algorithms, is taken for a composite of
// built-ins when it frames as one: its fields checked as int64 fields in
// range, as the server forms keep them.
func compositeState(st []byte, now int64) (algorithms.Algorithm, error) {
	if len(st) < 8 || binary.LittleEndian.Uint64(st) != math.MaxUint64 {
		for rest, i := st, 1; len(rest) > 0; i++ {
			if len(rest) < 16 {
				return nil, fmt.Errorf("%w: composite state ends in limit %d", algorithms.ErrCorruptState, i)
			}
			exp, n := int64(binary.LittleEndian.Uint64(rest)), binary.LittleEndian.Uint64(rest[8:])
			rest = rest[16:]
			if exp < 0 || exp > algorithms.MaxExact || n%8 != 0 || n > uint64(len(rest)) || i > algorithms.MaxParts {
				return nil, fmt.Errorf("%w: composite limit %d has expiry %d and length %d", algorithms.ErrCorruptState, i, exp, n)
			}
			for j := uint64(0); j < n; j += 8 {
				if v := int64(binary.LittleEndian.Uint64(rest[j:])); v < -1 || v > algorithms.MaxExact {
					return nil, fmt.Errorf("%w: composite limit %d has field %d", algorithms.ErrCorruptState, i, v)
				}
			}
			rest = rest[n:]
		}
		return algorithms.All(placeholder(forms.Builtins()[0])), nil
	}
	var parts []algorithms.Algorithm
	user := false
	for rest, i := st[8:], 1; len(rest) > 0; i++ {
		if len(rest) < 24 {
			return nil, fmt.Errorf("%w: composite state entry %d ends in its header", algorithms.ErrCorruptState, i)
		}
		id := int64(binary.LittleEndian.Uint64(rest))
		exp, n := int64(binary.LittleEndian.Uint64(rest[8:])), binary.LittleEndian.Uint64(rest[16:])
		rest = rest[24:]
		if id < 0 || id >= algorithms.MaxExact/2 || exp < 1 || exp > algorithms.MaxExact || n == 0 || n > uint64(len(rest)) || i > 2*algorithms.MaxParts {
			return nil, fmt.Errorf("%w: composite state entry %d has ID %d, expiry %d and length %d", algorithms.ErrCorruptState, i, id, exp, n)
		}
		part, b := rest[:n], builtinNamed(forms.PartKind(id))
		rest = rest[n:]
		if b == nil || !b.Composable() {
			user = true
			continue
		}
		p := placeholder(b)
		if now < exp {
			if _, err := p.Decide(part, algorithms.Request{Now: now, Cost: 1, Peek: true}); err != nil {
				if !errors.Is(err, algorithms.ErrCorruptState) {
					err = fmt.Errorf("%w: %w", algorithms.ErrCorruptState, err)
				}
				return nil, fmt.Errorf("composite state entry %d (%s): %w", i, b.Name, err)
			}
		}
		if len(parts) < algorithms.MaxParts { // enough to tell the form
			parts = append(parts, algorithms.Named(fmt.Sprintf("part%d", i), p))
		}
	}
	if user || len(parts) == 0 {
		return nil, nil
	}
	return algorithms.All(parts...), nil
}

// builtinNamed returns the built-in algorithm named name, or nil.
func builtinNamed(name string) *forms.Builtin {
	for _, b := range forms.Builtins() {
		if b.Name == name {
			return b
		}
	}
	return nil
}

// Rekey returns e, the state of a composite (algorithms.All) of built-ins
// kept before parts were keyed by name, under its namespace of then
// ("<limiter name>:all-<hash of its parts' algorithms>"), as the state
// the same composite keeps now under namespace (its limiter's namespace
// now, "<limiter name>:all"), keyed by its parts' names: parts names
// them in the order the composite listed them then, as
// algorithms.Composite's PartNames says ("gcra-1s" for a part not Named).
// The composite then finds every part's state by name, so that parts may
// be added, removed and reordered from its first decision on; state
// renamed without Rekey is read by place until it is next written, by a
// composite of the same parts in the same order. It returns an error
// wrapping ratelimit.ErrInvalidParams when e's namespace is not such a
// composite's or parts does not name each of its parts once, and one
// wrapping ratelimit.ErrCorruptState when the state does not frame as that
// composite's.
func Rekey(e store.Entry, namespace string, parts []string) (store.Entry, error) {
	_, name, _ := strings.Cut(e.Key.Namespace, ":")
	old, _ := compositeOf(name).(algorithms.Composite)
	if !strings.HasPrefix(name, "all-") || old == nil {
		return e, fmt.Errorf("%w: namespace %q is not a composite's of built-ins of before parts were keyed by name (\"<name>:all-<hash>\")",
			algorithms.ErrInvalidParams, e.Key.Namespace)
	}
	if len(parts) != len(old.Parts()) {
		return e, fmt.Errorf("%w: %d part names for the %d parts of %q", algorithms.ErrInvalidParams, len(parts), len(old.Parts()), e.Key.Namespace)
	}
	named := make([]algorithms.Algorithm, len(parts))
	for i, p := range old.Parts() {
		named[i] = algorithms.Named(parts[i], p)
	}
	c := algorithms.All(named...)
	if err := c.Validate(); err != nil {
		return e, err
	}
	ids := forms.PartIDs(c.(algorithms.Composite))
	next := binary.LittleEndian.AppendUint64(nil, math.MaxUint64)
	rest := e.State
	for i := range parts {
		if len(rest) < 16 {
			return e, fmt.Errorf("%w: entry for %q: composite state ends before limit %d", algorithms.ErrCorruptState, e.Key.String(), i+1)
		}
		exp, n := binary.LittleEndian.Uint64(rest), binary.LittleEndian.Uint64(rest[8:])
		rest = rest[16:]
		if exp > algorithms.MaxExact || n > uint64(len(rest)) {
			return e, fmt.Errorf("%w: entry for %q: composite limit %d has expiry %d and length %d", algorithms.ErrCorruptState, e.Key.String(), i+1, exp, n)
		}
		if n > 0 && exp > 0 {
			next = binary.LittleEndian.AppendUint64(next, uint64(ids[i]))
			next = binary.LittleEndian.AppendUint64(next, exp)
			next = binary.LittleEndian.AppendUint64(next, n)
			next = append(next, rest[:n]...)
		}
		rest = rest[n:]
	}
	if len(rest) != 0 {
		return e, fmt.Errorf("%w: entry for %q: composite state has %d bytes after its %d limits", algorithms.ErrCorruptState, e.Key.String(), len(rest), len(parts))
	}
	e.Key.Namespace, e.State = namespace, next
	return e, nil
}

// placeholder returns b with placeholder numbers.
func placeholder(b *forms.Builtin) algorithms.Algorithm {
	return b.New(1, algorithms.MaxPeriod, 1)
}

// composites caches compositeOf's answers, up to maxComposites names.
var composites struct {
	sync.Mutex
	m map[string]algorithms.Algorithm
}

const maxComposites = 1024

// compositeOf returns a composite of built-ins that a composite named
// name had as its parts before parts were keyed by name, or nil when no
// sequence of built-ins has that name. The name was an FNV-64a hash of the
// parts' names, each followed by a NUL byte, so it
// walks every sequence of up to algorithms.MaxParts built-ins depth first,
// hashing each prefix once: about two million sequences, some 30 ms, once
// per name.
func compositeOf(name string) algorithms.Algorithm {
	composites.Lock()
	alg, ok := composites.m[name]
	composites.Unlock()
	if ok {
		return alg
	}
	want, err := strconv.ParseUint(strings.TrimPrefix(name, "all-"), 16, 64)
	if err == nil && len(name) == len("all-")+16 {
		bs := forms.Builtins()
		var path []*forms.Builtin
		var walk func(h uint64) bool
		walk = func(h uint64) bool {
			for _, b := range bs {
				g := h
				for i := 0; i < len(b.Name); i++ {
					g = (g ^ uint64(b.Name[i])) * fnvPrime
				}
				g *= fnvPrime // the NUL byte: g ^ 0 == g
				path = append(path, b)
				if g == want || (len(path) < algorithms.MaxParts && walk(g)) {
					return true
				}
				path = path[:len(path)-1]
			}
			return false
		}
		if walk(fnvOffset) {
			parts := make([]algorithms.Algorithm, len(path))
			for i, b := range path {
				parts[i] = algorithms.Named(fmt.Sprintf("part%d", i+1), placeholder(b))
			}
			// A composite whose state is of before parts were keyed:
			// its Decide reads that state by place.
			alg = algorithms.All(parts...)
		}
	}
	composites.Lock()
	if composites.m == nil {
		composites.m = make(map[string]algorithms.Algorithm)
	}
	if len(composites.m) < maxComposites {
		composites.m[name] = alg
	}
	composites.Unlock()
	return alg
}

// FNV-64a's parameters (hash/fnv).
const (
	fnvOffset uint64 = 14695981039346656037
	fnvPrime  uint64 = 1099511628211
)

// checkState returns an error wrapping ratelimit.ErrCorruptState when alg
// (if not nil) cannot read e's state: a peek at now on it fails.
func checkState(alg algorithms.Algorithm, e store.Entry, now int64) error {
	if alg == nil {
		return nil
	}
	_, err := alg.Decide(e.State, algorithms.Request{Now: now, Cost: 1, Peek: true})
	switch {
	case err == nil:
		return nil
	case errors.Is(err, algorithms.ErrCorruptState):
		return fmt.Errorf("statefile: entry for %q is not %s state: %w", e.Key.String(), alg.Name(), err)
	default:
		return fmt.Errorf("%w: entry for %q is not %s state: %w", algorithms.ErrCorruptState, e.Key.String(), alg.Name(), err)
	}
}

// checkEntry checks an entry's key as a Limiter makes it (see
// store.Key), and that it has a state and an expiry in range.
func checkEntry(e store.Entry) error {
	if k, ok := store.ParseKey(e.Key.Namespace + ":k"); !ok || k.Namespace != e.Key.Namespace {
		return fmt.Errorf("%w: namespace %q is not <name>:<algorithm>, each [A-Za-z0-9_.-]{1,64}", store.ErrInvalidKey, e.Key.Namespace)
	}
	if err := names.CheckKey(e.Key.ID); err != nil {
		return err
	}
	if len(e.State) == 0 {
		return fmt.Errorf("%w: entry for %q has no state", algorithms.ErrCorruptState, e.Key.String())
	}
	if e.Expires < 0 || e.Expires > algorithms.MaxExact {
		return fmt.Errorf("%w: entry for %q expires at %d µs", algorithms.ErrCorruptState, e.Key.String(), e.Expires)
	}
	return nil
}

package statefile

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/ratelimitkit/ratelimit"
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
		return fmt.Errorf("statefile: %T cannot enumerate its keys, it is not a ratelimit.Exporter: %w", st, store.ErrUnsupported)
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
// the state belongs to when that is a built-in or a composite of built-ins
// (algorithms.All): Import then checks, before writing anything, that the
// state decodes as that algorithm's (an error wrapping
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
	alg := algorithmOf(e.Key.Namespace)
	at := now.UnixMicro()
	if err := checkState(alg, e, at); err != nil {
		return false, err
	}
	if im, ok := st.(store.Importer); ok {
		return im.Import(ctx, alg, e, at)
	}
	wrote := false
	err := st.Update(ctx, e.Key, at, func(cur []byte, now int64) ([]byte, int64, error) {
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
// name>:<algorithm name>") names, or nil when it cannot tell: a built-in,
// or a composite (algorithms.All) of built-ins, whose name "all-<hash>" it
// matches against every sequence of up to algorithms.MaxParts built-ins.
// Its numbers are placeholders (a limit of 1 over algorithms.MaxPeriod): it
// tells Import which form the state takes and lets Import check that the
// state decodes, nothing more. A composite with a part of the user's own is
// nil, like the user's own algorithm.
func algorithmOf(namespace string) algorithms.Algorithm {
	_, name, _ := strings.Cut(namespace, ":")
	for _, b := range forms.Builtins() {
		if b.Name == name {
			return placeholder(b)
		}
	}
	if strings.HasPrefix(name, "all-") {
		return compositeOf(name)
	}
	return nil
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

// compositeOf returns a composite of built-ins named name, or nil when no
// sequence of built-ins has that name. The name is an FNV-64a hash of the
// parts' names, each followed by a NUL byte (see algorithms.All), so it
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
				parts[i] = placeholder(b)
			}
			if c := algorithms.All(parts...); c.Name() == name {
				alg = c
			}
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
	case errors.Is(err, ratelimit.ErrCorruptState):
		return fmt.Errorf("statefile: entry for %q is not %s state: %w", e.Key.String(), alg.Name(), err)
	default:
		return fmt.Errorf("%w: entry for %q is not %s state: %w", ratelimit.ErrCorruptState, e.Key.String(), alg.Name(), err)
	}
}

// checkEntry checks an entry's key as a Limiter makes it (see
// store.Key), and that it has a state and an expiry in range.
func checkEntry(e store.Entry) error {
	if k, ok := store.ParseKey(e.Key.Namespace + ":k"); !ok || k.Namespace != e.Key.Namespace {
		return fmt.Errorf("%w: namespace %q is not <name>:<algorithm>, each [A-Za-z0-9_.-]{1,64}", ratelimit.ErrInvalidKey, e.Key.Namespace)
	}
	if err := names.CheckKey(e.Key.ID); err != nil {
		return err
	}
	if len(e.State) == 0 {
		return fmt.Errorf("%w: entry for %q has no state", ratelimit.ErrCorruptState, e.Key.String())
	}
	if e.Expires < 0 || e.Expires > algorithms.MaxExact {
		return fmt.Errorf("%w: entry for %q expires at %d µs", ratelimit.ErrCorruptState, e.Key.String(), e.Expires)
	}
	return nil
}

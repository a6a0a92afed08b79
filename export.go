package ratelimit

import (
	"bufio"
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"
	"sync"

	"github.com/ratelimitkit/ratelimit/algorithms"
)

// Moving state between stores.
//
// A store that can enumerate its keys implements Exporter; one that must
// write state in a form of its own (the Lua forms' doubles in Redis, say)
// implements Importer. Both are optional, detected by type assertion, in
// the manner of database/sql/driver: a store without Exporter cannot be
// counted or exported (ErrUnsupported), and a store without Importer is
// imported into through its Update, which every store has.
// docs/moving-state.md describes the format and each store's support.

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
// Import of the second copy writes nothing. yield must not call the store
// from within a lock the store holds; the built-in stores call it holding
// none.
//
// A store that cannot enumerate its keys in some configuration returns an
// error wrapping ErrUnsupported that says why.
//
// Export bounds each of its round trips to the backend (a page, a batch of
// keys) whatever ctx allows, so that a store that hangs fails Count and
// Export within about one bound, and a long export of a live store is not
// cut off: the built-in stores give each round trip a second
// (their ExportTimeout).
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

// Count returns how many keys under namespace hold live state at now in
// store. It returns an error wrapping ErrUnsupported when store is not an
// Exporter or cannot enumerate its keys. On a built-in store that hangs it
// fails within about a second (see Exporter).
func Count(ctx context.Context, store Store, namespace string, now int64) (int, error) {
	n := 0
	err := Export(ctx, store, namespace, now, func(Entry) error { n++; return nil })
	return n, err
}

// Export calls yield for every key under namespace (every key when
// namespace is "") that holds live state at now in store; see Exporter. It
// returns an error wrapping ErrUnsupported when store is not an Exporter.
// On a built-in store that hangs it fails within about a second, however
// long ctx allows.
func Export(ctx context.Context, store Store, namespace string, now int64, yield func(Entry) error) error {
	x, ok := store.(Exporter)
	if !ok {
		return fmt.Errorf("ratelimit: %T cannot enumerate its keys: it does not implement ratelimit.Exporter: %w", store, ErrUnsupported)
	}
	return x.Export(ctx, namespace, now, yield)
}

// Import writes e into store unless e.Key already holds live state there,
// and reports whether it wrote. alg selects the form the store keeps the
// state in; it may be nil when unknown (AlgorithmOf helps). The stored
// state expires at e.Expires, exactly as if a decision had written it; an
// entry already expired at now is skipped.
//
// The destination's live state wins because it is the newer: a move copies
// from a store that no longer decides, so state already in the destination
// was either copied by an earlier, interrupted run of the same move (and is
// the same) or written by decisions made since the switch, which a copy
// must not undo. Running a move twice therefore loses no admission.
//
// When alg is not nil, e.State must decode as alg's state: alg decides a
// peek on it at now, and a state it cannot read is refused, before
// anything is written, with an error wrapping ErrCorruptState that names
// the key.
func Import(ctx context.Context, store Store, alg algorithms.Algorithm, e Entry, now int64) (bool, error) {
	if err := checkEntry(e); err != nil {
		return false, err
	}
	if err := checkState(alg, e, now); err != nil {
		return false, err
	}
	if im, ok := store.(Importer); ok {
		return im.Import(ctx, alg, e, now)
	}
	wrote := false
	err := store.Update(ctx, e.Key, now, func(cur []byte, now int64) ([]byte, int64, error) {
		wrote = false
		if cur != nil || e.Expires <= now {
			return nil, 0, nil
		}
		wrote = true
		return append([]byte(nil), e.State...), e.Expires - now, nil
	})
	return wrote && err == nil, err
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
	if checkNamespace(k.Namespace) != nil {
		return Key{}, false
	}
	return k, true
}

// AlgorithmOf returns an algorithm of the kind that namespace ("<limiter
// name>:<algorithm name>") names, or nil when it cannot tell: a built-in,
// or a composite (algorithms.All) of built-ins, whose name "all-<hash>" it
// matches against every sequence of up to algorithms.MaxParts built-ins.
// Its numbers are placeholders (a limit of 1 over algorithms.MaxPeriod): it
// tells Import which form the state takes and lets Import check that the
// state decodes, nothing more. A composite with a part of the user's own is
// nil, like the user's own algorithm: its state goes where Update keeps it,
// which is where its decisions read it on every store.
func AlgorithmOf(namespace string) algorithms.Algorithm {
	_, name, _ := strings.Cut(namespace, ":")
	for _, b := range algorithms.Builtins() {
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
func placeholder(b *algorithms.Builtin) algorithms.Algorithm {
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
		bs := algorithms.Builtins()
		var path []*algorithms.Builtin
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

// checkState returns an error wrapping ErrCorruptState when alg (if not
// nil) cannot read e's state: a peek at now on it fails.
func checkState(alg algorithms.Algorithm, e Entry, now int64) error {
	if alg == nil {
		return nil
	}
	_, err := alg.Decide(e.State, algorithms.Request{Now: now, Cost: 1, Peek: true})
	switch {
	case err == nil:
		return nil
	case errors.Is(err, ErrCorruptState):
		return fmt.Errorf("ratelimit: entry for %q is not %s state: %w", e.Key.String(), alg.Name(), err)
	default:
		return fmt.Errorf("%w: entry for %q is not %s state: %w", ErrCorruptState, e.Key.String(), alg.Name(), err)
	}
}

func checkEntry(e Entry) error {
	if err := checkNamespace(e.Key.Namespace); err != nil {
		return err
	}
	if err := checkKey(e.Key.ID); err != nil {
		return err
	}
	if len(e.State) == 0 {
		return fmt.Errorf("%w: entry for %q has no state", ErrCorruptState, e.Key.String())
	}
	if e.Expires < 0 || e.Expires > algorithms.MaxExact {
		return fmt.Errorf("%w: entry for %q expires at %d µs", ErrCorruptState, e.Key.String(), e.Expires)
	}
	return nil
}

// checkNamespace checks a namespace as a Limiter makes it: a name and an
// algorithm name, each [A-Za-z0-9_.-]{1,64}, joined by ':'.
func checkNamespace(ns string) error {
	name, alg, ok := strings.Cut(ns, ":")
	if !ok {
		return fmt.Errorf("%w: namespace %q is not <name>:<algorithm>", ErrInvalidKey, ns)
	}
	if err := errors.Join(checkName("limiter name", name), checkName("algorithm name", alg)); err != nil {
		return fmt.Errorf("%w: namespace %q: %w", ErrInvalidKey, ns, err)
	}
	return nil
}

// The state file format: JSON Lines. The first line is a header,
//
//	{"format":"ratelimit-state","version":2}
//
// then one Entry per line, in any order,
//
//	{"ns":"api:gcra","id":"dXNlci00Mg==","state":"AAAA...","expires":1767225600000000}
//
// with ns the namespace, id and state in standard base64 (an ID may hold
// any bytes), and expires in microseconds since the Unix epoch; and last an
// end line with the number of entries,
//
//	{"end":2}
//
// so that a file cut short, even at a line boundary, is an error, not a
// smaller state. Empty lines are skipped. Version 1 files (no end line,
// header optional) are refused: no release wrote them.

// FormatName and FormatVersion identify the state file format in its
// header line.
const (
	FormatName    = "ratelimit-state"
	FormatVersion = 2
)

type fileHeader struct {
	Format  string `json:"format"`
	Version int    `json:"version"`
}

type fileEntry struct {
	NS      string `json:"ns"`
	ID      string `json:"id"`
	State   string `json:"state"`
	Expires int64  `json:"expires"`
}

type fileEnd struct {
	End int64 `json:"end"`
}

// EntryWriter writes entries in the state file format. Create it with
// NewEntryWriter, call Write for each entry, and Close at the end, which
// writes the end line: a file without it reads as cut short. It is not
// safe for concurrent use.
type EntryWriter struct {
	w      *bufio.Writer
	header bool
	closed bool
	n      int64
}

// NewEntryWriter returns a writer of the state file format to w.
func NewEntryWriter(w io.Writer) *EntryWriter { return &EntryWriter{w: bufio.NewWriter(w)} }

// Write writes one entry, after the header line if it is the first. It
// returns an error after Close.
func (w *EntryWriter) Write(e Entry) error {
	if w.closed {
		return errors.New("ratelimit: write state: the writer is closed")
	}
	if err := w.writeHeader(); err != nil {
		return err
	}
	w.n++
	return w.line(fileEntry{
		NS:      e.Key.Namespace,
		ID:      base64.StdEncoding.EncodeToString([]byte(e.Key.ID)),
		State:   base64.StdEncoding.EncodeToString(e.State),
		Expires: e.Expires,
	})
}

func (w *EntryWriter) writeHeader() error {
	if w.header {
		return nil
	}
	w.header = true
	return w.line(fileHeader{FormatName, FormatVersion})
}

func (w *EntryWriter) line(v any) error {
	b, err := json.Marshal(v)
	if err != nil {
		return fmt.Errorf("ratelimit: write state: %w", err)
	}
	w.w.Write(b)
	if err := w.w.WriteByte('\n'); err != nil {
		return fmt.Errorf("ratelimit: write state: %w", err)
	}
	return nil
}

// Close ends the file: it writes the header if no entry was written (an
// empty export is still a valid file), the end line with the number of
// entries, and whatever the writer buffers. It does not close the
// underlying writer. Calling it again does nothing.
func (w *EntryWriter) Close() error {
	if w.closed {
		return nil
	}
	w.closed = true
	if err := w.writeHeader(); err != nil {
		return err
	}
	if err := w.line(fileEnd{w.n}); err != nil {
		return err
	}
	if err := w.w.Flush(); err != nil {
		return fmt.Errorf("ratelimit: write state: %w", err)
	}
	return nil
}

// ReadEntries reads the state file format from r and calls fn for each
// entry, in file order, stopping at the first error fn returns. A line
// that is not a valid entry, a missing or wrong header, and a file that
// does not end with its end line holding the number of entries (a file
// cut short) are errors wrapping ErrCorruptState that say where; the
// entries before the fault have been passed to fn. To refuse a file
// before acting on any of it, read it twice: once with a fn that does
// nothing.
func ReadEntries(r io.Reader, fn func(Entry) error) error {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), 64<<20)
	var entries int64
	header, ended := false, false
	n := 0
	for sc.Scan() {
		n++
		line := sc.Bytes()
		if len(bytes.TrimSpace(line)) == 0 {
			continue
		}
		switch {
		case ended:
			return fmt.Errorf("%w: state file line %d: a line after the end line", ErrCorruptState, n)
		case !header:
			var h fileHeader
			if err := json.Unmarshal(line, &h); err != nil || h.Format != FormatName {
				return fmt.Errorf("%w: state file line %d: not a %s header", ErrCorruptState, n, FormatName)
			}
			if h.Version != FormatVersion {
				return fmt.Errorf("%w: state file version %d, want %d", ErrCorruptState, h.Version, FormatVersion)
			}
			header = true
			continue
		case bytes.HasPrefix(line, []byte(`{"end":`)):
			var end fileEnd
			if err := json.Unmarshal(line, &end); err != nil {
				return fmt.Errorf("%w: state file line %d: %w", ErrCorruptState, n, err)
			}
			if end.End != entries {
				return fmt.Errorf("%w: state file line %d: the end line counts %d entries, the file holds %d", ErrCorruptState, n, end.End, entries)
			}
			ended = true
			continue
		}
		var fe fileEntry
		dec := json.NewDecoder(bytes.NewReader(line))
		dec.DisallowUnknownFields()
		if err := dec.Decode(&fe); err != nil {
			return fmt.Errorf("%w: state file line %d: %w", ErrCorruptState, n, err)
		}
		id, err1 := base64.StdEncoding.DecodeString(fe.ID)
		st, err2 := base64.StdEncoding.DecodeString(fe.State)
		if err := errors.Join(err1, err2); err != nil {
			return fmt.Errorf("%w: state file line %d: %w", ErrCorruptState, n, err)
		}
		e := Entry{Key: Key{Namespace: fe.NS, ID: string(id)}, State: st, Expires: fe.Expires}
		if err := checkEntry(e); err != nil {
			return fmt.Errorf("state file line %d: %w", n, err)
		}
		entries++
		if err := fn(e); err != nil {
			return err
		}
	}
	if err := sc.Err(); err != nil {
		return fmt.Errorf("ratelimit: read state: %w", err)
	}
	switch {
	case !header:
		return fmt.Errorf("%w: state file is empty: not even a header", ErrCorruptState)
	case !ended:
		return fmt.Errorf("%w: state file ends after %d entries without its end line: it was cut short", ErrCorruptState, entries)
	}
	return nil
}

// Count returns how many keys hold live state under the limiter's
// namespace, by the limiter's clock. It returns an error wrapping
// ErrUnsupported when the store cannot enumerate its keys.
func (l *Limiter) Count(ctx context.Context) (int, error) {
	return Count(ctx, l.store, l.ns, l.clock.Now().UnixMicro())
}

// Export writes the live state of every key under the limiter's namespace
// to w in the state file format (see docs/moving-state.md), and returns how
// many keys it wrote. With a memory store, calling it at shutdown and
// Import at start keeps every key's quota across a restart.
func (l *Limiter) Export(ctx context.Context, w io.Writer) (int, error) {
	ew := NewEntryWriter(w)
	n := 0
	err := Export(ctx, l.store, l.ns, l.clock.Now().UnixMicro(), func(e Entry) error {
		n++
		return ew.Write(e)
	})
	if err != nil {
		return n, err
	}
	return n, ew.Close()
}

// Import reads the state file format from r and writes each entry under
// the limiter's namespace into the limiter's store (see the package
// function Import for which state wins when a key already holds some). It
// returns how many entries it wrote. Entries of other namespaces are an
// error wrapping ErrInvalidKey, and stop the import.
func (l *Limiter) Import(ctx context.Context, r io.Reader) (int, error) {
	n := 0
	err := ReadEntries(r, func(e Entry) error {
		if e.Key.Namespace != l.ns {
			return fmt.Errorf("%w: entry for %q is not in the limiter's namespace %q", ErrInvalidKey, e.Key.String(), l.ns)
		}
		wrote, err := Import(ctx, l.store, l.alg, e, l.clock.Now().UnixMicro())
		if wrote {
			n++
		}
		return err
	})
	return n, err
}

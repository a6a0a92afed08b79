package ratelimit

import (
	"bufio"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"

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
// Exporter or cannot enumerate its keys.
func Count(ctx context.Context, store Store, namespace string, now int64) (int, error) {
	n := 0
	err := Export(ctx, store, namespace, now, func(Entry) error { n++; return nil })
	return n, err
}

// Export calls yield for every key under namespace (every key when
// namespace is "") that holds live state at now in store; see Exporter. It
// returns an error wrapping ErrUnsupported when store is not an Exporter.
func Export(ctx context.Context, store Store, namespace string, now int64, yield func(Entry) error) error {
	x, ok := store.(Exporter)
	if !ok {
		return fmt.Errorf("ratelimit: %T cannot enumerate its keys: %w", store, ErrUnsupported)
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
func Import(ctx context.Context, store Store, alg algorithms.Algorithm, e Entry, now int64) (bool, error) {
	if err := checkEntry(e); err != nil {
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

// AlgorithmOf returns a built-in algorithm of the kind that namespace
// ("<limiter name>:<algorithm name>") names, or nil when its algorithm is
// not a built-in. Its numbers are placeholders: it tells Import which form
// the state takes, nothing more.
func AlgorithmOf(namespace string) algorithms.Algorithm {
	_, name, _ := strings.Cut(namespace, ":")
	for _, b := range algorithms.Builtins() {
		if b.Name == name {
			return b.New(1, 1e9, 1)
		}
	}
	return nil
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

// The state file format: JSON Lines, one Entry per line,
//
//	{"ns":"api:gcra","id":"dXNlci00Mg==","state":"AAAA...","expires":1767225600000000}
//
// with ns the namespace, id and state in standard base64 (an ID may hold
// any bytes), and expires in microseconds since the Unix epoch. Lines may
// come in any order; an empty line is skipped. The first line may instead
// be a header, {"format":"ratelimit-state","version":1}, which
// EntryWriter writes and EntryReader checks.

// FormatName and FormatVersion identify the state file format in its
// header line.
const (
	FormatName    = "ratelimit-state"
	FormatVersion = 1
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

// EntryWriter writes entries in the state file format. Create it with
// NewEntryWriter, call Write for each entry, and Flush at the end. It is
// not safe for concurrent use.
type EntryWriter struct {
	w      *bufio.Writer
	header bool
}

// NewEntryWriter returns a writer of the state file format to w.
func NewEntryWriter(w io.Writer) *EntryWriter { return &EntryWriter{w: bufio.NewWriter(w)} }

// Write writes one entry, after the header line if it is the first.
func (w *EntryWriter) Write(e Entry) error {
	if !w.header {
		w.header = true
		if err := w.line(fileHeader{FormatName, FormatVersion}); err != nil {
			return err
		}
	}
	return w.line(fileEntry{
		NS:      e.Key.Namespace,
		ID:      base64.StdEncoding.EncodeToString([]byte(e.Key.ID)),
		State:   base64.StdEncoding.EncodeToString(e.State),
		Expires: e.Expires,
	})
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

// Flush writes out whatever the writer buffers; a header alone when no
// entry was written, so that an empty export is still a valid file.
func (w *EntryWriter) Flush() error {
	if !w.header {
		w.header = true
		if err := w.line(fileHeader{FormatName, FormatVersion}); err != nil {
			return err
		}
	}
	if err := w.w.Flush(); err != nil {
		return fmt.Errorf("ratelimit: write state: %w", err)
	}
	return nil
}

// ReadEntries reads the state file format from r and calls fn for each
// entry, in file order, stopping at the first error fn returns. A line
// that is not a valid entry is an error wrapping ErrCorruptState that
// names the line; entries before it have been passed to fn.
func ReadEntries(r io.Reader, fn func(Entry) error) error {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), 64<<20)
	for n := 1; sc.Scan(); n++ {
		line := sc.Bytes()
		if len(strings.TrimSpace(string(line))) == 0 {
			continue
		}
		if n == 1 && strings.Contains(string(line), `"format"`) {
			var h fileHeader
			if err := json.Unmarshal(line, &h); err != nil || h.Format != FormatName {
				return fmt.Errorf("%w: state file line 1: not a %s header", ErrCorruptState, FormatName)
			}
			if h.Version != FormatVersion {
				return fmt.Errorf("%w: state file version %d, want %d", ErrCorruptState, h.Version, FormatVersion)
			}
			continue
		}
		var fe fileEntry
		dec := json.NewDecoder(strings.NewReader(string(line)))
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
		if err := fn(e); err != nil {
			return err
		}
	}
	if err := sc.Err(); err != nil {
		return fmt.Errorf("ratelimit: read state: %w", err)
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
	return n, ew.Flush()
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

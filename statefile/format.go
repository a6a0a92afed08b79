// Package statefile moves rate-limit state between stores: it counts,
// exports and imports the live state a store holds, and reads and writes
// it as a file.
//
// The operations are three functions, on any store: [Count] tells how
// many keys hold live state, [Export] hands each key's state to a function
// (a [Writer]'s Write, to make a file), and [Import] writes one key's
// state into a store, keeping state the store already holds as newer.
// [Read] reads a file back, entry by entry. A limiter's keys are those
// under its namespace (Limiter.Namespace, in Limiter.Store); a memory
// store's snapshot is every key, namespace "".
//
// A store takes part through optional capabilities of the ratelimit
// package: it is counted and exported when it is a store.Exporter,
// and imported into through its own store.Importer or, without one,
// through Update, which every store has. The command `ratelimit move`
// runs these functions between two stores or a store and a file;
// docs/moving-state.md describes the format and each store's support.
//
// # The file format
//
// JSON Lines: a header line naming the format and its version, one line
// per entry, and an end line counting the entries, so that a file cut
// short is an error, not a smaller state. [Writer] shows each line.
package statefile

import (
	"bufio"
	"bytes"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"

	"github.com/ratelimitkit/ratelimit/algorithms"
	"github.com/ratelimitkit/ratelimit/store"
)

// The header line's values.
const (
	formatName    = "ratelimit-state"
	formatVersion = 2
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

// Writer writes entries in the state file format. Create it with
// NewWriter, call Write for each entry (Write fits Export's yield), and
// Close at the end, which writes the end line: a file without it reads as
// cut short. It is not safe for concurrent use.
//
// The format is JSON Lines. The first line is a header,
//
//	{"format":"ratelimit-state","version":2}
//
// then one entry per line, in any order,
//
//	{"ns":"api:gcra","id":"dXNlci00Mg==","state":"AAAA...","expires":1767225600000000}
//
// with ns the namespace, id and state in standard base64 (an ID may hold
// any bytes), and expires in microseconds since the Unix epoch; and last
// an end line with the number of entries,
//
//	{"end":2}
//
// Empty lines are skipped. Version 1 files (no end line, header optional)
// are refused: no release wrote them.
type Writer struct {
	w      *bufio.Writer
	header bool
	closed bool
	n      int64
}

// NewWriter returns a writer of the state file format to w.
func NewWriter(w io.Writer) *Writer { return &Writer{w: bufio.NewWriter(w)} }

// Write writes one entry, after the header line if it is the first. It
// returns an error after Close.
func (w *Writer) Write(e store.Entry) error {
	if w.closed {
		return errors.New("statefile: write: the writer is closed")
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

func (w *Writer) writeHeader() error {
	if w.header {
		return nil
	}
	w.header = true
	return w.line(fileHeader{formatName, formatVersion})
}

func (w *Writer) line(v any) error {
	b, err := json.Marshal(v)
	if err != nil {
		return fmt.Errorf("statefile: write: %w", err)
	}
	w.w.Write(b)
	if err := w.w.WriteByte('\n'); err != nil {
		return fmt.Errorf("statefile: write: %w", err)
	}
	return nil
}

// Close ends the file: it writes the header if no entry was written (an
// empty export is still a valid file), the end line with the number of
// entries, and whatever the writer buffers. It does not close the
// underlying writer. Calling it again does nothing.
func (w *Writer) Close() error {
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
		return fmt.Errorf("statefile: write: %w", err)
	}
	return nil
}

// Read reads the state file format from r and calls fn for each entry, in
// file order, stopping at the first error fn returns. A line that is not
// a valid entry, a missing or wrong header, and a file that does not end
// with its end line holding the number of entries (a file cut short) are
// errors wrapping ratelimit.ErrCorruptState (ratelimit.ErrInvalidKey for
// a bad key) that say where; the entries before the fault have been
// passed to fn. To refuse a file before acting on any of it, read it
// twice: once with a fn that does nothing.
func Read(r io.Reader, fn func(store.Entry) error) error {
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
			return fmt.Errorf("%w: state file line %d: a line after the end line", algorithms.ErrCorruptState, n)
		case !header:
			var h fileHeader
			if err := json.Unmarshal(line, &h); err != nil || h.Format != formatName {
				return fmt.Errorf("%w: state file line %d: not a %s header", algorithms.ErrCorruptState, n, formatName)
			}
			if h.Version != formatVersion {
				return fmt.Errorf("%w: state file version %d, want %d", algorithms.ErrCorruptState, h.Version, formatVersion)
			}
			header = true
			continue
		case bytes.HasPrefix(line, []byte(`{"end":`)):
			var end fileEnd
			if err := json.Unmarshal(line, &end); err != nil {
				return fmt.Errorf("%w: state file line %d: %w", algorithms.ErrCorruptState, n, err)
			}
			if end.End != entries {
				return fmt.Errorf("%w: state file line %d: the end line counts %d entries, the file holds %d", algorithms.ErrCorruptState, n, end.End, entries)
			}
			ended = true
			continue
		}
		var fe fileEntry
		dec := json.NewDecoder(bytes.NewReader(line))
		dec.DisallowUnknownFields()
		if err := dec.Decode(&fe); err != nil {
			return fmt.Errorf("%w: state file line %d: %w", algorithms.ErrCorruptState, n, err)
		}
		id, err1 := base64.StdEncoding.DecodeString(fe.ID)
		st, err2 := base64.StdEncoding.DecodeString(fe.State)
		if err := errors.Join(err1, err2); err != nil {
			return fmt.Errorf("%w: state file line %d: %w", algorithms.ErrCorruptState, n, err)
		}
		e := store.Entry{Key: store.Key{Namespace: fe.NS, ID: string(id)}, State: st, Expires: fe.Expires}
		if err := checkEntry(e); err != nil {
			return fmt.Errorf("state file line %d: %w", n, err)
		}
		entries++
		if err := fn(e); err != nil {
			return err
		}
	}
	if err := sc.Err(); err != nil {
		return fmt.Errorf("statefile: read: %w", err)
	}
	switch {
	case !header:
		return fmt.Errorf("%w: state file is empty: not even a header", algorithms.ErrCorruptState)
	case !ended:
		return fmt.Errorf("%w: state file ends after %d entries without its end line: it was cut short", algorithms.ErrCorruptState, entries)
	}
	return nil
}

package memory

import (
	"context"
	"io"
	"strings"
	"time"

	"github.com/ratelimitkit/ratelimit"
)

var _ ratelimit.Exporter = (*Store)(nil)

// Export implements ratelimit.Exporter: it yields a copy of every key under
// namespace (every key when namespace is "") whose state is live at now.
// It copies one shard's live entries under the shard's lock and yields them
// after releasing it, so decisions wait for a copy, never for yield.
// Importing needs nothing of the store's own: ratelimit.Import writes
// through Update, which Decide reads.
func (s *Store) Export(ctx context.Context, namespace string, now int64, yield func(ratelimit.Entry) error) error {
	var batch []ratelimit.Entry
	for i := range s.shards {
		if err := ctx.Err(); err != nil {
			return err
		}
		sh := &s.shards[i]
		batch = batch[:0]
		sh.mu.Lock()
		sh.index.entries(func(_ uint64, e *entry) bool {
			if namespace != "" && e.key.Namespace != namespace {
				return true
			}
			e.mu.Lock()
			if e.expires > now {
				batch = append(batch, ratelimit.Entry{
					Key:     ratelimit.Key{Namespace: e.key.Namespace, ID: strings.Clone(e.key.ID)},
					State:   append([]byte(nil), e.state...),
					Expires: e.expires,
				})
			}
			e.mu.Unlock()
			return true
		})
		sh.mu.Unlock()
		for _, e := range batch {
			if err := yield(e); err != nil {
				return err
			}
		}
	}
	return nil
}

// Snapshot writes the state of every key the store holds that is live at
// now, whichever limiter it belongs to, to w in the state file format
// (ratelimit.EntryWriter; docs/moving-state.md), and returns how many keys
// it wrote. Call it at shutdown, and Restore at start, so that a restart
// resets no user's quota; ratelimit move takes the same file to Redis,
// PostgreSQL or DynamoDB. Decisions may go on while it runs; each key is
// written as it was when its shard was copied.
func (s *Store) Snapshot(ctx context.Context, w io.Writer, now time.Time) (int, error) {
	ew := ratelimit.NewEntryWriter(w)
	n := 0
	err := s.Export(ctx, "", now.UnixMicro(), func(e ratelimit.Entry) error {
		n++
		return ew.Write(e)
	})
	if err != nil {
		return n, err
	}
	return n, ew.Close()
}

// Restore reads the state file format from r (a Snapshot, or an export
// from any store) and writes every entry still live at now into the store,
// except for keys that already hold live state, which keep it. It returns
// how many keys it wrote. A line that is not a valid entry, or an entry
// whose state its algorithm cannot read (when ratelimit.AlgorithmOf knows
// the algorithm), stops it with an error wrapping ratelimit.ErrCorruptState;
// the entries before it are kept.
func (s *Store) Restore(ctx context.Context, r io.Reader, now time.Time) (int, error) {
	n := 0
	err := ratelimit.ReadEntries(r, func(e ratelimit.Entry) error {
		wrote, err := ratelimit.Import(ctx, s, ratelimit.AlgorithmOf(e.Key.Namespace), e, now.UnixMicro())
		if wrote {
			n++
		}
		return err
	})
	return n, err
}

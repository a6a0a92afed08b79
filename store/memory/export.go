package memory

import (
	"context"
	"strings"

	"github.com/ratelimitkit/ratelimit/store"
)

var _ store.Exporter = (*Store)(nil)

// Export implements store.Exporter: it yields a copy of every key under
// namespace (every key when namespace is "") whose state is live at now.
// It copies one shard's live entries under the shard's lock and yields them
// after releasing it, so decisions wait for a copy, never for yield.
// Importing needs nothing of the store's own: statefile.Import writes
// through Update, which Decide reads. A snapshot of the whole store is
// statefile.Export with namespace "" into a statefile.Writer.
func (s *Store) Export(ctx context.Context, namespace string, now int64, yield func(store.Entry) error) error {
	var batch []store.Entry
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
				batch = append(batch, store.Entry{
					Key:     store.Key{Namespace: e.key.Namespace, ID: strings.Clone(e.key.ID)},
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

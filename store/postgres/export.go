package postgres

import (
	"bytes"
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/ratelimitkit/ratelimit/store"
)

var _ store.Exporter = (*Store)(nil)

// Queryer is what Export needs of a DB beyond the DB interface: a query
// that returns rows. *pgxpool.Pool, *pgx.Conn and pgx.Tx have it.
type Queryer interface {
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
}

// ExportBatch is how many rows one query of Export reads.
const ExportBatch = 1000

// Export implements store.Exporter: it reads the rows under namespace
// (every row when namespace is "") whose expires_at is after now (the
// server's clock unless the store was built WithRequestClock), in key
// order, ExportBatch rows per query, holding no connection while yield
// runs, each query bounded by one second. State a built-in algorithm's SQL form wrote (vals) is yielded in
// the Go form's encoding. Importing needs nothing of the store's own:
// statefile.Import writes through Update, whose state the SQL forms read.
// A DB that is not a Queryer is unsupported.
func (s *Store) Export(ctx context.Context, namespace string, now int64, yield func(store.Entry) error) error {
	q, ok := s.db.(Queryer)
	if !ok {
		return fmt.Errorf("postgres: export: a %T cannot run queries that return rows: %w", s.db, store.ErrUnsupported)
	}
	var clock any = now
	if !s.requestClock {
		clock = nil
	}
	// Keys under a namespace lie in [ns ":", ns ";"), ';' following ':'.
	from, to := []byte(namespace+":"), []byte(namespace+";")
	if namespace == "" {
		from, to = []byte{}, nil
	}
	sql := "SELECT key, state, vals, expires_at FROM " + s.Table() +
		" WHERE key > $1 AND ($2::bytea IS NULL OR key < $2) AND expires_at > coalesce($3, " + s.ident("ratelimit_now") + "())" +
		" ORDER BY key LIMIT $4"
	// Keyset pagination: each query starts after the last key seen (no
	// real key is just ns ":").
	after := from
	for {
		batch, last, err := s.exportBatch(ctx, q, sql, after, to, clock)
		if err != nil {
			return err
		}
		for _, e := range batch {
			if err := yield(e); err != nil {
				return err
			}
		}
		if last == nil {
			return nil
		}
		after = bytes.Clone(last)
	}
}

// exportTimeout bounds each query of Export (and so of statefile.Count),
// with reading its rows: a server that hangs fails an export within about
// one exportTimeout, however many rows the table holds.
const exportTimeout = time.Second

// exportBatch runs one query of Export, bounded by exportTimeout, and
// returns its entries and the last key it read (nil when it read none).
func (s *Store) exportBatch(ctx context.Context, q Queryer, sql string, after, to []byte, clock any) ([]store.Entry, []byte, error) {
	qctx, cancel := context.WithTimeout(ctx, exportTimeout)
	defer cancel()
	fail := func(err error) error {
		if ctx.Err() == nil && qctx.Err() != nil {
			err = fmt.Errorf("no reply within %v: %w", exportTimeout, err)
		}
		return s.fail(ctx, "export", zeroKey, err)
	}
	var batch []store.Entry
	var last []byte
	rows, err := q.Query(qctx, sql, after, to, clock, ExportBatch)
	if err != nil {
		return nil, nil, fail(err)
	}
	defer rows.Close()
	for rows.Next() {
		var (
			k, state []byte
			vals     []int64
			expires  int64
		)
		if err := rows.Scan(&k, &state, &vals, &expires); err != nil {
			return nil, nil, fail(err)
		}
		last = k
		key, ok := store.ParseKey(string(k))
		if !ok {
			continue // not a row a Limiter writes
		}
		if state == nil {
			state = encodeVals(vals)
		}
		batch = append(batch, store.Entry{Key: key, State: state, Expires: expires})
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return nil, nil, fail(err)
	}
	return batch, last, nil
}

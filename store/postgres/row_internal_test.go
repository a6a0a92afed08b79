package postgres

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgtype"

	"github.com/ratelimitkit/ratelimit/algorithms"
	"github.com/ratelimitkit/ratelimit/algorithms/forms"
	"github.com/ratelimitkit/ratelimit/internal/testserver"
)

// TestRowDecideLockTimeout checks that the one-statement decision's
// set_config in its WHERE clause bounds the wait for the row lock on the
// server, with no help from the client (the context has no deadline): the
// statement fails with lock_not_available after about the given wait, and
// writes nothing.
func TestRowDecideLockTimeout(t *testing.T) {
	ctx := context.Background()
	url := testserver.PostgresURL(t)
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	holder, err := pgx.Connect(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	defer holder.Close(ctx)
	name := fmt.Sprintf("rl_rowlock_%d", time.Now().UnixNano()%1e9)
	s, err := New(conn, WithTable(name), WithServerClock(false))
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Migrate(ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_, _ = conn.Exec(context.Background(), "DROP TABLE IF EXISTS "+s.Table())
		for _, b := range forms.Builtins() {
			_, _ = conn.Exec(context.Background(), "DROP FUNCTION IF EXISTS "+s.decideFunction(b.Name))
		}
		_, _ = conn.Exec(context.Background(), "DROP FUNCTION IF EXISTS "+s.decideFunction(compositeName))
	})
	alg := algorithms.FixedWindow(5, time.Hour)
	b := forms.BuiltinOf(alg)
	args := s.args.text(alg.(forms.ServerForm).ServerArgs())
	key := []byte("lt:k")
	now := time.Now().UnixMicro()
	decide := func(wait int64) ([]byte, error) {
		var raw pgtype.UndecodedBytes
		var err error
		argv := append([]any{key, now, int64(1)}, s.args.get(alg.(forms.ServerForm).ServerArgs()).boxed...)
		if wait == 0 {
			err = conn.QueryRow(ctx, s.rowSQL[b].sql[0], argv...).Scan(&raw)
		} else {
			err = conn.QueryRow(ctx, s.rowSQL[b].sql[1], append(argv, wait)...).Scan(&raw)
		}
		return raw, err
	}
	if _, err := decide(0); !errors.Is(err, pgx.ErrNoRows) {
		t.Fatalf("the row statement on a key without a row: %v, want no row", err)
	}
	var v [6]int64
	var first pgtype.UndecodedBytes
	if err := conn.QueryRow(ctx, s.decideSQL[b], key, now, int64(1), false, args, nil, int64(0), false, int64(0)).Scan(&first); err != nil {
		t.Fatal(err)
	}
	raw, err := decide(1000)
	if err != nil {
		t.Fatal(err)
	}
	if err := decodeDecision(raw, &v); err != nil || v[0] != 1 || v[2] != 3 {
		t.Fatalf("second decision = %v (%v), want admitted with 3 remaining", v, err)
	}

	tx, err := holder.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tx.Exec(ctx, "SELECT 1 FROM "+s.Table()+" WHERE key = $1 FOR UPDATE", key); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	_, err = decide(200)
	elapsed := time.Since(start)
	var pe *pgconn.PgError
	if !errors.As(err, &pe) || pe.Code != lockNotAvailable {
		t.Errorf("the row statement waiting for a locked row with a wait of 200 ms: %v, want SQLSTATE %s", err, lockNotAvailable)
	}
	if elapsed < 190*time.Millisecond || elapsed > 3*time.Second {
		t.Errorf("the row statement gave up after %v, want about 200 ms", elapsed)
	}
	_ = tx.Rollback(ctx)
	raw, err = decide(1000)
	if err != nil {
		t.Fatal(err)
	}
	if err := decodeDecision(raw, &v); err != nil || v[0] != 1 || v[2] != 2 {
		t.Errorf("the decision after the one that timed out = %v (%v), want admitted with 2 remaining (the timed-out one wrote nothing)", v, err)
	}
}

// TestRowStatements prepares, on the server, every built-in's
// one-statement decision as row.sql renders it (with and without its row
// form, with and without the lock wait) on a table whose name needs
// quoting, and checks that each takes exactly the parameters Decide passes:
// the key, the time, the cost, the arguments (one by one with a row form,
// else one array), then the wait.
func TestRowStatements(t *testing.T) {
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, testserver.PostgresURL(t))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	name := fmt.Sprintf(`rl row"s $rl0$ %d`, time.Now().UnixNano()%1e6)
	s, err := New(conn, WithTable(name), WithServerClock(false))
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Migrate(ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_, _ = conn.Exec(context.Background(), "DROP TABLE IF EXISTS "+s.Table())
		for _, b := range forms.Builtins() {
			_, _ = conn.Exec(context.Background(), "DROP FUNCTION IF EXISTS "+s.decideFunction(b.Name))
		}
		_, _ = conn.Exec(context.Background(), "DROP FUNCTION IF EXISTS "+s.decideFunction(compositeName))
	})
	for _, b := range builtins {
		f := s.forms.alg[b.Name]
		forms := []sqlForm{f}
		if f.row != "" {
			noRow := f
			noRow.row = ""
			forms = append(forms, noRow)
		}
		for _, form := range forms {
			for _, wait := range []bool{false, true} {
				want := 4 // key, time, cost, the arguments as one array
				if form.row != "" {
					want = 3 + b.Args
				}
				if wait {
					want++
				}
				q := s.rowDecideSQL(form, b.Args, wait)
				sd, err := conn.Prepare(ctx, "", q)
				if err != nil {
					t.Errorf("%s (row form %q, wait %v): prepare: %v\n%s", b.Name, form.row, wait, err, q)
					continue
				}
				if len(sd.ParamOIDs) != want {
					t.Errorf("%s (row form %q, wait %v): %d parameters, want %d\n%s", b.Name, form.row, wait, len(sd.ParamOIDs), want, q)
				}
			}
		}
	}
}

package postgres_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/ratelimitkit/ratelimit"
	"github.com/ratelimitkit/ratelimit/algorithms"
	"github.com/ratelimitkit/ratelimit/store/postgres"
)

// TestMigrateRefusesWrongSchema creates the store's table by hand with one
// thing wrong, as an earlier hand-written migration or a typo could leave
// it: Migrate must refuse it with an error that names the table, the
// column, the type found and the type wanted, and the fix, and install
// nothing (no decide function).
func TestMigrateRefusesWrongSchema(t *testing.T) {
	p := newTestPool(t, 2)
	ctx := context.Background()
	cases := []struct {
		name, ddl string
		want      []string // in the error, after the table's name
	}{
		{"expires_at integer", "key bytea PRIMARY KEY, vals bigint[], state bytea, expires_at integer NOT NULL, dec bigint[]",
			[]string{"column expires_at is integer, want bigint", "ALTER COLUMN expires_at TYPE bigint", "drop the table"}},
		{"vals integer[]", "key bytea PRIMARY KEY, vals integer[], state bytea, expires_at bigint NOT NULL, dec bigint[]",
			[]string{"column vals is integer[], want bigint[]", "ALTER COLUMN vals TYPE bigint[]"}},
		{"dec integer[]", "key bytea PRIMARY KEY, vals bigint[], state bytea, expires_at bigint NOT NULL, dec integer[]",
			[]string{"column dec is integer[], want bigint[]"}},
		{"key text", "key text PRIMARY KEY, vals bigint[], state bytea, expires_at bigint NOT NULL, dec bigint[]",
			[]string{"column key is text, want bytea"}},
		{"no state", "key bytea PRIMARY KEY, vals bigint[], expires_at bigint NOT NULL, dec bigint[]",
			[]string{"has no column state (want bytea)", "ADD COLUMN state bytea"}},
		// No release has shipped a table without dec: Migrate does not
		// add it, it names the fix.
		{"no dec", "key bytea PRIMARY KEY, vals bigint[], state bytea, expires_at bigint NOT NULL",
			[]string{"has no column dec (want bigint[])", "ADD COLUMN dec bigint[]"}},
		{"a NOT NULL column of its own", "key bytea PRIMARY KEY, vals bigint[], state bytea, expires_at bigint NOT NULL, dec bigint[], owner text NOT NULL",
			[]string{"column owner is NOT NULL without a default", "ALTER COLUMN owner DROP NOT NULL"}},
		{"no primary key", "key bytea, vals bigint[], state bytea, expires_at bigint NOT NULL, dec bigint[]",
			[]string{"no primary key on column key", "ADD PRIMARY KEY (key)"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			name := newTable(t, p, "rl_schema")
			table := pgx.Identifier{name}.Sanitize()
			if _, err := p.Exec(ctx, "CREATE TABLE "+table+" ("+c.ddl+")"); err != nil {
				t.Fatal(err)
			}
			s, err := postgres.New(p, postgres.WithTable(name))
			if err != nil {
				t.Fatal(err)
			}
			err = s.Migrate(ctx)
			if err == nil {
				t.Fatalf("Migrate on a table with %s = nil, want an error naming the column and the fix", c.name)
			}
			for _, w := range append([]string{"table " + table}, c.want...) {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("Migrate on a table with %s = %q, want it to say %q", c.name, err, w)
				}
			}
			var fn *string
			if err := p.QueryRow(ctx, "SELECT to_regproc($1)::text", pgx.Identifier{name + "_decide_gcra"}.Sanitize()).Scan(&fn); err != nil {
				t.Fatal(err)
			}
			if fn != nil {
				t.Errorf("Migrate refused the table but installed its decide function %s", *fn)
			}
		})
	}
	t.Run("right", func(t *testing.T) {
		// The table as schema.sql creates it, by hand: Migrate accepts it.
		name := newTable(t, p, "rl_schema")
		// Columns of its own are fine when an INSERT need not set them.
		if _, err := p.Exec(ctx, "CREATE TABLE "+pgx.Identifier{name}.Sanitize()+" (key bytea PRIMARY KEY, vals bigint[], state bytea, expires_at bigint NOT NULL, dec bigint[], note text, at timestamptz NOT NULL DEFAULT now(), id bigint GENERATED ALWAYS AS IDENTITY)"); err != nil {
			t.Fatal(err)
		}
		s, err := postgres.New(p, postgres.WithTable(name))
		if err != nil {
			t.Fatal(err)
		}
		if err := s.Migrate(ctx); err != nil {
			t.Errorf("Migrate on a table with the right columns: %v", err)
		}
	})
}

// TestSchemaFaultIsNotCorruptState changes a column's type after Migrate
// (on an empty table, as ALTER TABLE allows): every decision then fails,
// on the one-statement path, the decide function and Update, and the error
// must say "schema" and must not be ErrCorruptState, so that FailOpen
// admits (a store failure) instead of denying every key as corrupt.
func TestSchemaFaultIsNotCorruptState(t *testing.T) {
	p := newTestPool(t, 2)
	ctx := context.Background()
	for _, c := range []struct{ col, alter string }{
		{"expires_at", "ALTER COLUMN expires_at TYPE integer"},
		{"vals", "ALTER COLUMN vals TYPE integer[]"},
		{"owner", "ADD COLUMN owner text NOT NULL"},
	} {
		col := c.col
		t.Run(col, func(t *testing.T) {
			s := newStore(t, p)
			if _, err := p.Exec(ctx, "ALTER TABLE "+s.Table()+" "+c.alter); err != nil {
				t.Fatal(err)
			}
			for _, alg := range []algorithms.Algorithm{algorithms.GCRA(10, time.Hour, 10), algorithms.SlidingLog(10, time.Hour), stepAlg{}} {
				lim := newLimiter(t, s, alg, ratelimit.WithFailurePolicy(ratelimit.FailOpen))
				d, err := lim.Allow(ctx, "k")
				if err == nil {
					if strings.HasPrefix(col, "vals") && alg.Name() != "gcra" {
						continue // a form that keeps no state in vals is unharmed
					}
					t.Fatalf("%s: lim.Allow with %s = no error, want a schema error", alg.Name(), col)
				}
				// Through Update, pgx refuses to encode the time for an
				// integer column before the statement is sent: a store
				// error, not corrupt state, but not one the server names.
				named := alg.Name() == "schema_step" && col == "expires_at" || strings.Contains(err.Error(), "schema") && strings.Contains(err.Error(), col)
				if errors.Is(err, ratelimit.ErrCorruptState) || !named {
					t.Errorf("%s: lim.Allow with %s: error %v, want a schema error naming the column, not ErrCorruptState", alg.Name(), col, err)
				}
				if !d.Allowed {
					t.Errorf("%s: lim.Allow with %s under FailOpen = denied, want admitted (a schema fault is a store failure)", alg.Name(), col)
				}
			}
		})
	}
}

// stepAlg is a user's algorithm (it runs through Update): a constant
// admission that writes one byte for an hour.
type stepAlg struct{}

func (stepAlg) Name() string    { return "schema_step" }
func (stepAlg) Validate() error { return nil }
func (stepAlg) MaxCost() int64  { return 1 }
func (stepAlg) Decide(state []byte, req algorithms.Request) (algorithms.Step, error) {
	d := algorithms.Decision{Allowed: true, Limit: 1, Remaining: 1}
	if req.Peek {
		return algorithms.Step{Decision: d}, nil
	}
	return algorithms.Step{Decision: d, Next: []byte{1}, TTL: int64(time.Hour / time.Microsecond)}, nil
}

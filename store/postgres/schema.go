package postgres

import (
	"context"
	_ "embed"
	"fmt"
	"strings"
	"text/template"

	"github.com/ratelimitkit/ratelimit/algorithms"
)

// builtins are the built-in algorithms with a SQL form, in the order
// SchemaSQL installs them.
var builtins = func() []*algorithms.Builtin {
	var out []*algorithms.Builtin
	for _, b := range algorithms.Builtins() {
		if _, ok := b.SQL(); ok {
			out = append(out, b)
		}
	}
	return out
}()

// sqlForm is a SQL form as SchemaSQL installs it: its text, the name of
// the function its decide function calls (versioned: see
// algorithms.SQLFunction) and the name of its row form, which the
// one-statement decision calls, or "" when it has none (see rowDecideSQL).
type sqlForm struct{ text, function, row string }

// formSet is the SQL forms a store installs and calls: the built-in
// algorithms' by name, and the composite's.
type formSet struct {
	alg       map[string]sqlForm
	composite sqlForm
}

// releaseForms is the forms of this release of the package.
var releaseForms = func() formSet {
	fs := formSet{
		alg:       make(map[string]sqlForm, len(builtins)),
		composite: sqlForm{algorithms.CompositeSQL(), algorithms.CompositeSQLFunction(), ""},
	}
	for _, b := range builtins {
		text, _ := b.SQL()
		fs.alg[b.Name] = sqlForm{text, b.SQLFunction(), b.SQLRowFunction()}
	}
	return fs
}()

// migrateLock is the key of the transaction-level advisory lock Migrate
// holds, so that concurrent migrations (several application instances
// starting at once) run one after the other instead of failing with
// "tuple concurrently updated".
const migrateLock = 0x726c6d6967726174 // "rlmigrat"

// Migrate creates the store's table and functions, or brings the functions
// up to date, in one transaction. It is idempotent: run it at every start
// or once from a deployment step. It executes SchemaSQL.
func (s *Store) Migrate(ctx context.Context) error {
	tx, err := s.db.Begin(ctx)
	if err != nil {
		return s.fail(ctx, "migrate", zeroKey, err)
	}
	defer func() { _ = tx.Rollback(ctx) }()
	if _, err := tx.Exec(ctx, "SELECT pg_advisory_xact_lock($1)", int64(migrateLock)); err != nil {
		return s.fail(ctx, "migrate", zeroKey, err)
	}
	if _, err := tx.Exec(ctx, s.SchemaSQL()); err != nil {
		return s.fail(ctx, "migrate", zeroKey, err)
	}
	if err := tx.Commit(ctx); err != nil {
		return s.fail(ctx, "migrate", zeroKey, err)
	}
	return nil
}

// SchemaSQL returns the SQL that Migrate executes, for teams that apply
// migrations with their own tools: the table, two small helper functions
// (ratelimit_now, the server's clock in microseconds, and ratelimit_int8s,
// which reads state written by Update), every built-in algorithm's SQL form,
// the composite SQL form (ratelimit_all_<version>, algorithms.CompositeSQL),
// and the table's decide functions (one per algorithm, and one for
// composites), which call the forms. Run it in one transaction. Every
// statement creates only what is missing or replaces a function, so it can
// run again after an upgrade. Objects are created in the first schema of
// the search_path.
//
// The forms' function names carry a version, a hash of the form's text
// (see algorithms.SQLFunction): a release whose forms differ installs them
// beside the older release's instead of replacing them, so two releases can
// share a database during a rolling deploy, each table's decide functions
// calling the forms of the release that migrated it last. Functions of
// versions that no decide function calls any longer can be dropped (see
// docs/stores/postgres.md).
func (s *Store) SchemaSQL() string {
	var b strings.Builder
	table := s.ident(s.table)
	tag := "$rl$"
	for i := 0; strings.Contains(table, tag); i++ {
		tag = fmt.Sprintf("$rl%d$", i)
	}
	execute(&b, schemaTemplate, struct {
		Table, TableLit, Tag, Corrupt, Now string
		Unlogged                           bool
	}{table, "'" + strings.ReplaceAll(table, "'", "''") + "'", tag, algorithms.SQLErrCorrupt, nowSQL, s.unlogged})
	b.WriteString("\n")
	for _, alg := range builtins {
		b.WriteString(s.forms.alg[alg.Name].text)
		b.WriteString("\n")
	}
	b.WriteString(s.forms.composite.text)
	b.WriteString("\n")
	for _, alg := range builtins {
		b.WriteString(s.decideFunctionSQL(alg.Name, s.forms.alg[alg.Name], false))
		b.WriteString("\n")
	}
	b.WriteString(s.decideFunctionSQL(compositeName, s.forms.composite, true))
	b.WriteString("\n")
	return b.String()
}

// The SQL of the schema and of a decide function, in files beside this one
// that tell their story in their comments.
var (
	//go:embed schema.sql
	schemaSQL      string
	schemaTemplate = template.Must(template.New("schema.sql").Parse(schemaSQL))
	//go:embed decide.sql
	decideSQL      string
	decideTemplate = template.Must(template.New("decide.sql").Parse(decideSQL))
)

// nowSQL is the server's clock in microseconds since the Unix epoch, as a
// SQL expression: the body of ratelimit_now, and what the decide functions
// compute themselves (a call to a SQL function from PL/pgSQL costs more).
const nowSQL = "(extract(epoch FROM clock_timestamp()) * 1000000)::bigint"

// execute runs a template of this package's own on data it builds itself;
// it cannot fail but by a programming error, caught by every test.
func execute(b *strings.Builder, t *template.Template, data any) {
	if err := t.Execute(b, data); err != nil {
		panic("postgres: " + err.Error())
	}
}

// decideFunctionSQL returns the table's decide function for alg (see
// decide.sql), which calls form's function and names its row form, quoted
// with a dollar tag that occurs nowhere else in it: the function holds
// quoted identifiers made from the user's table name.
func (s *Store) decideFunctionSQL(name string, form sqlForm, composite bool) string {
	data := struct {
		Name, Func, Table, Form, Row, Now, Tag string
		Composite                              bool
	}{
		name, s.decideFunction(name), s.ident(s.table), form.function, form.row, nowSQL, "", composite,
	}
	for i := 0; ; i++ {
		data.Tag = fmt.Sprintf("$rl%d$", i)
		var b strings.Builder
		execute(&b, decideTemplate, data)
		if strings.Count(b.String(), data.Tag) == 2 {
			return b.String()
		}
	}
}

// compositeName names the composite's decide function: the table's name
// with "_decide_all" appended. No built-in algorithm is named "all".
const compositeName = "all"

// decideFunction is the quoted name of the table's decide function for the
// algorithm with the given name.
func (s *Store) decideFunction(alg string) string {
	return s.ident(s.table + "_decide_" + alg)
}

// rowDecideSQL returns the statement that decides a request that may
// consume (not a peek) for a key that has a row, with the SQL form f: one
// UPDATE, so that the executor finds the row by its key, locks it and
// writes it, as a bare upsert does, and the form runs once inside it. Its
// parameters are the row key, the request's time (NULL: the server's
// clock), the cost, then the algorithm's arguments: one bigint parameter
// each when the form has a row form (nargs of them), else one bigint[];
// then, when wait is set, the milliseconds the row lock may be waited for.
//
// The SET list is a subquery over the row being updated that runs the
// form's row form (algorithms.SQLRowFunction) on the row's state and
// expiry: the row form reads the clock, treats expired state as none and
// returns the next state and its expiry, or NULLs when it writes nothing
// (a denial rewrites the row unchanged), and the decision, kept in the
// row's dec column so that RETURNING can hand it back. Only a row that
// holds state in vals qualifies (state written by Update, in the state
// column, goes to the decide function, which reads it through
// ratelimit_int8s). When a concurrent decision has updated the row
// meanwhile, the executor waits for it to commit and evaluates the SET
// list again on the new version (EvalPlanQual): the row form runs again
// and reads the clock again, so no decision is made at a time before the
// state it reads.
//
// A form without a row form (the sliding log's, or a form of another
// release installed in tests) runs in the SET list as a function of the
// state, the time and the arguments as an array: the subquery reads the
// clock in a subquery of its own, fenced by OFFSET 0 so that the planner
// neither pulls it up nor reads the clock at each use, and treats the row
// as absent when it has expired (state written by Update is read through
// ratelimit_int8s).
//
// With wait, the WHERE clause sets lock_timeout for the statement's
// transaction (set_config(..., true)) when it meets the row, before the
// executor waits for its lock, so that the wait is bounded by the
// caller's deadline. The setting lasts until the transaction ends: the
// statement's own, unless the store's DB is a transaction (pgx.Tx),
// where Decide uses the decide function, which restores it, instead.
//
// No row: the statement updates nothing and returns no row, and Decide
// calls the decide function, which inserts the row (and handles a
// concurrent first insert).
func (s *Store) rowDecideSQL(f sqlForm, nargs int, wait bool) string {
	var b strings.Builder
	next := 4 // the next parameter
	// Both ways keep the row's own state when the form writes nothing.
	b.WriteString("UPDATE " + s.ident(s.table) + " r SET (vals, state, expires_at, dec) = (SELECT " +
		"coalesce(d.next_state, r.vals), " +
		"CASE WHEN d.next_state IS NULL THEN r.state END, ")
	if f.row != "" {
		b.WriteString("coalesce(d.expires_at, r.expires_at), " +
			"d.decision FROM " + f.row + "(r.vals, r.expires_at, $2, $3")
		for range nargs {
			fmt.Fprintf(&b, ", $%d", next)
			next++
		}
		b.WriteString(") d) WHERE r.key = $1 AND r.vals IS NOT NULL")
	} else {
		b.WriteString("CASE WHEN d.next_state IS NULL THEN r.expires_at ELSE n.now + d.ttl END, " +
			"ARRAY[d.allowed::int::bigint, d.lim, d.remaining, d.retry_after, d.reset_after, d.delay] " +
			"FROM (SELECT coalesce($2::bigint, " + nowSQL + ") AS now OFFSET 0) n, " +
			"LATERAL " + f.function + "(CASE WHEN r.expires_at > n.now THEN coalesce(r.vals, " + s.ident("ratelimit_int8s") + "(r.state)) END, " +
			"n.now, $3, false, $4) d) WHERE r.key = $1")
		next++
	}
	if wait {
		fmt.Fprintf(&b, " AND set_config('lock_timeout', $%d::bigint || 'ms', true) IS NOT NULL", next)
	}
	b.WriteString(" RETURNING r.dec")
	return b.String()
}

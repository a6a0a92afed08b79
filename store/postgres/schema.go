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

// sqlForm is a SQL form as SchemaSQL installs it: its text and the name of
// the function its decide function calls (versioned: see algorithms.SQLFunction).
type sqlForm struct{ text, function string }

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
		composite: sqlForm{algorithms.CompositeSQL(), algorithms.CompositeSQLFunction()},
	}
	for _, b := range builtins {
		text, _ := b.SQL()
		fs.alg[b.Name] = sqlForm{text, b.SQLFunction()}
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
	execute(&b, schemaTemplate, struct {
		Table, Corrupt, Now string
		Unlogged            bool
	}{s.ident(s.table), algorithms.SQLErrCorrupt, nowSQL, s.unlogged})
	b.WriteString("\n")
	for _, alg := range builtins {
		b.WriteString(s.forms.alg[alg.Name].text)
		b.WriteString("\n")
	}
	b.WriteString(s.forms.composite.text)
	b.WriteString("\n")
	for _, alg := range builtins {
		b.WriteString(s.decideFunctionSQL(alg.Name, s.forms.alg[alg.Name].function, false))
		b.WriteString("\n")
	}
	b.WriteString(s.decideFunctionSQL(compositeName, s.forms.composite.function, true))
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
// decide.sql), quoted with a dollar tag that occurs nowhere else in it: the
// function holds quoted identifiers made from the user's table name.
func (s *Store) decideFunctionSQL(name, form string, composite bool) string {
	data := struct {
		Name, Func, Table, Form, Now, Tag string
		Composite                         bool
	}{
		name, s.decideFunction(name), s.ident(s.table), form, nowSQL, "", composite,
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

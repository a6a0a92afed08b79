package postgres

import (
	"context"
	"crypto/sha256"
	_ "embed"
	"encoding/hex"
	"errors"
	"fmt"
	"slices"
	"strings"
	"text/template"

	"github.com/jackc/pgx/v5"

	"github.com/ratelimitkit/ratelimit/algorithms/forms"
)

// builtins are the built-in algorithms with a SQL form, in the order
// SchemaSQL installs them.
var builtins = func() []*forms.Builtin {
	var out []*forms.Builtin
	for _, b := range forms.Builtins() {
		if _, ok := b.SQL(); ok {
			out = append(out, b)
		}
	}
	return out
}()

// sqlForm is a SQL form as SchemaSQL installs it: its text, the name of
// the function its decide function calls (versioned: see
// forms.SQLFunction) and the name of its row form, which the
// one-statement decision calls, or "" when it has none (see row.sql).
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
		composite: sqlForm{forms.CompositeSQL(), forms.CompositeSQLFunction(), ""},
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
// or once from a deployment step. It checks the table: a table of that
// name that already existed with a column of another type, a NOT NULL
// column of its own that an INSERT does not set, or without its primary
// key on key, is an error that names the table, the column, the type found
// and wanted, and the fix, and Migrate commits nothing.
//
// What it locks, and for how long: on a database this release has already
// migrated (the table and every function there, and the mark SchemaSQL
// leaves on the table's lease function saying which schema it installed),
// Migrate only reads the catalog, in two queries, and writes and locks
// nothing: the usual case, every process of a deploy but the first. Else
// it takes a transaction-level advisory lock (other Migrate calls on the
// database wait for each other there, so that concurrent migrations do not
// fail with "tuple concurrently updated"), reads the catalog again (a
// migration that ran meanwhile leaves nothing to do), and executes
// SchemaSQL, which takes no lock that a decision takes or waits for: CREATE
// TABLE IF NOT EXISTS takes none on a table that exists (and a new table's
// ACCESS EXCLUSIVE lock is on a table nobody uses yet), CREATE OR REPLACE
// FUNCTION rewrites the function's catalog row (a decision running it goes
// on with the version it started with), and the COMMENT that marks the
// schema locks the lease function against other DDL only. All of it is
// held until the transaction commits, a few hundred milliseconds
// (docs/stores/postgres.md has the figures). At the commit, every session
// that runs the replaced functions compiles them again once.
func (s *Store) Migrate(ctx context.Context) error {
	if current, err := s.schemaCurrent(ctx, s.db); err != nil {
		return s.fail(ctx, "migrate", zeroKey, err)
	} else if current {
		return s.checkSchema(ctx, s.db)
	}
	tx, err := s.db.Begin(ctx)
	if err != nil {
		return s.fail(ctx, "migrate", zeroKey, err)
	}
	defer func() { _ = tx.Rollback(ctx) }()
	if _, err := tx.Exec(ctx, "SELECT pg_advisory_xact_lock($1)", int64(migrateLock)); err != nil {
		return s.fail(ctx, "migrate", zeroKey, err)
	}
	// Another process may have migrated while this one waited for the
	// lock: then there is nothing to write.
	current, err := s.schemaCurrent(ctx, tx)
	if err != nil {
		return s.fail(ctx, "migrate", zeroKey, err)
	}
	if !current {
		if _, err := tx.Exec(ctx, s.SchemaSQL()); err != nil {
			return s.fail(ctx, "migrate", zeroKey, err)
		}
	}
	// CREATE TABLE IF NOT EXISTS keeps a table of the same name whatever
	// its columns: one the statements cannot use is refused here, before
	// the functions that would use it are committed.
	if err := s.checkSchema(ctx, tx); err != nil {
		return err
	}
	if err := tx.Commit(ctx); err != nil {
		return s.fail(ctx, "migrate", zeroKey, err)
	}
	return nil
}

// leaseArgs are the argument types of the table's lease function
// (lease.sql), which name it for the COMMENT that marks the schema.
const leaseArgs = "bytea, bigint, integer, bigint, bigint, bytea"

// schemaMark returns the comment SchemaSQL leaves on the table's lease
// function: a hash of the statements before it, so that a schema
// installed by this release's SchemaSQL, for this table and these
// options, is recognised without reading the functions' text.
func schemaMark(statements string) string {
	sum := sha256.Sum256([]byte(statements))
	return "ratelimit schema " + hex.EncodeToString(sum[:12])
}

// schemaFunctions returns the names, unquoted, of every function
// SchemaSQL creates.
func (s *Store) schemaFunctions() []string {
	names := []string{"ratelimit_now", "ratelimit_int8s", s.forms.composite.function,
		s.table + "_decide_" + compositeName, s.table + "_lease"}
	for _, alg := range builtins {
		f := s.forms.alg[alg.Name]
		names = append(names, f.function, s.table+"_decide_"+alg.Name)
		if f.row != "" {
			names = append(names, f.row)
		}
	}
	slices.Sort(names)
	return slices.Compact(names)
}

// schemaCurrentSQL reports whether the schema SchemaSQL installs is in
// place: the table ($1) exists, the lease function ($2, with its
// arguments) carries the mark $3, and every function named in $4 exists
// (a function dropped by hand since is put back). It reads the catalog
// only, and locks nothing.
const schemaCurrentSQL = `SELECT to_regclass($1) IS NOT NULL
   AND coalesce(obj_description(to_regprocedure($2), 'pg_proc') = $3, false)
   AND (SELECT count(DISTINCT proname) FROM pg_proc
        WHERE proname = ANY($4::text[]) AND pg_function_is_visible(oid)) = cardinality($4::text[])`

// schemaCurrent reports, through q, whether the schema SchemaSQL would
// install is already in place, so that Migrate has nothing to write.
func (s *Store) schemaCurrent(ctx context.Context, q interface {
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}) (bool, error) {
	var current bool
	err := q.QueryRow(ctx, schemaCurrentSQL, s.ident(s.table), s.leaseFunction()+"("+leaseArgs+")",
		schemaMark(s.schemaStatements()), s.schemaFunctions()).Scan(&current)
	return current, err
}

// SchemaSQL returns the SQL that Migrate executes, for teams that apply
// migrations with their own tools: the table, two small helper functions
// (ratelimit_now, the server's clock in microseconds, and ratelimit_int8s,
// which reads state written by Update), every built-in algorithm's SQL form,
// the composite SQL form (ratelimit_all_<version>, forms.CompositeSQL),
// the table's decide functions (one per algorithm, and one for
// composites), which call the forms, and the table's lease function
// (lease.sql), and last a COMMENT on the lease function that marks the
// schema as this release's, so that Migrate finds it in place and writes
// nothing. Run it in one transaction. Every
// statement creates only what is missing or replaces a function, so it can
// run again after an upgrade. Objects are created in the first schema of
// the search_path.
//
// The forms' function names carry a version, a hash of the form's text
// (see forms.SQLFunction): a release whose forms differ installs them
// beside the older release's instead of replacing them, so two releases can
// share a database during a rolling deploy, each table's decide functions
// calling the forms of the release that migrated it last. Functions of
// versions that no decide function calls any longer can be dropped (see
// docs/stores/postgres.md).
func (s *Store) SchemaSQL() string {
	statements := s.schemaStatements()
	return statements + fmt.Sprintf("-- The mark Migrate reads to find this schema in place.\nCOMMENT ON FUNCTION %s(%s) IS '%s';\n",
		s.leaseFunction(), leaseArgs, schemaMark(statements))
}

// schemaStatements returns SchemaSQL's statements but the mark.
func (s *Store) schemaStatements() string {
	var b strings.Builder
	execute(&b, schemaTemplate, struct {
		Table, Corrupt, Now string
		Unlogged            bool
	}{s.ident(s.table), forms.SQLErrCorrupt, nowSQL, s.unlogged})
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
	b.WriteString(s.leaseFunctionSQL()) // lease.go
	b.WriteString("\n")
	return b.String()
}

// The SQL of the schema, of a decide function and of the one-statement
// decision, in files beside this one that tell their story in their
// comments.
var (
	//go:embed schema.sql
	schemaSQL      string
	schemaTemplate = template.Must(template.New("schema.sql").Parse(schemaSQL))
	//go:embed decide.sql
	decideSQL      string
	decideTemplate = template.Must(template.New("decide.sql").Parse(decideSQL))
	//go:embed row.sql
	rowSQL      string
	rowTemplate = template.Must(template.New("row.sql").Parse(rowSQL))
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

// rowDecideSQL returns the table's one-statement decision with the SQL
// form f (row.sql, whose comment tells how it works): one UPDATE of the
// key's row that runs the form once. nargs is the algorithm's number of
// arguments, passed one by one when the form has a row form; wait adds the
// parameter that bounds the wait for the row lock.
func (s *Store) rowDecideSQL(f sqlForm, nargs int, wait bool) string {
	data := struct {
		Table, Row, Function, Now, Int8s string
		Args                             []int // the arguments' parameter numbers, with a row form
		Wait                             int   // the lock wait's parameter number, or 0
	}{Table: s.ident(s.table), Row: f.row, Function: f.function, Now: nowSQL, Int8s: s.ident("ratelimit_int8s")}
	next := 4 // the next parameter
	if f.row != "" {
		for range nargs {
			data.Args = append(data.Args, next)
			next++
		}
	} else {
		next++ // $4, the arguments as one bigint[]
	}
	if wait {
		data.Wait = next
	}
	var b strings.Builder
	execute(&b, rowTemplate, data)
	return b.String()
}

// columns are the store's table's columns with the types its statements
// rely on (as format_type spells them), in schema.sql's order.
var columns = []struct{ name, typ string }{
	{"key", "bytea"},
	{"vals", "bigint[]"},
	{"state", "bytea"},
	{"expires_at", "bigint"},
	{"dec", "bigint[]"},
}

// schemaCheckSQL reads the table's columns with their types, whether each
// must be given a value by an INSERT (NOT NULL without a default), and
// whether key is its primary key (or another unique, non-partial index on key
// alone, which the upserts' ON CONFLICT (key) needs). $1 is the table's
// quoted name, resolved on the search_path as the statements resolve it.
const schemaCheckSQL = `SELECT coalesce(array_agg(a.attname::text ORDER BY a.attnum), '{}'),
       coalesce(array_agg(format_type(a.atttypid, a.atttypmod) ORDER BY a.attnum), '{}'),
       coalesce(array_agg(a.attnotnull AND NOT a.atthasdef AND a.attidentity = '' ORDER BY a.attnum), '{}'),
       EXISTS (SELECT FROM pg_index i JOIN pg_attribute k ON k.attrelid = i.indrelid AND k.attnum = i.indkey[0]
               WHERE i.indrelid = $1::regclass AND i.indisunique AND i.indnkeyatts = 1
                 AND i.indpred IS NULL AND k.attname = 'key')
FROM pg_attribute a
WHERE a.attrelid = $1::regclass AND a.attnum > 0 AND NOT a.attisdropped`

// errSchema is wrapped by the error of a table whose columns or key are
// not the ones the store's statements rely on (see checkSchema).
var errSchema = errors.New("schema")

// checkSchema reads the table's columns and key through q and returns an
// error wrapping errSchema, naming the table, the first wrong column, the
// type found and wanted, and the fix, when they are not what schema.sql
// creates (columns of the user's own are fine unless an INSERT must set
// them: NOT NULL without a default); nil when they are. An error reading the catalog is returned as
// a store error.
func (s *Store) checkSchema(ctx context.Context, q interface {
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}) error {
	table := s.ident(s.table)
	var names, types []string
	var required []bool
	var keyed bool
	if err := q.QueryRow(ctx, schemaCheckSQL, table).Scan(&names, &types, &required, &keyed); err != nil {
		return fmt.Errorf("postgres: schema check of %s: %w", table, err) // not through fail, which calls checkSchema
	}
	found := make(map[string]string, len(names))
	for i, n := range names {
		found[n] = types[i]
	}
	const rebuild = "or drop the table and run Migrate again (it holds only rate-limit state: keys start afresh)"
	for _, c := range columns {
		typ, ok := found[c.name]
		switch {
		case !ok:
			return fmt.Errorf("postgres: %w: table %s has no column %s (want %s): run ALTER TABLE %s ADD COLUMN %s %s, %s",
				errSchema, table, c.name, c.typ, table, c.name, c.typ, rebuild)
		case typ != c.typ:
			return fmt.Errorf("postgres: %w: table %s column %s is %s, want %s: run ALTER TABLE %s ALTER COLUMN %s TYPE %s USING %s::%s, %s",
				errSchema, table, c.name, typ, c.typ, table, c.name, c.typ, c.name, c.typ, rebuild)
		}
	}
	for i, n := range names {
		ours := slices.ContainsFunc(columns, func(c struct{ name, typ string }) bool { return c.name == n })
		if required[i] && !ours {
			return fmt.Errorf("postgres: %w: table %s column %s is NOT NULL without a default, and the store's INSERT gives it no value: run ALTER TABLE %s ALTER COLUMN %s DROP NOT NULL (or SET DEFAULT), %s",
				errSchema, table, n, table, n, rebuild)
		}
	}
	if !keyed {
		return fmt.Errorf("postgres: %w: table %s has no primary key on column key (each key's row must be unique): run ALTER TABLE %s ADD PRIMARY KEY (key), %s",
			errSchema, table, table, rebuild)
	}
	return nil
}

// typeError reports whether code, a SQLSTATE, is one a table whose columns
// are not what the statements expect can cause: an integer out of range (a
// bigint written to an integer column), a datatype mismatch, an undefined
// column, a NOT NULL column the INSERT does not set.
func typeError(code string) bool {
	switch code {
	case numericOutOfRange, "42804", "42703", "42P08", "22P02", "23502":
		return true
	}
	return false
}

// schemaFault returns checkSchema's error when the table's schema is not
// the one the statements rely on, for fail to report a statement's type
// error as what it is (a schema problem, a store failure) rather than as
// corrupt state; nil when the schema is right or cannot be read (a failing
// connection, an aborted transaction), and fail goes on as before.
func (s *Store) schemaFault(ctx context.Context) error {
	if err := s.checkSchema(ctx, s.db); errors.Is(err, errSchema) {
		return err
	}
	return nil
}

// Formgen generates the server-side forms of the built-in algorithms from
// their Go forms: a Lua script for Redis and Valkey (algorithms/forms/lua/) and
// PL/pgSQL functions for PostgreSQL (algorithms/forms/sql/) per algorithm. The Go
// form is the only source; the generated files are checked in, and a test
// fails when running the generator would change them. It runs from
// algorithms/ through go generate:
//
//	//go:generate go run ./internal/formgen
//
// # What it translates
//
// Every type of the package with a method
//
//	func (a *T) decide(s *State, live bool, req Request, d *Decision) int64
//
// is a form, named by the constant its Name method returns. decide applies
// req to the state s (live reports whether the key had state; when it is
// false s holds zeros, and decide must not read it before assigning it),
// writes the decision through d (it sets all of *d once, with
// *d = Decision{...}, before any return, then its fields) and returns a TTL
// in microseconds: a return whose TTL is the
// constant 0 stores nothing, and any other stores the new contents of s
// with its TTL, which must then be positive (the Go form stores nothing on
// a TTL that is not, so the forms would disagree, which the differential
// tests catch). State is a struct of int64 fields, stored in declaration order;
// an optional method valid() bool on *State, one return statement, says
// which stored states can be read (the others are corrupt). The form's
// parameters are the receiver's fields that T's serverArgs method lists, in
// that order: a method whose body is return []int64{a.x, a.y, ...}.
//
// decide and the methods it calls are written in this subset of Go:
//
//   - values are int64 and bool; integer constants of at most 2^53;
//   - expressions: + - * on integers, / and % with a non-negative dividend
//     and a positive divisor (the forms compute floor division, which is
//     what Go computes there), comparisons, && || !, unary minus, the
//     builtins min and max, and the named helpers of algorithms/subset.go:
//     ceilDiv(a, b) for a ≥ 0 and b > 0, and mulDivFloor(a, b, c) and
//     divMulFloor(a, b, c), the floor of a product and quotient of three
//     integers computed in doubles in the order the name says, capped at
//     2^53 (the only floating-point steps);
//   - reads of req.Now, req.Cost, req.Peek, live, the parameters (a.x), the
//     state's fields (s.x), local variables and a Decision's fields;
//   - statements: x := e, x = e (also several at once, evaluated before
//     any is assigned), x += e, x -= e, x *= e, x++, x--, assignments to
//     the fields of s and of the Decision, *d = Decision{Field: e, ...}
//     (once), if/else (no init statement), and return;
//   - a return is the last statement of its block, and an if that holds a
//     return in one branch either always returns in that branch or holds
//     no return (so the returns form a tree);
//   - calls of the receiver's methods (helpers, int64 parameters, one
//     int64 or bool result): a helper that is one return statement is
//     inlined as an expression anywhere; any other helper may only be
//     called as the whole right-hand side of an assignment, and only a
//     helper (not decide) may hold a loop, for cond { ... }, with no return
//     and no integer division in cond. Helpers are not recursive.
//
// Anything else is an error that names the file, line and column and what
// is outside the subset, e.g.
//
//	formgen: rate.go:120:3: *ast.SwitchStmt is outside the subset (assignments, if/else, for cond, return)
//
// # What it writes
//
// The shared parts are written once, here: each language's prelude
// (argument decoding, the server clock, reading and checking the stored
// state, treating expired state as missing), the exact floor and ceiling
// division idioms, the helpers' implementations, key expiry and the reply.
// lua.go in algorithms/forms documents the Lua calling convention and
// sql.go the SQL one; the generated files keep both exactly.
//
// Lua computes in doubles: every integer division becomes a division in
// doubles followed by one correction step, exact below 2^53; statement
// helpers are inlined, so a script is straight-line code without closures.
//
// PL/pgSQL is generated symbolically: decide runs over expressions instead
// of values, so every variable becomes one SQL expression of the
// function's arguments (an if that assigns becomes a CASE) and every
// return one ROW. The returns fold into a single RETURN of CASEs, except
// where a branch calls a helper that holds a loop (it becomes a function of
// its own, called only on the paths that need it, behind an IF). An
// expression a path would compute again becomes a DECLARE variable when
// that saves more than a few operations (a cost model of path-sensitive
// use counts and operation sizes), computed once where the paths that need
// it part. Each parameter and state field is read from its array once,
// into a variable (PostgreSQL sets up every array subscript of an
// expression again in each transaction). The result is a handful of
// single-assignment expressions:
// PL/pgSQL prepares each expression once per transaction, and a decision
// is usually a transaction of its own. Arithmetic is bigint, whose
// division truncates as Go's does.
//
// Each SQL file also holds the algorithm's row form (ratelimit_<name>_row,
// see forms.SQLRowFunction), generated from the same symbolic
// run with peek false: it reads the clock and the state's liveness itself,
// takes the parameters one by one, splits each return on the decision's
// allowed flag (so a request sets up only its own RETURN), and chooses its
// variables by what a request sets up (both arms of a CASE), since setting
// an expression up costs PostgreSQL far more than evaluating it.
//
// It also writes the composite forms, lua/all.lua and sql/all.sql
// (composite.go): every form's decide as a Lua function that returns the
// next state instead of writing it, called by a driver in two phases (check
// as a peek, then commit) for each part of a composite (algorithms.All),
// and a PL/pgSQL driver that calls every form's SQL function the same way.
//
// Every function a SQL file defines gets a versioned name,
// ratelimit_<x>_<version>, the version being the first 8 hex digits of the
// SHA-256 of the file's text (versionSQL), so that releases sharing a
// database install their forms side by side.
//
// It writes the coalesced forms too, lua/many/<name>.lua (many.go): the same
// functions called once per request, key by key and each key's requests in
// arrival order, to decide several requests on one or more keys in one
// script run.
//
// Every generated step can be traced back to Go: before each SQL
// variable, assignment, IF, WHILE and RETURN, and each Lua statement that
// comes from a Go statement, a comment names the file and line and quotes
// the line (rate.go:341: ahead += need), as the Go compiler's rewrite*.go
// names its rules. A SQL variable is named after the Go value it holds:
// v_<local>, or v_<local>_<n> for the n-th of several places decide gives
// the local a value, v_if_<n> for the n-th if's condition (sqlnames.go).
// SQL is laid out near 100 columns (layout.go); no generated line is over
// 120 (TestLineLength).
//
// Beside the forms it writes a Go manifest of them, manifest.go in the
// store authors' package algorithms/forms (manifest.go here): every form's name, the Go file
// and type it came from, whether it is generated, its arity, and the
// versioned names of its SQL functions, as the Go compiler's ssa/_gen
// writes opGen.go beside its rules. The package reads those facts from
// the manifest (SQLFunction, Builtin.Composable), never from the forms'
// text.
//
// The sliding log is not generated: its server forms keep a sorted set
// (Redis) and an array of (time, cost) pairs (PostgreSQL), which the subset
// cannot express, so lua/sliding_log.lua and slidinglog.sql (which the
// generator copies to sql/sliding_log.sql with versioned names) are
// written by hand and held to the Go form by the conformance suite's
// differential tests and store/postgres's TestSQLFormsEqualGoForms.
package main

import (
	"bytes"
	"flag"
	"fmt"
	"os"
	"path/filepath"
)

func main() {
	dir := flag.String("dir", ".", "the directory of the algorithms package")
	out := flag.String("out", "forms", "the directory, relative to -dir, of the package the forms and their manifest go to")
	flag.Parse()
	files, err := Generate(*dir, *out)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	for path, b := range files {
		p := filepath.Join(*dir, path)
		if old, err := os.ReadFile(p); err == nil && bytes.Equal(old, b) {
			continue
		}
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		if err := os.WriteFile(p, b, 0o644); err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
	}
}

// Generate returns the files to write under dir, the algorithms package,
// keyed by their path relative to it: under out (the store authors'
// package, algorithms/forms; "" for dir itself), lua/<name>.lua and
// sql/<name>.sql for every form, the composite forms lua/all.lua and
// sql/all.sql, and the Go manifest of them all (manifestFile) in the
// package named after out (dir's own package for "").
func Generate(dir, out string) (map[string][]byte, error) {
	files, err := generate(dir, out)
	if err != nil || out == "" {
		return files, err
	}
	moved := make(map[string][]byte, len(files))
	for p, b := range files {
		moved[filepath.Join(out, p)] = b
	}
	return moved, nil
}

func generate(dir, outDir string) (map[string][]byte, error) {
	forms, err := load(dir)
	if err != nil {
		return nil, err
	}
	out := map[string][]byte{}
	defs := map[string][]string{} // the functions each SQL file defines
	for _, f := range forms {
		out[filepath.Join("lua", f.name+".lua")] = []byte(Lua(f))
		out[filepath.Join("lua", "many", f.name+".lua")] = []byte(LuaMany(f))
		sql, d, err := SQL(f)
		if err != nil {
			return nil, err
		}
		p := filepath.Join("sql", f.name+".sql")
		out[p], defs[p] = []byte(sql), d
	}
	parts, err := readHandParts(dir)
	if err != nil {
		return nil, err
	}
	out[filepath.Join("lua", "all.lua")] = []byte(LuaAll(forms, parts))
	out[filepath.Join("lua", "many", "all.lua")] = []byte(LuaManyAll(forms, parts))
	out[filepath.Join("sql", "all.sql")] = []byte(SQLAll(forms, parts))
	defs[filepath.Join("sql", "all.sql")] = sqlAllDefines
	hand, err := addHandWrittenSQL(dir, out, defs)
	if err != nil {
		return nil, err
	}
	versioned := versionSQL(out, defs)
	pkg := forms[0].pkg
	if outDir != "" {
		pkg = filepath.Base(outDir)
	}
	if out[manifestFile], err = Manifest(pkg, forms, hand, parts, versioned); err != nil {
		return nil, err
	}
	return out, nil
}

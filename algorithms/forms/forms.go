// Package forms is the store author's side of package algorithms, as Go
// CDK's blob/driver is of blob: what a store needs to run the built-in
// algorithms next to its data, none of which a user composing limits
// calls. It holds the server-side forms, the Lua scripts for Redis and
// Valkey (lua/*.lua) and the PL/pgSQL functions for PostgreSQL
// (sql/*.sql), which internal/formgen generates from the Go forms in
// package algorithms (all but the sliding log's, written by hand); their
// calling conventions and wire constants (lua.go, sql.go); the generated
// manifest of them (manifest.go: names, versions, arities, so that no
// code reads facts back from the forms' text); the built-ins bound to
// their Go types (Builtins, BuiltinOf); and the interfaces a store's fast
// paths type-assert: ServerForm, ToDecider and InPlaceDecider.
//
// A store that runs every algorithm through its atomic Update needs none
// of this; a store that runs server forms binds them by BuiltinOf, never by
// an algorithm's Name.
package forms

//go:generate go run ../internal/formgen -dir ..

import (
	"embed"
	"io/fs"

	"github.com/ratelimitkit/ratelimit/algorithms"
)

//go:embed lua sql
var forms embed.FS

// Lua returns the Lua form of the built-in algorithm with the given name,
// and false when there is none.
func Lua(name string) (string, bool) { return form("lua/" + name + ".lua") }

// ManyLua returns the coalesced Lua form of the built-in algorithm with
// the given name (lua/many/<name>.lua), which decides several requests on
// one key in one run, and false when there is none. lua.go documents its
// calling convention.
func ManyLua(name string) (string, bool) { return form("lua/many/" + name + ".lua") }

// SQL returns the SQL form of the built-in algorithm with the given name,
// and false when there is none.
func SQL(name string) (string, bool) { return form("sql/" + name + ".sql") }

func form(path string) (string, bool) {
	b, err := fs.ReadFile(forms, path)
	if err != nil {
		return "", false
	}
	return string(b), true
}

// CompositeLua returns the composite Lua form (lua/all.lua): the script
// that decides a composite (All) of algorithms whose Lua forms are
// generated, in one call. lua.go documents its calling convention.
func CompositeLua() string { s, _ := form("lua/all.lua"); return s }

// CompositeSQL returns the composite SQL form (sql/all.sql), which defines
// ratelimit_all_<version> (CompositeSQLFunction); sql.go documents its
// calling convention.
func CompositeSQL() string { s, _ := form("sql/all.sql"); return s }

// ServerForm is implemented by the built-in algorithms, which have
// server-side forms (a script for Redis and Valkey, a function for
// PostgreSQL, under lua/ and sql/ in this package, generated from the Go
// form in package algorithms): it gives the numbers a store passes to
// them. A store finds an algorithm's forms by BuiltinOf, by Go type, so a
// user's algorithm that has a ServerArgs method is still run through
// Update.
type ServerForm interface {
	algorithms.Algorithm
	// ServerArgs are the integer parameters passed to the server-side form,
	// in the order the form documents. The returned slice must not be
	// modified.
	ServerArgs() []int64
}

// InPlaceDecider is implemented by algorithms whose state is large enough
// that copying it before every decision would cost more than the decision:
// the built-in sliding log. A store that holds state in its own memory (the
// memory store) calls DecideInPlace on its stored state instead of Decide on
// a copy.
//
// DecideInPlace is Decide with two promises: it writes into state's memory
// only when it returns a nil error and a non-nil Next (a denied request, a
// peek or an error leaves state exactly as it was), and the Next it returns
// is the caller's to keep, whether it shares state's memory (at any offset)
// or was allocated because state had no room to grow. Other stores call
// Decide, which makes the same decisions.
type InPlaceDecider interface {
	algorithms.Algorithm
	DecideInPlace(state []byte, req algorithms.Request) (algorithms.Step, error)
}

// ToDecider is implemented by the built-in algorithms whose state is a few
// integers (all but the sliding log): Decide with the Step's Next and TTL
// and the Decision's fields returned as separate results, so that a store
// deciding in process (the memory store) copies no Step and needs no memory
// of its own to receive the decision (a pointer passed through an interface
// would be moved to the heap), and the results travel in registers (a
// returned Decision would be copied through memory, twice, in moves wider
// than the writes that made it, which stall). The Decision's Parts would
// be nil.
//
// DecideTo makes InPlaceDecider's promises: it writes into state's memory
// only when it returns a nil error and a non-nil next (a denied request, a
// peek or an error leaves state exactly as it was), and a non-nil state
// has room for the next one, which DecideTo then writes there, so that a
// store can decide on the state where it keeps it.
type ToDecider interface {
	algorithms.Algorithm
	DecideTo(state []byte, req algorithms.Request) (next []byte, ttl int64, allowed bool, limit, remaining, retryAfter, resetAfter, delay int64, err error)
}

// CompositeForm returns the names of parts' algorithms and their
// ServerArgs concatenated, as the composite server forms take them (see
// lua.go and sql.go), and false when a part has no generated server form:
// it is not a built-in, or it is the sliding log, whose forms are written
// by hand and keep state the composite forms cannot hold.
func CompositeForm(c algorithms.Composite) (names []string, args []int64, ok bool) {
	for _, p := range c.Parts() {
		b := BuiltinOf(p)
		sf, isSF := p.(ServerForm)
		if b == nil || !isSF || !b.Composable() {
			return nil, nil, false
		}
		names = append(names, b.Name)
		args = append(args, sf.ServerArgs()...)
	}
	return names, args, true
}

// Package forms is the store author's side of package algorithms, as Go
// CDK's blob/driver is of blob: what a store needs to run the built-in
// algorithms next to its data, none of which a user composing limits
// calls. It holds the server-side forms, the Lua scripts for Redis and
// Valkey (lua/*.lua) and the PL/pgSQL functions for PostgreSQL
// (sql/*.sql), which internal/formgen generates from the Go forms in
// package algorithms (all but the sliding log's, written by hand); their
// calling conventions (the sections below) and wire constants; the generated
// manifest of them (manifest.go: names, versions, arities, so that no
// code reads facts back from the forms' text); the built-ins bound to
// their Go types (Builtins, BuiltinOf); and the interfaces a store's fast
// paths type-assert: ServerForm, ToDecider and InPlaceDecider.
//
// A store that runs every algorithm through its atomic Update needs none
// of this; a store that runs server forms binds them by BuiltinOf, never by
// an algorithm's Name.
//
// # Calling conventions
//
// Each form's calling convention is documented on what a store calls it
// with: the Lua forms' on the LuaReplyAllowed constants (go doc
// forms.LuaReplyAllowed), the coalesced Lua forms' on ManyLua, the
// composite Lua form's on CompositeLua; the SQL forms' and their versioned
// names on SQLFunction, the row forms' on SQLRowFunction, the composite
// SQL form's on CompositeSQL.
package forms

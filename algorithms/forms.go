package algorithms

//go:generate go run ./internal/formgen

import (
	"embed"
	"io/fs"
)

//go:embed lua sql
var forms embed.FS

// Lua returns the Lua form of the built-in algorithm with the given name,
// and false when there is none.
func Lua(name string) (string, bool) { return form("lua/" + name + ".lua") }

// ManyLua returns the coalesced Lua form of the built-in algorithm with
// the given name (lua/many/<name>.lua), which decides several requests on
// one key in one run, and false when there is none; ManyLua("all") is the
// composite form's. lua.go documents its calling convention.
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

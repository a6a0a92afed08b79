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

// Package handforms holds a frozen copy of the server-side forms of the
// five scalar algorithms as they were written by hand before
// algorithms/internal/formgen generated them (commit 1a7fb43), so that the
// benchmarks can run the generated forms and the hand-written ones side by
// side, in one process, on the same server. Nothing else uses them, and
// nobody maintains them: they are the baseline the generated forms must
// match.
package handforms

import (
	"embed"
	"io/fs"
)

//go:embed testdata/lua testdata/sql
var files embed.FS

// Names are the algorithms with a frozen hand-written form.
var Names = []string{"fixed_window", "sliding_window", "token_bucket", "leaky_bucket", "gcra"}

// Lua returns the hand-written Lua form of the algorithm name.
func Lua(name string) string { return read("testdata/lua/" + name + ".lua") }

// SQL returns the hand-written SQL form of the algorithm name.
func SQL(name string) string { return read("testdata/sql/" + name + ".sql") }

func read(path string) string {
	b, err := fs.ReadFile(files, path)
	if err != nil {
		panic("handforms: " + err.Error())
	}
	return string(b)
}

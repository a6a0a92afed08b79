//go:build ignore

// apisplit re-applies the call-site renames of issue 21's split of the
// users' API from the store authors' API: every reference to a name that
// moved out of algorithms (to algorithms/forms) or out of lease (to
// lease/leasewire) is rewritten to the new package, in Go code, Go
// comments and Markdown (CHANGELOG.md excepted), and the imports are
// fixed; the forms' old paths (algorithms/lua/, algorithms/sql/,
// algorithms/lua.go, algorithms/sql.go) become algorithms/forms/... in
// prose and in string literals (formgen's generated headers), but not in
// "git show <rev>:path" history; a file's top-level declaration named
// forms (internal/redisengine's map) becomes luaForms. It is idempotent, so
// the lead can run it again after merging branches written before the
// split (bench/ is a module of its own, so it is a second root):
//
//	go run ./internal/apisplit/apisplit.go .
//	(cd bench && go run ../internal/apisplit/apisplit.go .)
//	go generate ./algorithms/...   # formgen's headers, if it changed them
//
// It does not move files or edit the packages that were split; those
// edits are in the commits that made the split.
package main

import (
	"bytes"
	"fmt"
	"go/ast"
	"go/format"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
)

const mod = "github.com/ratelimitkit/ratelimit/"

// move is one package's moved names.
type move struct {
	from, to string // import paths relative to mod
	names    []string
}

var moves = []move{
	{"algorithms", "algorithms/forms", strings.Fields(`
		LuaErrCorrupt LuaFixedArgs LuaReplyAllowed LuaReplyDelay LuaReplyLen LuaReplyLimit
		LuaReplyRemaining LuaReplyResetAfter LuaReplyRetryAfter SQLErrCorrupt
		BuiltinOf Builtins Builtin CompositeForm CompositeLua CompositeSQLFunction CompositeSQL
		Lua ManyLua PackLuaArgs SQLFunction SQLRowFunction SQL
		InPlaceDecider ServerForm ToDecider`)},
	{"lease", "lease/leasewire", strings.Fields(`
		Step Request Result Op OpAcquire OpExtend OpRead OpRelease Code OK Held Lost
		Token Runner Lua NamespaceSuffix`)},
	// The store contract left the root package for package store, and the
	// name and key checks its other users shared went internal.
	{"", "store", strings.Fields(`
		Key MaxKeyLen Store UpdateFunc Decider ErrUnsupported ServerClocker
		Entry Exporter Importer ParseKey`)},
	{"", "internal/names", strings.Fields(`CheckKey CheckName`)},
}

// pkgPath returns the import path of p, a path relative to mod ("" for
// the root package).
func pkgPath(p string) string { return strings.TrimSuffix(mod+p, "/") }

// pkgName returns the name of the package at p, relative to mod.
func pkgName(p string) string {
	if p == "" {
		return "ratelimit"
	}
	return p[strings.LastIndex(p, "/")+1:]
}

func main() {
	for _, root := range os.Args[1:] {
		err := filepath.Walk(root, func(path string, info os.FileInfo, err error) error {
			if err != nil {
				return err
			}
			if info.IsDir() {
				if n := info.Name(); path != root && (strings.HasPrefix(n, ".") || n == "testdata") {
					return filepath.SkipDir
				}
				return nil
			}
			switch {
			case strings.HasSuffix(path, ".go") && info.Name() != "apisplit.go":
				return rewriteGo(path)
			case strings.HasSuffix(path, ".md") && info.Name() != "CHANGELOG.md":
				return rewriteText(path)
			}
			return nil
		})
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
	}
}

// textRE returns, for a move, the pattern of its qualified names in prose.
func textRE(m move) *regexp.Regexp {
	from := pkgName(m.from)
	names := append([]string(nil), m.names...)
	sort.Slice(names, func(i, j int) bool { return len(names[i]) > len(names[j]) })
	return regexp.MustCompile(`\b` + from + `\.(` + strings.Join(names, "|") + `)\b`)
}

// goRE matches the old files of the forms' calling conventions and dirRE
// the forms' old folders, in prose, but neither in a historical path ("git
// show <rev>:algorithms/sql/gcra.sql").
var (
	goRE  = regexp.MustCompile(`(^|[^:\w/])algorithms/(lua|sql)\.go\b`)
	dirRE = regexp.MustCompile(`(^|[^:\w/])algorithms/(lua|sql)(/|\b)`)
)

// rewritePaths points old paths in text to the new ones.
func rewritePaths(text []byte) []byte {
	text = goRE.ReplaceAll(text, []byte("${1}algorithms/forms/$2.go"))
	return dirRE.ReplaceAll(text, []byte("${1}algorithms/forms/$2$3"))
}

// rewriteProse applies the moves and the paths to text.
func rewriteProse(text []byte) []byte {
	for _, m := range moves {
		to := pkgName(m.to)
		text = textRE(m).ReplaceAll(text, []byte(to+".$1"))
	}
	return rewritePaths(text)
}

func rewriteText(path string) error {
	b, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	out := rewriteProse(b)
	if bytes.Equal(out, b) {
		return nil
	}
	return os.WriteFile(path, out, 0o644)
}

// collisions renames a file's own declarations that a moved package's
// name would shadow.
var collisions = map[string]string{"forms": "luaForms"}

// usesOrWill reports whether f imports path or an edit adds it.
func usesOrWill(f *ast.File, path string, edits []edit) bool {
	for _, s := range f.Imports {
		if s.Path.Value == strconv.Quote(path) {
			return true
		}
	}
	for _, e := range edits {
		if strings.Contains(e.text, strconv.Quote(path)) {
			return true
		}
	}
	return false
}

type edit struct {
	off, end int
	text     string
}

func rewriteGo(path string) error {
	src, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	fset := token.NewFileSet()
	f, err := parser.ParseFile(fset, path, src, parser.ParseComments)
	if err != nil {
		return err
	}
	var edits []edit
	off := func(p token.Pos) int { return fset.Position(p).Offset }
	for _, m := range moves {
		var spec *ast.ImportSpec
		hasNew := false
		for _, s := range f.Imports {
			p, _ := strconv.Unquote(s.Path.Value)
			switch p {
			case pkgPath(m.from):
				spec = s
			case pkgPath(m.to):
				hasNew = true
			}
		}
		if spec == nil {
			continue
		}
		local := pkgName(m.from)
		if spec.Name != nil {
			local = spec.Name.Name
		}
		newLocal := pkgName(m.to)
		moved := map[string]bool{}
		for _, n := range m.names {
			moved[n] = true
		}
		renamed, kept := 0, 0
		ast.Inspect(f, func(n ast.Node) bool {
			sel, ok := n.(*ast.SelectorExpr)
			if !ok {
				return true
			}
			id, ok := sel.X.(*ast.Ident)
			if !ok || id.Name != local || id.Obj != nil {
				return true
			}
			if moved[sel.Sel.Name] {
				edits = append(edits, edit{off(id.Pos()), off(id.End()), newLocal})
				renamed++
			} else {
				kept++
			}
			return true
		})
		if renamed == 0 {
			continue
		}
		line := pkgPath(m.to)
		switch {
		case hasNew && kept == 0:
			edits = append(edits, edit{off(spec.Pos()), off(spec.End()), ""})
		case hasNew:
		case kept == 0:
			edits = append(edits, edit{off(spec.Pos()), off(spec.End()), strconv.Quote(line)})
		default:
			edits = append(edits, edit{off(spec.End()), off(spec.End()), "\n" + strconv.Quote(line)})
		}
	}
	// A file that now uses a new package and declares, at the top level,
	// something of the package's name (internal/redisengine's var forms)
	// renames its own. A local of that name only shadows the package where
	// it is declared, and compiles as before.
	for _, m := range moves {
		newLocal := pkgName(m.to)
		to, ok := collisions[newLocal]
		if !ok || !usesOrWill(f, pkgPath(m.to), edits) {
			continue
		}
		ast.Inspect(f, func(n ast.Node) bool {
			if id, ok := n.(*ast.Ident); ok && id.Name == newLocal && id.Obj != nil && id.Obj == f.Scope.Lookup(newLocal) {
				edits = append(edits, edit{off(id.Pos()), off(id.End()), to})
			}
			return true
		})
	}
	// String literals: the forms' paths in the text formgen writes.
	ast.Inspect(f, func(n ast.Node) bool {
		if lit, ok := n.(*ast.BasicLit); ok && lit.Kind == token.STRING {
			if text := string(rewritePaths([]byte(lit.Value))); text != lit.Value {
				edits = append(edits, edit{off(lit.Pos()), off(lit.End()), text})
			}
		}
		return true
	})
	// Comments: qualified names in prose.
	for _, cg := range f.Comments {
		for _, c := range cg.List {
			text := rewriteProse([]byte(c.Text))
			if string(text) != c.Text {
				edits = append(edits, edit{off(c.Pos()), off(c.End()), string(text)})
			}
		}
	}
	if len(edits) == 0 {
		return nil
	}
	sort.Slice(edits, func(i, j int) bool { return edits[i].off > edits[j].off })
	out := append([]byte(nil), src...)
	for _, e := range edits {
		out = append(out[:e.off], append([]byte(e.text), out[e.end:]...)...)
	}
	formatted, err := format.Source(out)
	if err != nil {
		return fmt.Errorf("%s: %v", path, err)
	}
	fmt.Println("rewrote", path)
	return os.WriteFile(path, formatted, 0o644)
}

// Package apicheck keeps the SDK's exported API in a checked-in listing,
// api/api.txt at the repository's top, as Go keeps api/go1.*.txt: its test
// lists every exported identifier of every public package in the tree (the
// SDK's module and the adapter modules beside it, not internal/, cmd/,
// examples/ or bench/) and fails when the listing differs, so a change of
// surface is always a diff somebody reads.
//
// After a deliberate change of API, regenerate the listing by running this
// package's test with the -update flag, and commit it with the change.
package apicheck

import (
	"bufio"
	"bytes"
	"fmt"
	"go/ast"
	"go/parser"
	"go/printer"
	"go/token"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"
)

// skipDir reports whether the walk leaves out the directory named name:
// packages no user imports (internal/, the command, the examples), the
// benchmarks' own module, test data and npm's files.
func skipDir(name string) bool {
	switch name {
	case "internal", "cmd", "examples", "bench", "testdata", "node_modules", "scripts", "docs", "api":
		return true
	}
	return strings.HasPrefix(name, ".") || strings.HasPrefix(name, "_")
}

// Listing returns the exported API of every public package under root, one
// declaration a line, sorted, in the form of Go's api files:
//
//	pkg github.com/ratelimitkit/ratelimit, func New(Store, algorithms.Algorithm, ...Option) (*Limiter, error)
//
// Types are written as the source writes them (qualified by the package
// names the file imports); parameter names are left out.
func Listing(root string) ([]string, error) {
	var lines []string
	seen := map[string]bool{}
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if !d.IsDir() {
			return nil
		}
		if path != root && skipDir(d.Name()) {
			return filepath.SkipDir
		}
		pkgPath, err := importPath(root, path)
		if err != nil {
			return err
		}
		found, err := packageAPI(path, pkgPath)
		if err != nil {
			return err
		}
		for _, l := range found {
			if !seen[l] {
				seen[l] = true
				lines = append(lines, l)
			}
		}
		return nil
	})
	sort.Strings(lines)
	return lines, err
}

// importPath returns the import path of the package in dir: the module path
// of the nearest go.mod at or above dir (up to root), and dir's path below it.
func importPath(root, dir string) (string, error) {
	for d := dir; ; d = filepath.Dir(d) {
		data, err := os.ReadFile(filepath.Join(d, "go.mod"))
		if err == nil {
			mod := modulePath(data)
			if mod == "" {
				return "", fmt.Errorf("apicheck: %s/go.mod has no module line", d)
			}
			rel, err := filepath.Rel(d, dir)
			if err != nil {
				return "", err
			}
			if rel == "." {
				return mod, nil
			}
			return mod + "/" + filepath.ToSlash(rel), nil
		}
		if d == root || d == filepath.Dir(d) {
			return "", fmt.Errorf("apicheck: no go.mod at or above %s", dir)
		}
	}
}

func modulePath(gomod []byte) string {
	sc := bufio.NewScanner(bytes.NewReader(gomod))
	for sc.Scan() {
		if f := strings.Fields(sc.Text()); len(f) == 2 && f[0] == "module" {
			return strings.Trim(f[1], `"`)
		}
	}
	return ""
}

// packageAPI lists the exported declarations of the non-test Go files in
// dir, a package with import path pkgPath; nothing for package main.
func packageAPI(dir, pkgPath string) ([]string, error) {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil, err
	}
	fset := token.NewFileSet()
	var lines []string
	for _, e := range entries {
		name := e.Name()
		if e.IsDir() || !strings.HasSuffix(name, ".go") || strings.HasSuffix(name, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(fset, filepath.Join(dir, name), nil, parser.SkipObjectResolution)
		if err != nil {
			return nil, err
		}
		if f.Name.Name == "main" {
			return nil, nil
		}
		w := writer{fset: fset, prefix: "pkg " + pkgPath + ", "}
		for _, decl := range f.Decls {
			w.decl(decl)
		}
		lines = append(lines, w.lines...)
	}
	return lines, nil
}

// writer turns one file's declarations into listing lines.
type writer struct {
	fset   *token.FileSet
	prefix string
	lines  []string
}

func (w *writer) add(format string, args ...any) {
	w.lines = append(w.lines, w.prefix+fmt.Sprintf(format, args...))
}

func (w *writer) decl(decl ast.Decl) {
	switch d := decl.(type) {
	case *ast.FuncDecl:
		w.funcDecl(d)
	case *ast.GenDecl:
		var lastType ast.Expr // a const group's type carries down (iota)
		for _, spec := range d.Specs {
			switch s := spec.(type) {
			case *ast.TypeSpec:
				w.typeSpec(s)
			case *ast.ValueSpec:
				if s.Type != nil || len(s.Values) > 0 {
					lastType = s.Type
				}
				typ := s.Type
				if d.Tok == token.CONST && typ == nil {
					typ = lastType
				}
				for _, n := range s.Names {
					if !n.IsExported() {
						continue
					}
					if typ != nil {
						w.add("%s %s %s", d.Tok, n.Name, w.expr(typ))
					} else {
						w.add("%s %s", d.Tok, n.Name)
					}
				}
			}
		}
	}
}

func (w *writer) funcDecl(d *ast.FuncDecl) {
	if !d.Name.IsExported() {
		return
	}
	if d.Recv == nil {
		w.add("func %s%s", d.Name.Name, w.signature(d.Type))
		return
	}
	recv := d.Recv.List[0].Type
	base := recv
	if star, ok := base.(*ast.StarExpr); ok {
		base = star.X
	}
	if idx, ok := base.(*ast.IndexExpr); ok {
		base = idx.X
	}
	if id, ok := base.(*ast.Ident); !ok || !id.IsExported() {
		return
	}
	w.add("method (%s) %s%s", w.expr(recv), d.Name.Name, w.signature(d.Type))
}

func (w *writer) typeSpec(s *ast.TypeSpec) {
	if !s.Name.IsExported() {
		return
	}
	name := s.Name.Name
	if s.Assign.IsValid() {
		w.add("type %s = %s", name, w.expr(s.Type))
		return
	}
	switch t := s.Type.(type) {
	case *ast.StructType:
		w.add("type %s struct", name)
		for _, f := range t.Fields.List {
			if len(f.Names) == 0 { // embedded
				if ast.IsExported(embeddedName(f.Type)) {
					w.add("type %s struct, embedded %s", name, w.expr(f.Type))
				}
				continue
			}
			for _, n := range f.Names {
				if n.IsExported() {
					w.add("type %s struct, %s %s", name, n.Name, w.expr(f.Type))
				}
			}
		}
	case *ast.InterfaceType:
		w.add("type %s interface", name)
		for _, m := range t.Methods.List {
			if len(m.Names) == 0 {
				w.add("type %s interface, embedded %s", name, w.expr(m.Type))
				continue
			}
			for _, n := range m.Names {
				if n.IsExported() {
					w.add("type %s interface, %s%s", name, n.Name, w.signature(m.Type.(*ast.FuncType)))
				} else {
					w.add("type %s interface, unexported methods", name)
				}
			}
		}
	default:
		w.add("type %s %s", name, w.expr(s.Type))
	}
}

// embeddedName is the type name of an embedded field.
func embeddedName(e ast.Expr) string {
	switch t := e.(type) {
	case *ast.StarExpr:
		return embeddedName(t.X)
	case *ast.SelectorExpr:
		return t.Sel.Name
	case *ast.Ident:
		return t.Name
	case *ast.IndexExpr:
		return embeddedName(t.X)
	}
	return ""
}

// signature writes a function type's parameters and results without names.
func (w *writer) signature(ft *ast.FuncType) string {
	s := "(" + w.fields(ft.Params) + ")"
	if ft.Results == nil || len(ft.Results.List) == 0 {
		return s
	}
	res := w.fields(ft.Results)
	if len(ft.Results.List) == 1 && len(ft.Results.List[0].Names) <= 1 {
		return s + " " + res
	}
	return s + " (" + res + ")"
}

func (w *writer) fields(fl *ast.FieldList) string {
	if fl == nil {
		return ""
	}
	var parts []string
	for _, f := range fl.List {
		n := max(len(f.Names), 1)
		for range n {
			parts = append(parts, w.expr(f.Type))
		}
	}
	return strings.Join(parts, ", ")
}

// expr prints a type expression on one line.
func (w *writer) expr(e ast.Expr) string {
	if ft, ok := e.(*ast.FuncType); ok {
		return "func" + w.signature(ft)
	}
	var b bytes.Buffer
	if err := printer.Fprint(&b, w.fset, e); err != nil {
		return fmt.Sprintf("<%v>", err)
	}
	return strings.Join(strings.Fields(b.String()), " ")
}

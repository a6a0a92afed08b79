package doccheck

import (
	"go/ast"
	"go/doc"
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// seeSection matches a doc comment's pointer to a section by its title:
// "see Versioned functions above".
var seeSection = regexp.MustCompile(`\b[Ss]ee ([A-Z][A-Za-z]*(?: [a-z]+)*) (above|below)\b`)

// TestDocPointersResolve checks every doc comment go doc shows, in every
// package of the module, for a pointer to a section by its title ("see
// Versioned functions above"): go doc shows only the package doc's
// headings, so the title must be one of them. A pointer into a comment
// that is no doc comment (a block between declarations) sends the reader
// to text go doc never shows.
func TestDocPointersResolve(t *testing.T) {
	root := filepath.Join("..", "..")
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if !d.IsDir() {
			return nil
		}
		if n := d.Name(); path != root && (strings.HasPrefix(n, ".") || n == "testdata" || n == "node_modules") {
			return filepath.SkipDir
		}
		checkDocPointers(t, root, path)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

func checkDocPointers(t *testing.T, root, dir string) {
	t.Helper()
	fset := token.NewFileSet()
	pkgs, err := parser.ParseDir(fset, dir, func(fi fs.FileInfo) bool {
		return !strings.HasSuffix(fi.Name(), "_test.go")
	}, parser.ParseComments)
	if err != nil {
		if os.IsNotExist(err) {
			return
		}
		t.Fatal(err)
	}
	rel, _ := filepath.Rel(root, dir)
	for _, p := range pkgs {
		files := make([]*ast.File, 0, len(p.Files))
		for _, f := range p.Files {
			files = append(files, f)
		}
		dp, err := doc.NewFromFiles(fset, files, "example.com/"+p.Name)
		if err != nil {
			t.Fatal(err)
		}
		headings := map[string]bool{}
		for _, l := range strings.Split(dp.Doc, "\n") {
			if h, ok := strings.CutPrefix(l, "# "); ok {
				headings[strings.TrimSpace(h)] = true
			}
		}
		check := func(what, text string) {
			for _, m := range seeSection.FindAllStringSubmatch(text, -1) {
				if !headings[m[1]] {
					t.Errorf("%s: the doc of %s points to %q, which is no heading of the package doc: go doc never shows it", rel, what, m[0])
				}
			}
		}
		check("the package", dp.Doc)
		for _, v := range append(dp.Consts, dp.Vars...) {
			check(strings.Join(v.Names, ", "), v.Doc)
		}
		for _, f := range dp.Funcs {
			check(f.Name, f.Doc)
		}
		for _, ty := range dp.Types {
			check(ty.Name, ty.Doc)
			for _, v := range append(ty.Consts, ty.Vars...) {
				check(strings.Join(v.Names, ", "), v.Doc)
			}
			for _, f := range append(ty.Funcs, ty.Methods...) {
				check(ty.Name+"."+f.Name, f.Doc)
			}
		}
	}
}

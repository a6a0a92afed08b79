package doccheck

import (
	"go/ast"
	"go/doc"
	"go/parser"
	"go/token"
	"io/fs"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/ratelimitkit/ratelimit/store/dynamo"
	"github.com/ratelimitkit/ratelimit/store/memory"
	"github.com/ratelimitkit/ratelimit/store/postgres"
	rlredis "github.com/ratelimitkit/ratelimit/store/redis"
	rlvalkey "github.com/ratelimitkit/ratelimit/store/valkey"
)

// TestStoreMethodsDocumented checks that every exported method of each
// built-in store's type is one go doc shows, with a doc comment: a method
// promoted from an unexported embedded type (the shared engine under an
// unexported name) is in the method set, but `go doc ./store/redis
// Store.Decide` answers "no method or field" for it.
func TestStoreMethodsDocumented(t *testing.T) {
	for _, c := range []struct {
		dir string // relative to the repository root
		typ reflect.Type
	}{
		{"store/redis", reflect.TypeFor[*rlredis.Store]()},
		{"store/valkey", reflect.TypeFor[*rlvalkey.Store]()},
		{"store/memory", reflect.TypeFor[*memory.Store]()},
		{"store/postgres", reflect.TypeFor[*postgres.Store]()},
		{"store/dynamo", reflect.TypeFor[*dynamo.Store]()},
	} {
		documented := declaredMethods(t, filepath.Join("..", "..", c.dir), c.typ.Elem().Name())
		for i := range c.typ.NumMethod() {
			m := c.typ.Method(i).Name
			d, ok := documented[m]
			switch {
			case !ok:
				t.Errorf("go doc ./%s %s.%s: no method or field (the method is promoted from an embedded type go doc does not show): declare it with a doc comment", c.dir, c.typ.Elem().Name(), m)
			case strings.TrimSpace(d) == "":
				t.Errorf("go doc ./%s %s.%s: the method has no doc comment", c.dir, c.typ.Elem().Name(), m)
			}
		}
	}
}

// declaredMethods returns the methods go doc lists for the type named typ
// in the package in dir, with their doc comments.
func declaredMethods(t *testing.T, dir, typ string) map[string]string {
	t.Helper()
	fset := token.NewFileSet()
	pkgs, err := parser.ParseDir(fset, dir, func(fi fs.FileInfo) bool {
		return !strings.HasSuffix(fi.Name(), "_test.go")
	}, parser.ParseComments)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]string{}
	for _, p := range pkgs {
		files := make([]*ast.File, 0, len(p.Files))
		for _, f := range p.Files {
			files = append(files, f)
		}
		dp, err := doc.NewFromFiles(fset, files, "example.com/"+p.Name)
		if err != nil {
			t.Fatal(err)
		}
		for _, ty := range dp.Types {
			if ty.Name != typ {
				continue
			}
			for _, m := range ty.Methods {
				out[m.Name] = m.Doc
			}
		}
	}
	return out
}

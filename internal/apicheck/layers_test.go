package apicheck

import (
	"go/parser"
	"go/token"
	"io/fs"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// rootPath is the users' package, which the driver side must not import.
const rootPath = "github.com/ratelimitkit/ratelimit"

// driverSide are the directories, relative to the repository's top, whose
// non-test Go files depend on the store contract (store, algorithms,
// algorithms/forms, lease/leasewire) and never on package ratelimit, as no
// database/sql driver imports database/sql. store is walked whole, so a new
// store is held to the rule without being added here.
var driverSide = []string{"store", "lease/leasewire", "internal/redisengine", "statefile"}

// harness are directories under driverSide that hold test harnesses, not
// stores: they build Limiters to drive a store, as gocloud.dev's
// pubsub/drivertest imports pubsub, and so import the root.
var harness = map[string]bool{
	"internal/redisengine/storetest": true,
}

// TestDriverSideImportsNoRoot fails when a store, the lease wire protocol,
// the Redis engine or statefile imports package ratelimit in a non-test
// file: what they share with the users' package (the error values) lives
// in package store or algorithms, and package ratelimit aliases it.
func TestDriverSideImportsNoRoot(t *testing.T) {
	top := filepath.Join("..", "..")
	importers := map[string][]string{} // directory -> files importing the root
	seen := map[string]bool{}
	for _, dir := range driverSide {
		err := filepath.WalkDir(filepath.Join(top, dir), func(path string, d fs.DirEntry, err error) error {
			if err != nil {
				return err
			}
			if d.IsDir() {
				if name := d.Name(); name == "testdata" || strings.HasPrefix(name, ".") || strings.HasPrefix(name, "_") {
					return filepath.SkipDir
				}
				return nil
			}
			if !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
				return nil
			}
			rel, err := filepath.Rel(top, filepath.Dir(path))
			if err != nil {
				return err
			}
			rel = filepath.ToSlash(rel)
			if harness[rel] {
				return nil
			}
			seen[rel] = true
			f, err := parser.ParseFile(token.NewFileSet(), path, nil, parser.ImportsOnly)
			if err != nil {
				return err
			}
			for _, imp := range f.Imports {
				if p, _ := strconv.Unquote(imp.Path.Value); p == rootPath {
					importers[rel] = append(importers[rel], filepath.Base(path))
				}
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	for _, want := range []string{"store", "store/memory", "store/redis", "lease/leasewire", "statefile"} {
		if !seen[want] {
			t.Errorf("walked no Go file in %s: the walk is not reading the tree", want)
		}
	}
	for dir, files := range importers {
		t.Errorf("%s imports %s (%s): a driver-side package depends on the store contract only; use store.ErrX or algorithms.ErrX", dir, rootPath, strings.Join(files, ", "))
	}
}

package apicheck

import (
	"flag"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

var update = flag.Bool("update", false, "rewrite api/api.txt from the code")

// listingFile is the checked-in listing, relative to this package.
var listingFile = filepath.Join("..", "..", "api", "api.txt")

// TestAPIListing fails when the exported API differs from api/api.txt, and
// names each added and removed line.
func TestAPIListing(t *testing.T) {
	got, err := Listing(filepath.Join("..", ".."))
	if err != nil {
		t.Fatal(err)
	}
	text := strings.Join(got, "\n") + "\n"
	if *update {
		if err := os.WriteFile(listingFile, []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	data, err := os.ReadFile(listingFile)
	if err != nil {
		t.Fatalf("%v: run go test ./internal/apicheck -update", err)
	}
	want := strings.Split(strings.TrimSuffix(string(data), "\n"), "\n")
	added, removed := diff(want, got)
	for _, l := range added {
		t.Errorf("API added, not in api/api.txt: %s", l)
	}
	for _, l := range removed {
		t.Errorf("API removed, still in api/api.txt: %s", l)
	}
	if t.Failed() {
		t.Log("if the change is deliberate: go test ./internal/apicheck -update, and commit api/api.txt with it")
	}
}

// diff returns the lines of got missing from want, and those of want
// missing from got.
func diff(want, got []string) (added, removed []string) {
	in := func(lines []string) map[string]bool {
		m := make(map[string]bool, len(lines))
		for _, l := range lines {
			m[l] = true
		}
		return m
	}
	w, g := in(want), in(got)
	for _, l := range got {
		if !w[l] {
			added = append(added, l)
		}
	}
	for _, l := range want {
		if !g[l] {
			removed = append(removed, l)
		}
	}
	return added, removed
}

// TestListingCatchesChange proves the listing sees a new exported name, an
// unexported one not, and a changed signature: a package written to a
// temporary module is listed before and after an edit.
func TestListingCatchesChange(t *testing.T) {
	dir := t.TempDir()
	write := func(name, text string) {
		t.Helper()
		if err := os.MkdirAll(filepath.Dir(filepath.Join(dir, name)), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, name), []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write("go.mod", "module example.com/m\n\ngo 1.22\n")
	write("p/p.go", "package p\n\n// T is a type.\ntype T struct{ A int; b int }\n\nfunc (T) M(x int) error { return nil }\nfunc f() {}\n")
	write("internal/q/q.go", "package q\n\nfunc Hidden() {}\n")
	before, err := Listing(dir)
	if err != nil {
		t.Fatal(err)
	}
	wantBefore := []string{
		"pkg example.com/m/p, method (T) M(int) error",
		"pkg example.com/m/p, type T struct",
		"pkg example.com/m/p, type T struct, A int",
	}
	if strings.Join(before, "\n") != strings.Join(wantBefore, "\n") {
		t.Fatalf("listing =\n%s\nwant\n%s", strings.Join(before, "\n"), strings.Join(wantBefore, "\n"))
	}
	write("p/p.go", "package p\n\ntype T struct{ A int64 }\n\nfunc (T) M(x int) error { return nil }\nfunc F() {}\n")
	after, err := Listing(dir)
	if err != nil {
		t.Fatal(err)
	}
	added, removed := diff(before, after)
	if strings.Join(added, "|") != "pkg example.com/m/p, func F()|pkg example.com/m/p, type T struct, A int64" ||
		strings.Join(removed, "|") != "pkg example.com/m/p, type T struct, A int" {
		t.Fatalf("added %q, removed %q", added, removed)
	}
}

package apicheck

import (
	"path/filepath"
	"strings"
	"testing"
)

// budgets are issue 21's limits on the users' packages, counted as
// top-level exported identifiers without methods, struct fields or
// interface methods (as `grep 'ratelimit/<pkg>, ' api/api.txt | grep -v
// 'method\|struct,\|interface,' | wc -l` counts them). Add a package here
// when its budget holds.
var budgets = map[string]int{
	"github.com/ratelimitkit/ratelimit":            35,
	"github.com/ratelimitkit/ratelimit/algorithms": 25,
	"github.com/ratelimitkit/ratelimit/lease":      15,
}

// TestBudgets fails when a users' package exports more top-level names
// than its budget: what a store author needs goes to the package beside it
// (store, algorithms/forms, lease/leasewire).
func TestBudgets(t *testing.T) {
	lines, err := Listing(filepath.Join("..", ".."))
	if err != nil {
		t.Fatal(err)
	}
	count := map[string][]string{}
	for _, l := range lines {
		pkg, decl, ok := strings.Cut(strings.TrimPrefix(l, "pkg "), ", ")
		if !ok || strings.HasPrefix(decl, "method ") || strings.Contains(decl, "struct, ") || strings.Contains(decl, "interface, ") {
			continue
		}
		count[pkg] = append(count[pkg], decl)
	}
	for pkg, max := range budgets {
		if n := len(count[pkg]); n > max {
			t.Errorf("%s exports %d top-level names, over its budget of %d:\n\t%s", pkg, n, max, strings.Join(count[pkg], "\n\t"))
		}
	}
}

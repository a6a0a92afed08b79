package forms_test

import (
	"regexp"
	"testing"
	"time"

	"github.com/ratelimitkit/ratelimit/algorithms"
	"github.com/ratelimitkit/ratelimit/algorithms/forms"
)

// TestRegistry checks every registered algorithm: its name is a valid
// algorithm name, unique, and the one its instances report; BuiltinOf finds
// it from an instance; and it has both server-side forms, so that no store
// silently runs it through Update.
func TestRegistry(t *testing.T) {
	name := regexp.MustCompile(`^[a-z0-9_-]{1,32}$`)
	seen := map[string]bool{}
	for _, b := range forms.Builtins() {
		a := b.New(10, time.Second, 20)
		switch {
		case !name.MatchString(b.Name):
			t.Errorf("registered name %q is not a valid algorithm name", b.Name)
		case seen[b.Name]:
			t.Errorf("%q is registered twice", b.Name)
		case a.Name() != b.Name:
			t.Errorf("%q: its New returns %v, named %q", b.Name, a, a.Name())
		case forms.BuiltinOf(a) != b:
			t.Errorf("%q: BuiltinOf(%v) = %v, want its own entry", b.Name, a, forms.BuiltinOf(a))
		case a.Validate() != nil:
			t.Errorf("%q: New(10, 1s, 20): %v", b.Name, a.Validate())
		}
		seen[b.Name] = true
		sf, ok := a.(forms.ServerForm)
		if !ok || len(sf.ServerArgs()) != b.Args {
			t.Errorf("%q: %v has ServerArgs %v, want %d of them", b.Name, a, sf, b.Args)
		}
		if _, ok := b.Lua(); !ok {
			t.Errorf("%q has no Lua form (lua/%s.lua)", b.Name, b.Name)
		}
		if _, ok := b.SQL(); !ok {
			t.Errorf("%q has no SQL form (sql/%s.sql)", b.Name, b.Name)
		}
	}
	if len(seen) == 0 {
		t.Fatal("no algorithm is registered")
	}
}

// impostor borrows a built-in's name and parameters but decides its own
// way: it must never be taken for the built-in.
type impostor struct{ algorithms.Algorithm }

func (impostor) Name() string { return "gcra" }

func TestBuiltinOfUserAlgorithm(t *testing.T) {
	for _, a := range []algorithms.Algorithm{impostor{algorithms.GCRA(1, time.Second, 1)}, impostor{}} {
		if b := forms.BuiltinOf(a); b != nil {
			t.Errorf("BuiltinOf(%T named %q) = %q, want nil: a user's algorithm is never a built-in", a, a.Name(), b.Name)
		}
	}
}

package statefile

import (
	"fmt"
	"testing"
	"time"

	"github.com/ratelimitkit/ratelimit/algorithms"
	"github.com/ratelimitkit/ratelimit/algorithms/forms"
)

// TestAlgorithmOf checks that a namespace tells the kind of its algorithm,
// composites of built-ins included (whose names are hashes of their
// parts'), and that it says nil for what no built-in or composite of
// built-ins is.
func TestAlgorithmOf(t *testing.T) {
	var algs []algorithms.Algorithm
	for _, b := range forms.Builtins() {
		algs = append(algs, b.New(5, time.Minute, 5))
	}
	algs = append(algs,
		algorithms.All(algorithms.GCRA(10, time.Hour, 10), algorithms.FixedWindow(20, time.Hour)),
		algorithms.All(algorithms.SlidingLog(3, time.Second), algorithms.GCRA(1, time.Second, 1), algorithms.SlidingLog(9, time.Hour)),
		algorithms.All(algorithms.FixedWindow(1, time.Second), algorithms.FixedWindow(2, time.Second), algorithms.FixedWindow(3, time.Second),
			algorithms.FixedWindow(4, time.Second), algorithms.FixedWindow(5, time.Second), algorithms.FixedWindow(6, time.Second),
			algorithms.FixedWindow(7, time.Second), algorithms.TokenBucket(8, time.Second, 8)),
	)
	for _, alg := range algs {
		got := algorithmOf("api:" + alg.Name())
		if got == nil || got.Name() != alg.Name() || fmt.Sprintf("%T", got) != fmt.Sprintf("%T", alg) {
			t.Errorf("algorithmOf(%q) = %v, want one of the kind of %v", "api:"+alg.Name(), got, alg)
			continue
		}
		if c, ok := alg.(algorithms.Composite); ok {
			for i, p := range got.(algorithms.Composite).Parts() {
				if forms.BuiltinOf(p) != forms.BuiltinOf(c.Parts()[i]) {
					t.Errorf("algorithmOf(%q) part %d = %v, want %v", alg.Name(), i+1, p, c.Parts()[i])
				}
			}
		}
	}
	for _, ns := range []string{"api:mine", "api:all-0123456789abcdef", "api:all-invalid", "api:all-", "nocolon", "api:" + algorithms.All(mine{algorithms.GCRA(1, time.Second, 1)}, algorithms.GCRA(1, time.Second, 1)).Name()} {
		if got := algorithmOf(ns); got != nil {
			t.Errorf("algorithmOf(%q) = %v, want nil", ns, got)
		}
	}
}

// mine is a user's own algorithm.
type mine struct{ algorithms.Algorithm }

func (mine) Name() string { return "mine" }

package algorithms_test

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/ratelimitkit/ratelimit"
	"github.com/ratelimitkit/ratelimit/algorithms"
	"github.com/ratelimitkit/ratelimit/store/memory"
)

// named is a built-in under another name: a user's algorithm.
type named struct {
	algorithms.Algorithm
	name string
}

func (n named) Name() string { return n.name }

// TestNameRule holds Algorithm.Name's doc to what ratelimit.New does: 1
// to 64 characters of [A-Za-z0-9_.-] are accepted, capitals included, and
// anything else is refused with ErrInvalidParams.
func TestNameRule(t *testing.T) {
	store, err := memory.New()
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name string
		ok   bool
	}{
		{"Decay", true},
		{strings.Repeat("a", 40), true},
		{strings.Repeat("a", 64), true},
		{"v1.2_beta-3", true},
		{"", false},
		{strings.Repeat("a", 65), false},
		{"a b", false},
		{"a:b", false},
		{"{a}", false},
		{"é", false},
	} {
		_, err := ratelimit.New(store, named{algorithms.GCRA(10, time.Second, 10), c.name})
		if c.ok && err != nil {
			t.Errorf("ratelimit.New with an algorithm named %q: %v, want accepted", c.name, err)
		}
		if !c.ok && !errors.Is(err, ratelimit.ErrInvalidParams) {
			t.Errorf("ratelimit.New with an algorithm named %q: %v, want ErrInvalidParams", c.name, err)
		}
	}
}

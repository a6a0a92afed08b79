package algorithms_test

import (
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/ratelimitkit/ratelimit/algorithms"
	"github.com/ratelimitkit/ratelimit/algorithms/forms"
)

func TestDivide(t *testing.T) {
	const s = time.Second
	cases := []struct {
		alg  algorithms.Algorithm
		n    int64
		want string // the divided algorithm's String
	}{
		{algorithms.FixedWindow(100, s), 3, "FixedWindow(limit=33, period=1s)"},
		{algorithms.SlidingLog(10, s), 4, "SlidingLog(limit=2, period=1s)"},
		{algorithms.SlidingWindow(10, time.Minute), 20, "SlidingWindow(limit=1, period=1m0s)"}, // never below 1
		{algorithms.TokenBucket(100, s, 20), 3, "TokenBucket(limit=33, period=1s, burst=6)"},
		{algorithms.LeakyBucket(100, s, 20), 3, "LeakyBucket(limit=33, period=1s, capacity=6)"},
		{algorithms.GCRA(100, time.Minute, 20), 4, "GCRA(limit=25, period=1m0s, burst=5)"},
		{algorithms.GCRA(100, time.Minute, 20), 1, "GCRA(limit=100, period=1m0s, burst=20)"},
	}
	for _, c := range cases {
		d, err := algorithms.Divide(c.alg, c.n)
		if err != nil {
			t.Errorf("Divide(%v, %d): %v", c.alg, c.n, err)
			continue
		}
		if got := fmt.Sprint(d); got != c.want || d.Name() != c.alg.Name() {
			t.Errorf("Divide(%v, %d) = %s (%s), want %s", c.alg, c.n, got, d.Name(), c.want)
		}
	}
}

// halves is a user's algorithm that knows how to divide itself.
type halves struct{ algorithms.Algorithm }

func (h halves) Divide(n int64) algorithms.Algorithm { return algorithms.FixedWindow(7, time.Second) }

// opaque is a user's algorithm that does not.
type opaque struct{ algorithms.Algorithm }

func TestDivideRejects(t *testing.T) {
	gcra := algorithms.GCRA(10, time.Second, 5)
	if _, err := algorithms.Divide(gcra, 0); !errors.Is(err, algorithms.ErrInvalidParams) {
		t.Errorf("Divide(gcra, 0) error = %v, want ErrInvalidParams", err)
	}
	if _, err := algorithms.Divide(opaque{gcra}, 2); !errors.Is(err, algorithms.ErrInvalidParams) {
		t.Errorf("Divide(an algorithm that is not Divisible, 2) error = %v, want ErrInvalidParams", err)
	}
	d, err := algorithms.Divide(halves{gcra}, 2)
	if err != nil || fmt.Sprint(d) != "FixedWindow(limit=7, period=1s)" {
		t.Errorf("Divide(a Divisible algorithm, 2) = %v, %v; want its own Divide's answer", d, err)
	}
}

// TestEveryBuiltinDivides keeps Divide in step with the registry: a new
// built-in algorithm must divide too.
func TestEveryBuiltinDivides(t *testing.T) {
	for _, b := range forms.Builtins() {
		alg := b.New(10, time.Second, 10)
		d, err := algorithms.Divide(alg, 2)
		if err != nil || d.Name() != b.Name || d.MaxCost() != 5 {
			t.Errorf("Divide(%v, 2) = %v, %v; want the same algorithm with a max cost of 5", alg, d, err)
		}
	}
}

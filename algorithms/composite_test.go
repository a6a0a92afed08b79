package algorithms_test

import (
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/ratelimitkit/ratelimit/algorithms"
)

// TestAllInvalid: bad compositions are errors wrapping ErrInvalidParams,
// never panics (rule: bad input gets a clear error).
func TestAllInvalid(t *testing.T) {
	var nilPart *struct{ algorithms.Algorithm }
	many := make([]algorithms.Algorithm, algorithms.MaxParts+1)
	for i := range many {
		many[i] = algorithms.GCRA(1, time.Second, 1)
	}
	for _, c := range []struct {
		name  string
		parts []algorithms.Algorithm
	}{
		{"empty", nil},
		{"nil part", []algorithms.Algorithm{algorithms.GCRA(1, time.Second, 1), nil}},
		{"typed nil part", []algorithms.Algorithm{nilPart}},
		{"nested", []algorithms.Algorithm{algorithms.All(algorithms.GCRA(1, time.Second, 1))}},
		{"bad part", []algorithms.Algorithm{algorithms.FixedWindow(0, time.Second)}},
		{"too many", many},
	} {
		a := algorithms.All(c.parts...)
		err := a.Validate()
		if !errors.Is(err, algorithms.ErrInvalidParams) {
			t.Errorf("%s: Validate() = %v, want ErrInvalidParams", c.name, err)
		}
		if _, err := a.Decide(nil, algorithms.Request{Now: 1, Cost: 1}); err == nil {
			t.Errorf("%s: Decide on an invalid composite succeeded", c.name)
		}
	}
}

// TestAllNoPartialConsumption: a request one limit denies consumes nothing
// from the others, and the decision is the most restrictive view.
func TestAllNoPartialConsumption(t *testing.T) {
	a := algorithms.All(algorithms.FixedWindow(5, time.Second), algorithms.FixedWindow(2, time.Minute))
	var state []byte
	decide := func(cost int64) algorithms.Decision {
		t.Helper()
		st, err := a.Decide(state, algorithms.Request{Now: 1_000_000, Cost: cost})
		if err != nil {
			t.Fatal(err)
		}
		if st.Next != nil {
			state = st.Next
		}
		return st.Decision
	}
	if d := decide(2); !d.Allowed || d.Remaining != 0 || d.Limit != 2 || len(d.Parts) != 2 || d.Parts[0].Remaining != 3 {
		t.Fatalf("first request = %+v, want allowed, remaining 0 of 2, parts' remaining 3 and 0", d)
	}
	d := decide(1)
	if d.Allowed || d.Parts[0].Remaining != 3 || !d.Parts[0].Allowed || d.Parts[1].Allowed || d.RetryAfter != 59_000_000 {
		t.Fatalf("second request = %+v, want denied by the minute limit, the second limit untouched (remaining 3), retry after 59s", d)
	}
	if d := decide(1); d.Parts[0].Remaining != 3 {
		t.Fatalf("after a denial the per-second limit has %d remaining, want 3 (a denial consumes nothing)", d.Parts[0].Remaining)
	}
}

// TestAllCorruptState: state that does not frame as the composite's parts
// is ErrCorruptState.
func TestAllCorruptState(t *testing.T) {
	a := algorithms.All(algorithms.GCRA(1, time.Second, 1), algorithms.FixedWindow(2, time.Minute))
	for _, st := range [][]byte{{1}, make([]byte, 16), make([]byte, 40)} {
		if _, err := a.Decide(st, algorithms.Request{Now: 1, Cost: 1}); !errors.Is(err, algorithms.ErrCorruptState) {
			t.Errorf("Decide(%v) = %v, want ErrCorruptState", st, err)
		}
	}
}

// TestAllDivide: a composite divides part by part, keeping its name (so a
// fallback's state is the composite's kind).
func TestAllDivide(t *testing.T) {
	a := algorithms.All(algorithms.GCRA(10, time.Second, 10), algorithms.FixedWindow(1000, time.Hour))
	d, err := algorithms.Divide(a, 4)
	if err != nil {
		t.Fatal(err)
	}
	if got, want := fmt.Sprint(d), fmt.Sprint(algorithms.All(algorithms.GCRA(2, time.Second, 2), algorithms.FixedWindow(250, time.Hour))); got != want || d.Name() != a.Name() {
		t.Errorf("Divide(%v, 4) = %v (%s), want %v (%s)", a, got, d.Name(), want, a.Name())
	}
}

package algorithms_test

import (
	"encoding/binary"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/ratelimitkit/ratelimit/algorithms"
	"github.com/ratelimitkit/ratelimit/algorithms/forms"
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

// reshapeStep decides one request of cost 1 on state with a, and returns
// the next state (state itself when nothing is written) and the parts'
// remaining.
func reshapeStep(t *testing.T, a algorithms.Algorithm, state []byte, now int64, peek bool) ([]byte, []int64) {
	t.Helper()
	st, err := a.Decide(state, algorithms.Request{Now: now, Cost: 1, Peek: peek})
	if err != nil {
		t.Fatalf("%v: Decide: %v", a, err)
	}
	var rem []int64
	for _, p := range st.Decision.Parts {
		rem = append(rem, p.Remaining)
	}
	if st.Next != nil {
		return st.Next, rem
	}
	return state, rem
}

// TestAllPartsKeepState: a composite keeps each part's state under the
// part's name, so that on one state a part added starts fresh while the
// others keep their counts, reordered parts keep theirs, a part removed is
// dropped and the rest keep theirs, a part whose numbers change keeps its
// state, and a Named part keeps its state when its period changes.
func TestAllPartsKeepState(t *testing.T) {
	const now = 1_000_000_000_000
	const sec, hour, day = time.Second, time.Hour, 24 * time.Hour
	gcra, window, monthly := algorithms.GCRA(10, sec, 10), algorithms.FixedWindow(15, hour), algorithms.FixedWindow(100, 30*day)
	var state []byte
	var rem []int64
	for range 4 {
		state, _ = reshapeStep(t, algorithms.All(gcra, window), state, now, false)
	}
	check := func(what string, got []int64, want ...int64) {
		t.Helper()
		if fmt.Sprint(got) != fmt.Sprint(want) {
			t.Errorf("%s: parts' remaining %v, want %v", what, got, want)
		}
	}
	_, rem = reshapeStep(t, algorithms.All(gcra, window), state, now, true)
	check("after 4 requests", rem, 6, 11)
	state, rem = reshapeStep(t, algorithms.All(gcra, window, monthly), state, now, false)
	check("a monthly part added", rem, 5, 10, 99)
	state, rem = reshapeStep(t, algorithms.All(monthly, window, gcra), state, now, false)
	check("reordered", rem, 98, 9, 4)
	state, rem = reshapeStep(t, algorithms.All(window, monthly), state, now, false)
	check("the GCRA part removed", rem, 8, 97)
	// The removed part's state was carried, unread, by the write without
	// it: put back, it has its count.
	_, rem = reshapeStep(t, algorithms.All(gcra, window, monthly), state, now, true)
	check("the GCRA part back after a write without it", rem, 4, 8, 97)
	_, rem = reshapeStep(t, algorithms.All(algorithms.FixedWindow(30, hour), algorithms.FixedWindow(500, 30*day)), state, now, true)
	check("the windows' limits raised", rem, 23, 497)

	// A named part keeps its state when its period changes.
	named := func(period time.Duration) algorithms.Algorithm {
		return algorithms.All(algorithms.Named("daily", algorithms.FixedWindow(1000, period)), gcra)
	}
	state = nil
	for range 3 {
		state, _ = reshapeStep(t, named(day), state, now, false)
	}
	_, rem = reshapeStep(t, named(2*day), state, now, true)
	check("a named part's period changed", rem, 997, 7)
}

// TestAllIdentity: a composite's Name is "all" whatever its parts, its
// parts are named by their algorithm and period unless Named, two parts of
// one name are invalid, and String lists the parts by name, so that it
// does not change with their order.
func TestAllIdentity(t *testing.T) {
	gcra, window := algorithms.GCRA(10, time.Second, 10), algorithms.FixedWindow(15, 24*time.Hour)
	a, b := algorithms.All(gcra, window), algorithms.All(window, gcra)
	if a.Name() != "all" || b.Name() != "all" {
		t.Errorf("Names %q and %q, want \"all\"", a.Name(), b.Name())
	}
	if got := a.(algorithms.Composite).PartNames(); fmt.Sprint(got) != "[gcra-1s fixed_window-1d]" {
		t.Errorf("PartNames() = %v, want [gcra-1s fixed_window-1d]", got)
	}
	if fmt.Sprint(a) != fmt.Sprint(b) {
		t.Errorf("String of reordered parts differs: %v and %v", a, b)
	}
	if fmt.Sprint(a) == fmt.Sprint(algorithms.All(algorithms.GCRA(11, time.Second, 10), window)) {
		t.Errorf("String %v does not change with a part's numbers", a)
	}
	c := algorithms.All(algorithms.Named("burst", gcra), algorithms.Named("daily", window))
	if got := c.(algorithms.Composite).PartNames(); fmt.Sprint(got) != "[burst daily]" {
		t.Errorf("PartNames() of named parts = %v, want [burst daily]", got)
	}
	ids := forms.PartIDs(c.(algorithms.Composite))
	if forms.PartKind(ids[0]) != "gcra" || forms.PartKind(ids[1]) != "fixed_window" || ids[0] < 0 || ids[0] >= algorithms.MaxExact/2 {
		t.Errorf("PartIDs = %v, kinds %q, %q; want IDs below 2^52 naming gcra and fixed_window", ids, forms.PartKind(ids[0]), forms.PartKind(ids[1]))
	}
	for _, bad := range []algorithms.Algorithm{
		algorithms.All(algorithms.FixedWindow(1, time.Hour), algorithms.FixedWindow(2, time.Hour)),
		algorithms.All(algorithms.Named("x", gcra), algorithms.Named("x", window)),
		algorithms.All(algorithms.Named("", gcra)),
		algorithms.All(algorithms.Named("a b", gcra)),
		algorithms.All(algorithms.Named("a", nil)),
		algorithms.Named("burst", gcra),
	} {
		if err := bad.Validate(); !errors.Is(err, algorithms.ErrInvalidParams) {
			t.Errorf("%v: Validate() = %v, want ErrInvalidParams", bad, err)
		}
	}
	if err := algorithms.All(algorithms.Named("hourly", algorithms.FixedWindow(1, time.Hour)), algorithms.FixedWindow(2, time.Hour)).Validate(); err != nil {
		t.Errorf("two windows of one period, one named: %v", err)
	}
}

// TestAllReadsOldLayout: state written before parts were keyed by name
// (each part by place: expiry, length, state) is read by place, and
// written keyed at the next write.
func TestAllReadsOldLayout(t *testing.T) {
	const now = 1_000_000_000_000
	a := algorithms.All(algorithms.GCRA(10, time.Second, 10), algorithms.FixedWindow(15, time.Hour))
	var keyed []byte
	for range 4 {
		keyed, _ = reshapeStep(t, a, keyed, now, false)
	}
	// The keyed state: -1, then (ID, expiry, length, state) per part; the
	// old layout: (expiry, length, state) per part.
	var old []byte
	for rest := keyed[8:]; len(rest) > 0; {
		n := int(binary.LittleEndian.Uint64(rest[16:]))
		old = append(old, rest[8:24+n]...)
		rest = rest[24+n:]
	}
	next, rem := reshapeStep(t, a, old, now, false)
	if fmt.Sprint(rem) != "[5 10]" {
		t.Errorf("on the old layout's state of 4 requests, a fifth leaves %v, want [5 10]", rem)
	}
	if binary.LittleEndian.Uint64(next) != ^uint64(0) {
		t.Errorf("the state written after the old layout's is not keyed: %v", next)
	}
	if _, err := algorithms.All(algorithms.GCRA(10, time.Second, 10)).Decide(old, algorithms.Request{Now: now, Cost: 1}); !errors.Is(err, algorithms.ErrCorruptState) {
		t.Errorf("the old layout's state of two parts, read by a composite of one: %v, want ErrCorruptState", err)
	}
}

// TestAllKeyedCorrupt: keyed state that does not frame is ErrCorruptState:
// an entry cut short, a repeated ID, a zero length.
func TestAllKeyedCorrupt(t *testing.T) {
	const now = 1_000_000_000_000
	a := algorithms.All(algorithms.FixedWindow(15, time.Hour))
	good, _ := reshapeStep(t, a, nil, now, false)
	entry := good[8:]
	for _, st := range [][]byte{
		good[:len(good)-1],
		append(append([]byte(nil), good...), entry...),
		append(append([]byte(nil), good[:8+16]...), make([]byte, 8)...),
	} {
		if _, err := a.Decide(st, algorithms.Request{Now: now, Cost: 1}); !errors.Is(err, algorithms.ErrCorruptState) {
			t.Errorf("Decide(%v) = %v, want ErrCorruptState", st, err)
		}
	}
}

// BenchmarkAllDecide decides admitted requests on one state with a
// composite of two and of five parts, the Go form's cost per decision
// (the memory store's, and Update's on every store).
func BenchmarkAllDecide(b *testing.B) {
	for _, c := range []struct {
		name string
		alg  algorithms.Algorithm
	}{
		{"two", algorithms.All(algorithms.GCRA(1e6, time.Second, 1e6), algorithms.FixedWindow(1e9, 24*time.Hour))},
		{"five", algorithms.All(algorithms.FixedWindow(1e9, time.Second), algorithms.SlidingWindow(1e9, time.Minute),
			algorithms.TokenBucket(1e6, time.Second, 1e6), algorithms.LeakyBucket(1e6, time.Second, 1e6), algorithms.GCRA(1e6, time.Hour, 1e6))},
	} {
		b.Run(c.name, func(b *testing.B) {
			var state []byte
			now := int64(1_000_000_000_000)
			b.ReportAllocs()
			for b.Loop() {
				now++
				st, err := c.alg.Decide(state, algorithms.Request{Now: now, Cost: 1})
				if err != nil || !st.Decision.Allowed {
					b.Fatalf("Decide: %+v, %v", st.Decision, err)
				}
				state = st.Next
			}
		})
	}
}

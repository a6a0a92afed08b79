package statefile

import (
	"errors"
	"fmt"
	"hash/fnv"
	"testing"
	"time"

	"github.com/ratelimitkit/ratelimit"
	"github.com/ratelimitkit/ratelimit/algorithms"
	"github.com/ratelimitkit/ratelimit/algorithms/forms"
)

// TestAlgorithmOf checks that a namespace tells the kind of its algorithm:
// a built-in by its name; a composite ("<name>:all") by its state, whose
// parts' IDs name their built-ins; a composite of the name of before parts
// were keyed ("all-<hash>", a hash of its parts' names) by that hash; and
// that it says nil for what no built-in or composite of built-ins is.
func TestAlgorithmOf(t *testing.T) {
	const now = 1_000_000_000
	for _, b := range forms.Builtins() {
		alg := b.New(5, time.Minute, 5)
		if got, _, err := algorithmOf("api:"+alg.Name(), nil, now); err != nil || got == nil || fmt.Sprintf("%T", got) != fmt.Sprintf("%T", alg) {
			t.Errorf("algorithmOf(%q) = %v, %v; want one of the kind of %v", "api:"+alg.Name(), got, err, alg)
		}
	}
	for _, alg := range []algorithms.Algorithm{
		algorithms.All(algorithms.GCRA(10, time.Hour, 10), algorithms.FixedWindow(20, time.Hour)),
		algorithms.All(algorithms.SlidingLog(3, time.Second), algorithms.GCRA(1, time.Second, 1), algorithms.SlidingLog(9, time.Hour)),
		algorithms.All(algorithms.FixedWindow(1, time.Second), algorithms.FixedWindow(2, time.Minute), algorithms.FixedWindow(3, time.Hour),
			algorithms.Named("a", algorithms.FixedWindow(4, time.Second)), algorithms.Named("b", algorithms.FixedWindow(5, time.Second)),
			algorithms.Named("c", algorithms.FixedWindow(6, time.Second)), algorithms.FixedWindow(7, 24*time.Hour), algorithms.TokenBucket(8, time.Second, 8)),
	} {
		c := alg.(algorithms.Composite)
		st, err := alg.Decide(nil, algorithms.Request{Now: now, Cost: 1})
		if err != nil || st.Next == nil {
			t.Fatalf("%v: Decide: %v, next %v", alg, err, st.Next)
		}
		got, _, err := algorithmOf("api:all", st.Next, now)
		if err != nil || got == nil {
			t.Errorf("algorithmOf(%q) of %v's state = %v, %v; want a composite of its parts' built-ins", "api:all", alg, got, err)
			continue
		}
		gp := got.(algorithms.Composite).Parts()
		if len(gp) != len(c.Parts()) {
			t.Fatalf("algorithmOf of %v's state has %d parts, want %d", alg, len(gp), len(c.Parts()))
		}
		for i, p := range gp {
			if forms.BuiltinOf(p) != forms.BuiltinOf(c.Parts()[i]) {
				t.Errorf("algorithmOf of %v's state: part %d = %v, want one like %v", alg, i+1, p, c.Parts()[i])
			}
		}
		// The same composite's name of before parts were keyed.
		old := oldName(c)
		got, _, err = algorithmOf("api:"+old, nil, now)
		if err != nil || got == nil || len(got.(algorithms.Composite).Parts()) != len(c.Parts()) {
			t.Errorf("algorithmOf(%q) = %v, %v; want a composite of %d parts", "api:"+old, got, err, len(c.Parts()))
		}
	}
	user := algorithms.All(mine{algorithms.GCRA(1, time.Second, 1)}, algorithms.GCRA(1, time.Second, 1))
	st, err := user.Decide(nil, algorithms.Request{Now: now, Cost: 1})
	if err != nil {
		t.Fatal(err)
	}
	if got, _, err := algorithmOf("api:all", st.Next, now); got != nil || err != nil {
		t.Errorf("algorithmOf(%q) of the state of a composite with a user's part = %v, %v; want nil", "api:all", got, err)
	}
	for _, ns := range []string{"api:mine", "api:all-0123456789abcdef", "api:all-invalid", "api:all-", "nocolon"} {
		if got, _, err := algorithmOf(ns, nil, now); got != nil || err != nil {
			t.Errorf("algorithmOf(%q) = %v, %v; want nil", ns, got, err)
		}
	}
	for _, bad := range [][]byte{{1, 2, 3}, append(le(-1), le(16+5)...), append(append(le(-1), le(16+5)...), append(le(now+1), le(8)...)...)} {
		if _, _, err := algorithmOf("api:all", bad, now); !errors.Is(err, ratelimit.ErrCorruptState) {
			t.Errorf("algorithmOf(%q) of state %v = %v, want ErrCorruptState", "api:all", bad, err)
		}
	}
}

// oldName is the name a composite had before parts were keyed by name:
// "all-" and an FNV-64a hash of its parts' algorithm names, each followed
// by a NUL byte.
func oldName(c algorithms.Composite) string {
	h := fnv.New64a()
	for _, p := range c.Parts() {
		h.Write([]byte(p.Name()))
		h.Write([]byte{0})
	}
	return fmt.Sprintf("all-%016x", h.Sum64())
}

// le is v as a little-endian int64 field.
func le(v int64) []byte {
	b := make([]byte, 8)
	for i := range b {
		b[i] = byte(uint64(v) >> (8 * i))
	}
	return b
}

// mine is a user's own algorithm.
type mine struct{ algorithms.Algorithm }

func (mine) Name() string { return "mine" }

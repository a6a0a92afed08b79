package redisengine

import (
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/ratelimitkit/ratelimit/algorithms"
	"github.com/ratelimitkit/ratelimit/algorithms/forms"
)

// TestCoalesceRuns checks how coalesce splits a batch into calls, without
// a server (the stores' tests hold the runs' outcomes to sequential
// decisions): one run per algorithm and slot, keys with two sets of
// numbers each as its own calls, a decision alone in its run as the single
// form, no two keys together at a negative slot, and at most maxRunKeys
// keys per run.
func TestCoalesceRuns(t *testing.T) {
	e, err := New("test", nil)
	if err != nil {
		t.Fatal(err)
	}
	gA, gB := algorithms.GCRA(5, time.Second, 5), algorithms.GCRA(7, time.Second, 3)
	tb := algorithms.TokenBucket(5, time.Second, 5)
	mk := func(key string, alg algorithms.Algorithm) *pending {
		s, sf := Form(alg)
		c := &pending{}
		c.key[0] = key
		c.args[0], c.args[1], c.args[2], c.args[3] = int64(1), int64(1), argFalse, argTrue
		c.args[5], c.args[4] = e.params(alg, sf.ServerArgs())
		c.Script, c.Keys, c.Args = s, c.key[:], c.args[:forms.LuaFixedArgs+1]
		c.req = algorithms.Request{Now: 1, Cost: 1}
		return c
	}
	batch := []*pending{
		mk("a", gA), mk("b", gB), mk("a", gA), mk("m", gA), mk("c", tb), mk("m", gB), mk("d", gA), mk("lone", tb),
	}
	slotOf := map[string]int{"a": 1, "b": 1, "m": 1, "c": 1, "d": 2, "lone": 3}
	calls, runs := coalesce(batch, func(k string) int { return slotOf[k] })
	// a, b (gcra, slot 1) in one run; m twice alone; c and d and lone each
	// alone in their runs (single forms).
	var got []string
	for _, c := range calls {
		got = append(got, fmt.Sprintf("%s%v", c.Script.Name, c.Keys))
	}
	want := []string{"gcra (many)[a b]", "gcra[m]", "token_bucket[c]", "gcra[m]", "gcra[d]", "token_bucket[lone]"}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("calls %v, want %v", got, want)
	}
	if len(runs) != 1 || len(runs[0].keys) != 2 || len(runs[0].keys[0].members) != 2 || len(runs[0].Args) != 2+3*2 {
		t.Errorf("runs %+v, want one of keys a (2 decisions) and b", runs)
	}

	// A negative slot: no two keys share a run, one key's decisions still do.
	calls, _ = coalesce([]*pending{mk("x", gA), mk("y", gA), mk("x", gA)}, func(string) int { return -1 })
	if len(calls) != 2 || len(calls[0].Keys) != 1 || calls[0].Script.Many != nil || len(calls[1].Keys) != 1 {
		t.Errorf("at a negative slot: %d calls, first %v", len(calls), calls[0].Keys)
	}

	// Many keys: runs of at most maxRunKeys keys.
	var many []*pending
	for i := range 2*maxRunKeys + 1 {
		many = append(many, mk(fmt.Sprint("k", i), gA))
	}
	calls, _ = coalesce(many, func(string) int { return 0 })
	if len(calls) != 3 || len(calls[0].Keys) != maxRunKeys || len(calls[1].Keys) != maxRunKeys || len(calls[2].Keys) != 1 {
		t.Errorf("%d keys: %d calls, want runs of %d, %d and a single call", len(many), len(calls), maxRunKeys, maxRunKeys)
	}
}

// TestSpreadIntReply checks that spread hands a run's reply to its members
// alike whether the client gave it as a []any or as an IntReply: each
// decision its own fields, a key's error item to that key's decisions only,
// and a reply of the wrong shape to each whole, which Ints rejects.
func TestSpreadIntReply(t *testing.T) {
	e, err := New("test", nil)
	if err != nil {
		t.Fatal(err)
	}
	gA := algorithms.GCRA(5, time.Second, 5)
	mk := func(key string) *pending {
		s, sf := Form(gA)
		c := &pending{}
		c.key[0] = key
		c.args[0], c.args[1], c.args[2], c.args[3] = int64(1), int64(1), argFalse, argTrue
		c.args[5], c.args[4] = e.params(gA, sf.ServerArgs())
		c.Script, c.Keys, c.Args, c.Ints = s, c.key[:], c.args[:forms.LuaFixedArgs+1], true
		c.req = algorithms.Request{Now: 1, Cost: 1}
		return c
	}
	// outcome reads a member's outcome as Engine.decide does.
	outcome := func(c *pending) ([]int64, error) {
		f := make([]int64, forms.LuaReplyLen)
		switch {
		case c.Err != nil:
			return nil, c.Err
		case c.ints != nil:
			return f, ints(c.ints, nil, f)
		case c.fields != nil:
			return f, fields(c.fields, f)
		}
		return f, Ints(c.Reply, f)
	}
	const L = forms.LuaReplyLen
	bad := errors.New("CORRUPT gcra state")
	// Keys a (two decisions), b (corrupt), c: 2L fields, one error, L fields.
	var vals []int64
	var items []any
	for i := range 3*L + 1 {
		if i == 2*L {
			vals, items = append(vals, 0), append(items, bad)
			continue
		}
		vals, items = append(vals, int64(1000+i)), append(items, int64(1000+i))
	}
	errs := make([]error, len(vals))
	errs[2*L] = bad
	want := [][]int64{vals[:L], vals[L : 2*L], nil, vals[2*L+1:]}
	for name, reply := range map[string]any{"[]any": items, "IntReply": IntReply{Ints: vals, Errs: errs}} {
		batch := []*pending{mk("a"), mk("b"), mk("a"), mk("c")}
		calls, runs := coalesce(batch, func(string) int { return 0 })
		if len(calls) != 1 || len(runs) != 1 {
			t.Fatalf("%d calls, %d runs: want one run", len(calls), len(runs))
		}
		runs[0].Reply = reply
		runs[0].spread()
		for i, c := range []*pending{batch[0], batch[2], batch[1], batch[3]} {
			got, err := outcome(c)
			if want[i] == nil {
				if err != bad {
					t.Errorf("%s: decision %d on the corrupt key: %v, want its error item", name, i, err)
				}
				continue
			}
			if err != nil || fmt.Sprint(got) != fmt.Sprint(want[i]) {
				t.Errorf("%s: decision %d: %v, %v; want %v", name, i, got, err, want[i])
			}
		}
	}
	// The wrong shape: one field short.
	for name, reply := range map[string]any{"[]any": items[:len(items)-1], "IntReply": IntReply{Ints: vals[:len(vals)-1], Errs: errs[:len(errs)-1]}} {
		batch := []*pending{mk("a"), mk("b"), mk("a"), mk("c")}
		_, runs := coalesce(batch, func(string) int { return 0 })
		runs[0].Reply = reply
		runs[0].spread()
		for i, c := range batch {
			if _, err := outcome(c); err == nil {
				t.Errorf("%s, one field short: decision %d decoded", name, i)
			}
		}
	}
	// Ints on an IntReply: the exact length, no error item.
	f := make([]int64, 2)
	if err := Ints(IntReply{Ints: []int64{1, 2}}, f); err != nil || f[0] != 1 || f[1] != 2 {
		t.Errorf("Ints(IntReply{1, 2}) = %v, %v", f, err)
	}
	if err := Ints(IntReply{Ints: []int64{1, 0}, Errs: []error{nil, bad}}, f); err == nil {
		t.Error("Ints of an IntReply with an error item: no error")
	}
	if err := Ints(IntReply{Ints: []int64{1}}, f); err == nil {
		t.Error("Ints of a short IntReply: no error")
	}
}

// TestNodeForms checks that every algorithm with a coalesced form has its
// node form (node.go), which needs the coalesced form's reply line.
func TestNodeForms(t *testing.T) {
	n := 0
	for _, s := range Forms() {
		if s.Many == nil {
			continue
		}
		n++
		if s.Many.Node == nil {
			t.Errorf("%s has a coalesced form but no node form: its reply does not start with %q", s.Name, manyResult)
		}
	}
	if n == 0 {
		t.Error("no algorithm has a coalesced form")
	}
}

// MaxFlying is maxFlying, for the tests of package redisengine_test.
func MaxFlying() int { return maxFlying }

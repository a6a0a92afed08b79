package main

import (
	"context"
	"encoding/binary"
	"fmt"
	"hash/fnv"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/ratelimitkit/ratelimit"
	"github.com/ratelimitkit/ratelimit/algorithms"
	"github.com/ratelimitkit/ratelimit/statefile"
	"github.com/ratelimitkit/ratelimit/store"
	"github.com/ratelimitkit/ratelimit/store/memory"
)

// compositeRemaining peeks key with a limiter named "plan" of alg on st,
// and returns its parts' remaining and the limiter's namespace.
func compositeRemaining(t *testing.T, st store.Store, alg algorithms.Algorithm, key string) (string, string) {
	t.Helper()
	lim, err := ratelimit.New(st, alg, ratelimit.WithName("plan"))
	if err != nil {
		t.Fatal(err)
	}
	d, err := lim.Peek(context.Background(), key)
	if err != nil {
		t.Fatalf("%T: Peek(%q): %v", st, key, err)
	}
	var rem []int
	for _, l := range d.Limits {
		rem = append(rem, l.Remaining)
	}
	return fmt.Sprint(rem), lim.Namespace()
}

// TestMoveComposite moves a named composite's keys, by its namespace
// "plan:all", memory (a state file) → Redis → PostgreSQL, and then decides
// with parts added and reordered at each destination: every part keeps
// its count and the added one starts fresh (rule: a multi-limit keeps each
// part's state, and its identity is the user's name for it, in state files
// and in move).
func TestMoveComposite(t *testing.T) {
	s := startServers(t)
	ctx := context.Background()
	gcra, window := algorithms.GCRA(10, time.Hour, 10), algorithms.FixedWindow(15, time.Hour)
	monthly := algorithms.FixedWindow(100, 30*24*time.Hour)
	src, err := ratelimit.New(memory.MustNew(), algorithms.All(gcra, window), ratelimit.WithName("plan"))
	if err != nil {
		t.Fatal(err)
	}
	for range 4 {
		if _, err := src.Allow(ctx, "ann"); err != nil {
			t.Fatal(err)
		}
	}
	if src.Namespace() != "plan:all" {
		t.Fatalf("namespace %q, want plan:all", src.Namespace())
	}
	snap := filepath.Join(t.TempDir(), "snap.jsonl")
	f, err := os.Create(snap)
	if err != nil {
		t.Fatal(err)
	}
	exportTo(t, f, src.Store(), src.Namespace())
	f.Close()
	if data, _ := os.ReadFile(snap); !strings.Contains(string(data), `"ns":"plan:all"`) {
		t.Errorf("the state file does not name the namespace plan:all:\n%s", data)
	}
	for _, hop := range []struct{ from, to string }{{"file:" + snap, s.redisURL}, {s.redisURL, s.postgresURL}} {
		if code, out, errOut := runCmd("move", "-from", hop.from, "-to", hop.to, "-namespace", "plan:all"); code != 0 || !strings.Contains(out, "1 keys read, 1 written") {
			t.Fatalf("move -namespace plan:all %s → %s = %d, %q, %q", redact(hop.from), redact(hop.to), code, out, errOut)
		}
	}
	for _, st := range []store.Store{s.redis, s.postgres} {
		got, ns := compositeRemaining(t, st, algorithms.All(monthly, window, gcra), "ann")
		if got != "[100 11 6]" || ns != "plan:all" {
			t.Errorf("%T: after the move, a monthly part added and the parts reordered: remaining %s under %q, want [100 11 6] under plan:all", st, got, ns)
		}
	}
}

// TestMoveCompositeOldNamespace moves the state a composite kept before
// parts were keyed by name (namespace "plan:all-<hash of its parts'
// algorithms>", each part by place) into "plan:all" with -rename, within
// one Redis and from it into PostgreSQL. With -parts the state is keyed
// by part name in the move, so the composite's parts may change at once;
// without it the composite reads the state by place, and once a decision
// of the same parts has rewritten it, parts may change. Either way every
// count is kept and a part added starts fresh (the upgrade the CHANGELOG
// describes).
func TestMoveCompositeOldNamespace(t *testing.T) {
	s := startServers(t)
	ctx := context.Background()
	gcra, window := algorithms.GCRA(10, time.Hour, 10), algorithms.FixedWindow(15, time.Hour)
	monthly := algorithms.FixedWindow(100, 30*24*time.Hour)
	alg := algorithms.All(gcra, window)
	now := time.Now().UnixMicro()
	var keyed []byte
	exp := int64(0)
	for range 4 {
		st, err := alg.Decide(keyed, algorithms.Request{Now: now, Cost: 1})
		if err != nil {
			t.Fatal(err)
		}
		keyed, exp = st.Next, now+st.TTL
	}
	// The same state in the layout of before: (expiry, length, state) by place.
	var old []byte
	for rest := keyed[8:]; len(rest) > 0; {
		n := int(binary.LittleEndian.Uint64(rest[16:]))
		old = append(old, rest[8:24+n]...)
		rest = rest[24+n:]
	}
	h := fnv.New64a()
	for _, p := range alg.(algorithms.Composite).Parts() {
		h.Write([]byte(p.Name()))
		h.Write([]byte{0})
	}
	oldNS := fmt.Sprintf("plan:all-%016x", h.Sum64())
	for _, id := range []string{"ann", "bob"} {
		e := store.Entry{Key: store.Key{Namespace: oldNS, ID: id}, State: old, Expires: exp}
		if wrote, err := statefile.Import(ctx, s.redis, e, time.UnixMicro(now)); !wrote || err != nil {
			t.Fatalf("import of the old layout under %q = %v, %v", oldNS, wrote, err)
		}
	}
	if code, out, errOut := runCmd("move", "-from", s.redisURL, "-to", s.redisURL, "-namespace", oldNS); code == 0 {
		t.Errorf("a move to the same store without -rename succeeded: %q, %q", out, errOut)
	}
	names := strings.Join(alg.(algorithms.Composite).PartNames(), ",") // gcra-1h,fixed_window-1h
	for _, args := range [][]string{
		{"-from", s.redisURL, "-to", s.redisURL, "-namespace", oldNS, "-rename", "plan:all"},
		{"-from", s.redisURL, "-to", s.postgresURL, "-namespace", oldNS, "-rename", "plan:all"},
		{"-from", s.redisURL, "-to", s.redisURL, "-namespace", oldNS, "-rename", "keyed:all", "-parts", names},
		{"-from", s.redisURL, "-to", s.postgresURL, "-namespace", oldNS, "-rename", "keyed:all", "-parts", names},
	} {
		if code, out, errOut := runCmd(append([]string{"move"}, args...)...); code != 0 || !strings.Contains(out, "2 keys read, 2 written") {
			t.Fatalf("move %v = %d, %q, %q", args, code, out, errOut)
		}
	}
	reshaped := algorithms.All(window, monthly, gcra)
	for _, st := range []store.Store{s.redis, s.postgres} {
		// Keyed in the move: the parts change at once.
		keyedLim, err := ratelimit.New(st, reshaped, ratelimit.WithName("keyed"))
		if err != nil {
			t.Fatal(err)
		}
		if d, err := keyedLim.Allow(ctx, "ann"); err != nil || fmt.Sprint(d.Limits[0].Remaining, d.Limits[1].Remaining, d.Limits[2].Remaining) != "10 99 5" {
			t.Errorf("%T: keyed by -parts, a monthly part added and the parts reordered: Allow = %+v, %v; want the parts' remaining 10 99 5", st, d, err)
		}
		// Renamed only: read by place, rewritten keyed by the first
		// decision of the same parts.
		if got, _ := compositeRemaining(t, st, alg, "ann"); got != "[6 11]" {
			t.Errorf("%T: the old layout's state renamed into plan:all: remaining %s, want [6 11]", st, got)
		}
		lim, err := ratelimit.New(st, alg, ratelimit.WithName("plan"))
		if err != nil {
			t.Fatal(err)
		}
		if d, err := lim.Allow(ctx, "ann"); err != nil || !d.Allowed {
			t.Fatalf("%T: Allow after the rename = %+v, %v", st, d, err)
		}
		if got, _ := compositeRemaining(t, st, reshaped, "ann"); got != "[10 100 5]" {
			t.Errorf("%T: a monthly part added after the rename and a decision: remaining %s, want [10 100 5]", st, got)
		}
	}
	for _, args := range [][]string{
		{"-rename", "plan:all"},
		{"-namespace", "plan:all", "-rename", "plan:all"},
		{"-namespace", oldNS, "-rename", "bad name"},
		{"-namespace", oldNS, "-parts", names},
		{"-namespace", "plan:gcra", "-rename", "plan:all", "-parts", names},
	} {
		if _, err := parseMoveFlags(append([]string{"-from", s.redisURL, "-to", s.postgresURL}, args...)); err == nil {
			t.Errorf("move %v: accepted", args)
		}
	}
	if code, _, errOut := runCmd("move", "-from", s.redisURL, "-to", s.postgresURL, "-namespace", oldNS, "-rename", "three:all", "-parts", "a,b,c"); code == 0 || !strings.Contains(errOut, "3 part names for the 2 parts") {
		t.Errorf("move -parts with three names for two parts = %d, %q; want an error", code, errOut)
	}
}

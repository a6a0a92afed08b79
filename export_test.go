package ratelimit_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/ratelimitkit/ratelimit"
	"github.com/ratelimitkit/ratelimit/algorithms"
	"github.com/ratelimitkit/ratelimit/clock"
	"github.com/ratelimitkit/ratelimit/store/memory"
)

// A limiter counts its live keys and exports them; another limiter of the
// same name and algorithm imports them and decides where the first left off.
func ExampleLimiter_Export() {
	ctx := context.Background()
	fake := clock.NewFake(time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC))
	alg := algorithms.GCRA(10, time.Minute, 5)
	from, _ := ratelimit.New(memory.MustNew(), alg, ratelimit.WithName("api"), ratelimit.WithClock(fake))
	for _, user := range []string{"ann", "bob", "ann"} {
		from.Allow(ctx, user)
	}
	n, err := from.Count(ctx)
	fmt.Println("live keys:", n, err)

	var state bytes.Buffer
	n, err = from.Export(ctx, &state)
	fmt.Println("exported:", n, err)

	to, _ := ratelimit.New(memory.MustNew(), alg, ratelimit.WithName("api"), ratelimit.WithClock(fake))
	n, err = to.Import(ctx, &state)
	fmt.Println("imported:", n, err)
	d, _ := to.Peek(ctx, "ann")
	fmt.Println("ann remaining:", d.Remaining)
	// Output:
	// live keys: 2 <nil>
	// exported: 2 <nil>
	// imported: 2 <nil>
	// ann remaining: 3
}

// storeOnly hides every method but the Store contract's.
type storeOnly struct{ ratelimit.Store }

func TestCountUnsupported(t *testing.T) {
	_, err := ratelimit.Count(context.Background(), storeOnly{memory.MustNew()}, "a:gcra", 0)
	if !errors.Is(err, ratelimit.ErrUnsupported) || !strings.Contains(err.Error(), "cannot enumerate") || !strings.Contains(err.Error(), "does not implement ratelimit.Exporter") {
		t.Fatalf("Count on a store without Export = %v, want ErrUnsupported saying why and naming the interface", err)
	}
}

// TestImportRule checks which state wins: the destination's live state is
// kept (a rerun of a move, or decisions made there since, lose nothing), a
// missing or expired one is replaced, and an entry expired by now is not
// written. It runs through Update, on a store that is not an Importer.
func TestImportRule(t *testing.T) {
	ctx := context.Background()
	s := storeOnly{memory.MustNew()}
	key := ratelimit.Key{Namespace: "a:fixed_window", ID: "k"}
	for _, tc := range []struct {
		rule    string
		now     int64
		e       ratelimit.Entry
		wrote   bool
		state   string
		expires int64
	}{
		{"a key with no state takes the entry", 100, ratelimit.Entry{key, []byte("12345678"), 200}, true, "12345678", 200},
		{"a key with live state keeps it", 150, ratelimit.Entry{key, []byte("87654321"), 300}, false, "12345678", 200},
		{"an entry expired by now is skipped", 250, ratelimit.Entry{key, []byte("87654321"), 250}, false, "", 0},
		{"a key whose state expired takes the entry", 250, ratelimit.Entry{key, []byte("87654321"), 400}, true, "87654321", 400},
	} {
		wrote, err := ratelimit.Import(ctx, s, nil, tc.e, tc.now)
		if err != nil || wrote != tc.wrote {
			t.Fatalf("%s: Import at %d = %v, %v; want %v", tc.rule, tc.now, wrote, err, tc.wrote)
		}
		var got []ratelimit.Entry
		ratelimit.Export(ctx, s.Store, "", tc.now, func(e ratelimit.Entry) error { got = append(got, e); return nil })
		switch {
		case tc.state == "" && len(got) != 0:
			t.Errorf("%s: store holds %v, want nothing live", tc.rule, got)
		case tc.state != "" && (len(got) != 1 || string(got[0].State) != tc.state || got[0].Expires != tc.expires):
			t.Errorf("%s: store holds %+v, want state %q expiring at %d", tc.rule, got, tc.state, tc.expires)
		}
	}
}

func TestImportBadEntries(t *testing.T) {
	ctx := context.Background()
	s := memory.MustNew()
	for _, tc := range []struct {
		e    ratelimit.Entry
		want error
	}{
		{ratelimit.Entry{ratelimit.Key{"nocolon", "k"}, []byte("x"), 5}, ratelimit.ErrInvalidKey},
		{ratelimit.Entry{ratelimit.Key{"a:b:c", "k"}, []byte("x"), 5}, ratelimit.ErrInvalidKey},
		{ratelimit.Entry{ratelimit.Key{"a:{b}", "k"}, []byte("x"), 5}, ratelimit.ErrInvalidKey},
		{ratelimit.Entry{ratelimit.Key{"a:b", ""}, []byte("x"), 5}, ratelimit.ErrInvalidKey},
		{ratelimit.Entry{ratelimit.Key{"a:b", strings.Repeat("k", ratelimit.MaxKeyLen+1)}, []byte("x"), 5}, ratelimit.ErrInvalidKey},
		{ratelimit.Entry{ratelimit.Key{"a:b", "k"}, nil, 5}, ratelimit.ErrCorruptState},
		{ratelimit.Entry{ratelimit.Key{"a:b", "k"}, []byte("x"), -1}, ratelimit.ErrCorruptState},
		{ratelimit.Entry{ratelimit.Key{"a:b", "k"}, []byte("x"), algorithms.MaxExact + 1}, ratelimit.ErrCorruptState},
	} {
		if _, err := ratelimit.Import(ctx, s, nil, tc.e, 0); !errors.Is(err, tc.want) {
			t.Errorf("Import(%+v) = %v, want %v", tc.e, err, tc.want)
		}
	}
	if s.Len() != 0 {
		t.Errorf("bad entries left %d keys in the store", s.Len())
	}
}

// TestStateFile checks the format: a round trip keeps binary keys and
// states exactly, an empty export is a valid file, and bad lines are
// errors naming the line.
func TestStateFile(t *testing.T) {
	in := []ratelimit.Entry{
		{ratelimit.Key{"api:gcra", "\x00\xff{}% ü"}, []byte{0, 1, 2, 255}, 1 << 52},
		{ratelimit.Key{"web.v2:sliding_log", "u"}, []byte("0123456789abcdef"), 7},
	}
	var buf bytes.Buffer
	w := ratelimit.NewEntryWriter(&buf)
	for _, e := range in {
		if err := w.Write(e); err != nil {
			t.Fatal(err)
		}
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	full := buf.String()
	var out []ratelimit.Entry
	if err := ratelimit.ReadEntries(&buf, func(e ratelimit.Entry) error { out = append(out, e); return nil }); err != nil {
		t.Fatal(err)
	}
	if fmt.Sprint(out) != fmt.Sprint(in) {
		t.Fatalf("round trip = %v, want %v", out, in)
	}

	buf.Reset()
	ratelimit.NewEntryWriter(&buf).Close()
	if buf.String() != `{"format":"ratelimit-state","version":2}`+"\n"+`{"end":0}`+"\n" {
		t.Errorf("empty export = %q, want the header and the end line alone", buf.String())
	}
	n := 0
	if err := ratelimit.ReadEntries(&buf, func(ratelimit.Entry) error { n++; return nil }); err != nil || n != 0 {
		t.Errorf("reading an empty export = %d entries, %v", n, err)
	}

	const (
		head = `{"format":"ratelimit-state","version":2}` + "\n"
		good = `{"ns":"a:gcra","id":"aw==","state":"AQ==","expires":5}` + "\n"
	)
	lines := strings.SplitAfter(full, "\n")
	for _, tc := range []struct{ rule, file, want string }{
		{"another format", `{"format":"other","version":1}`, "line 1"},
		{"another version", `{"format":"ratelimit-state","version":3}`, "version 3"},
		{"version 1, which had no end line", `{"format":"ratelimit-state","version":1}` + "\n" + good, "version 1"},
		{"no header", good + `{"end":1}`, "line 1: not a ratelimit-state header"},
		{"nothing at all", "", "empty"},
		{"a bad line", head + good + "{", "line 3"},
		{"bad base64", head + `{"ns":"a:gcra","id":"!!","state":"AQ==","expires":5}`, "line 2"},
		{"an unknown field", head + `{"ns":"a:gcra","id":"aw==","state":"AQ==","expires":5,"extra":1}`, "line 2"},
		{"a bad namespace", head + `{"ns":"a","id":"aw==","state":"AQ==","expires":5}`, "line 2"},
		{"no state", head + `{"ns":"a:gcra","id":"aw==","state":"","expires":5}`, "line 2"},
		// Cut at a line boundary, each line parses: only the end line
		// tells.
		{"cut after the first entry", strings.Join(lines[:2], ""), "ends after 1 entries without its end line"},
		{"cut after the header", lines[0], "ends after 0 entries without its end line"},
		{"an end line that miscounts", head + good + `{"end":2}`, "counts 2 entries, the file holds 1"},
		{"a line after the end line", head + `{"end":0}` + "\n" + good, "line 3: a line after the end line"},
	} {
		n := 0
		err := ratelimit.ReadEntries(strings.NewReader(tc.file), func(ratelimit.Entry) error { n++; return nil })
		if !(errors.Is(err, ratelimit.ErrCorruptState) || errors.Is(err, ratelimit.ErrInvalidKey)) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: ReadEntries(%q) = %v, want ErrCorruptState (ErrInvalidKey for a bad key) naming %q", tc.rule, tc.file, err, tc.want)
		}
		if strings.HasPrefix(tc.file, head+good) && n != 1 {
			t.Errorf("%s: ReadEntries(%q) passed %d entries before the fault, want 1", tc.rule, tc.file, n)
		}
	}
}

// TestImportChecksState checks that Import refuses, before writing, an
// entry whose state its algorithm cannot decode, naming the key, and takes
// one it can.
func TestImportChecksState(t *testing.T) {
	ctx := context.Background()
	now := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC).UnixMicro()
	comp := algorithms.All(algorithms.GCRA(10, time.Hour, 10), algorithms.FixedWindow(20, time.Hour))
	good := func(alg algorithms.Algorithm) []byte {
		st, err := alg.Decide(nil, algorithms.Request{Now: now, Cost: 1})
		if err != nil {
			t.Fatal(err)
		}
		return st.Next
	}
	for _, tc := range []struct {
		alg   algorithms.Algorithm
		state []byte
		ok    bool
	}{
		{algorithms.GCRA(10, time.Hour, 10), good(algorithms.GCRA(10, time.Hour, 10)), true},
		{algorithms.GCRA(10, time.Hour, 10), []byte("1234567"), false},
		{algorithms.TokenBucket(10, time.Hour, 10), make([]byte, 24), false}, // unit 0
		{algorithms.SlidingLog(10, time.Hour), good(algorithms.SlidingLog(10, time.Hour)), true},
		{algorithms.SlidingLog(10, time.Hour), make([]byte, 17), false},
		{comp, good(comp), true},
		{comp, good(algorithms.GCRA(10, time.Hour, 10)), false},
	} {
		for _, alg := range []algorithms.Algorithm{tc.alg, ratelimit.AlgorithmOf("api:" + tc.alg.Name())} {
			s := memory.MustNew()
			e := ratelimit.Entry{ratelimit.Key{"api:" + tc.alg.Name(), "user"}, tc.state, now + 1e9}
			wrote, err := ratelimit.Import(ctx, s, alg, e, now)
			if tc.ok && (err != nil || !wrote) {
				t.Errorf("Import of %v state %x = %v, %v; want written", alg, tc.state, wrote, err)
			}
			if !tc.ok && (!errors.Is(err, ratelimit.ErrCorruptState) || !strings.Contains(err.Error(), `"api:`+tc.alg.Name()+`:user"`) || wrote || s.Len() != 0) {
				t.Errorf("Import of %v state %x = %v, %v, %d keys stored; want ErrCorruptState naming the key, nothing written", alg, tc.state, wrote, err, s.Len())
			}
		}
	}
}

// TestAlgorithmOf checks that a namespace tells the kind of its algorithm,
// composites of built-ins included (whose names are hashes of their
// parts'), and that it says nil for what no built-in or composite of
// built-ins is.
func TestAlgorithmOf(t *testing.T) {
	var algs []algorithms.Algorithm
	for _, b := range algorithms.Builtins() {
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
		got := ratelimit.AlgorithmOf("api:" + alg.Name())
		if got == nil || got.Name() != alg.Name() || fmt.Sprintf("%T", got) != fmt.Sprintf("%T", alg) {
			t.Errorf("AlgorithmOf(%q) = %v, want one of the kind of %v", "api:"+alg.Name(), got, alg)
			continue
		}
		if c, ok := alg.(algorithms.Composite); ok {
			for i, p := range got.(algorithms.Composite).Parts() {
				if algorithms.BuiltinOf(p) != algorithms.BuiltinOf(c.Parts()[i]) {
					t.Errorf("AlgorithmOf(%q) part %d = %v, want %v", alg.Name(), i+1, p, c.Parts()[i])
				}
			}
		}
	}
	for _, ns := range []string{"api:mine", "api:all-0123456789abcdef", "api:all-invalid", "api:all-", "nocolon", "api:" + algorithms.All(mine{algorithms.GCRA(1, time.Second, 1)}, algorithms.GCRA(1, time.Second, 1)).Name()} {
		if got := ratelimit.AlgorithmOf(ns); got != nil {
			t.Errorf("AlgorithmOf(%q) = %v, want nil", ns, got)
		}
	}
}

// mine is a user's own algorithm.
type mine struct{ algorithms.Algorithm }

func (mine) Name() string { return "mine" }

func TestLimiterImportOtherNamespace(t *testing.T) {
	ctx := context.Background()
	var buf bytes.Buffer
	w := ratelimit.NewEntryWriter(&buf)
	w.Write(ratelimit.Entry{ratelimit.Key{"other:gcra", "k"}, []byte("12345678"), 1 << 51})
	w.Close()
	lim, _ := ratelimit.New(memory.MustNew(), algorithms.GCRA(1, time.Second, 1), ratelimit.WithName("api"))
	if n, err := lim.Import(ctx, &buf); !errors.Is(err, ratelimit.ErrInvalidKey) || n != 0 {
		t.Fatalf("Import of another namespace's entry = %d, %v; want ErrInvalidKey", n, err)
	}
}

func TestParseKey(t *testing.T) {
	for _, k := range []ratelimit.Key{{"api:gcra", "u"}, {"a.b-c_d:sliding_log", "x:y:z"}, {"a:b", ":"}, {"a:b", "\x00{}"}} {
		if got, ok := ratelimit.ParseKey(k.String()); !ok || got != k {
			t.Errorf("ParseKey(%q) = %+v, %v; want %+v", k.String(), got, ok, k)
		}
	}
	for _, s := range []string{"", "nocolon", "one:colon", "bad name:gcra:k", "a:{b}:k"} {
		if got, ok := ratelimit.ParseKey(s); ok {
			t.Errorf("ParseKey(%q) = %+v, want false", s, got)
		}
	}
}

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
	if !errors.Is(err, ratelimit.ErrUnsupported) || !strings.Contains(err.Error(), "cannot enumerate") {
		t.Fatalf("Count on a store without Export = %v, want ErrUnsupported saying why", err)
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
	if err := w.Flush(); err != nil {
		t.Fatal(err)
	}
	var out []ratelimit.Entry
	if err := ratelimit.ReadEntries(&buf, func(e ratelimit.Entry) error { out = append(out, e); return nil }); err != nil {
		t.Fatal(err)
	}
	if fmt.Sprint(out) != fmt.Sprint(in) {
		t.Fatalf("round trip = %v, want %v", out, in)
	}

	buf.Reset()
	ratelimit.NewEntryWriter(&buf).Flush()
	if buf.String() != `{"format":"ratelimit-state","version":1}`+"\n" {
		t.Errorf("empty export = %q, want the header alone", buf.String())
	}
	n := 0
	if err := ratelimit.ReadEntries(&buf, func(ratelimit.Entry) error { n++; return nil }); err != nil || n != 0 {
		t.Errorf("reading an empty export = %d entries, %v", n, err)
	}

	const good = `{"ns":"a:gcra","id":"aw==","state":"AQ==","expires":5}`
	for _, tc := range []struct{ file, want string }{
		{`{"format":"other","version":1}`, "line 1"},
		{`{"format":"ratelimit-state","version":2}`, "version 2"},
		{good + "\n{", "line 2"},
		{`{"ns":"a:gcra","id":"!!","state":"AQ==","expires":5}`, "line 1"},
		{`{"ns":"a:gcra","id":"aw==","state":"AQ==","expires":5,"extra":1}`, "line 1"},
		{`{"ns":"a","id":"aw==","state":"AQ==","expires":5}`, "line 1"},
		{`{"ns":"a:gcra","id":"aw==","state":"","expires":5}`, "line 1"},
	} {
		n := 0
		err := ratelimit.ReadEntries(strings.NewReader(tc.file), func(ratelimit.Entry) error { n++; return nil })
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("ReadEntries(%q) = %v, want an error naming %q", tc.file, err, tc.want)
		}
		if strings.HasPrefix(tc.file, good) && n != 1 {
			t.Errorf("ReadEntries(%q) passed %d entries before the bad line, want 1", tc.file, n)
		}
	}
}

func TestLimiterImportOtherNamespace(t *testing.T) {
	ctx := context.Background()
	var buf bytes.Buffer
	w := ratelimit.NewEntryWriter(&buf)
	w.Write(ratelimit.Entry{ratelimit.Key{"other:gcra", "k"}, []byte("12345678"), 1 << 51})
	w.Flush()
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

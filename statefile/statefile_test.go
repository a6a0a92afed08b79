package statefile_test

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/fnv"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/ratelimitkit/ratelimit"
	"github.com/ratelimitkit/ratelimit/algorithms"
	"github.com/ratelimitkit/ratelimit/clock"
	"github.com/ratelimitkit/ratelimit/statefile"
	"github.com/ratelimitkit/ratelimit/store"
	"github.com/ratelimitkit/ratelimit/store/memory"
)

// A limiter's keys are exported at shutdown and imported at start, into
// a fresh store, where every user's quota goes on where it stood. A
// bytes.Buffer stands in for the file.
func Example() {
	ctx := context.Background()
	fake := clock.NewFake(time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC))
	alg := algorithms.GCRA(10, time.Minute, 5)
	before, _ := ratelimit.New(memory.MustNew(), alg, ratelimit.WithName("api"), ratelimit.WithClock(fake))
	for _, user := range []string{"ann", "bob", "ann"} {
		before.Allow(ctx, user)
	}
	n, err := statefile.Count(ctx, before.Store(), before.Namespace(), fake.Now())
	fmt.Println("live keys:", n, err)

	// At shutdown: every key of the store (namespace "": all limiters).
	var file bytes.Buffer
	w := statefile.NewWriter(&file)
	err = statefile.Export(ctx, before.Store(), "", fake.Now(), w.Write)
	fmt.Println("exported:", err, w.Close())

	// At start, a second later.
	fake.Advance(time.Second)
	st := memory.MustNew()
	n = 0
	err = statefile.Read(&file, func(e store.Entry) error {
		wrote, err := statefile.Import(ctx, st, e, fake.Now())
		if wrote {
			n++
		}
		return err
	})
	fmt.Println("imported:", n, err)
	after, _ := ratelimit.New(st, alg, ratelimit.WithName("api"), ratelimit.WithClock(fake))
	d, _ := after.Peek(ctx, "ann")
	fmt.Println("ann remaining:", d.Remaining)
	// Output:
	// live keys: 2 <nil>
	// exported: <nil> <nil>
	// imported: 2 <nil>
	// ann remaining: 3
}

// entry returns an entry of key ns, id.
func entry(ns, id string, state []byte, expires int64) store.Entry {
	return store.Entry{Key: store.Key{Namespace: ns, ID: id}, State: state, Expires: expires}
}

// storeOnly hides every method but the Store contract's.
type storeOnly struct{ store.Store }

func TestCountUnsupported(t *testing.T) {
	_, err := statefile.Count(context.Background(), storeOnly{memory.MustNew()}, "a:gcra", time.Now())
	if !errors.Is(err, store.ErrUnsupported) || !strings.Contains(err.Error(), "not a store.Exporter") {
		t.Fatalf("Count on a store without Export = %v, want ErrUnsupported naming the interface", err)
	}
}

// TestImportRule checks which state wins: the destination's live state is
// kept (a rerun of a move, or decisions made there since, lose nothing), a
// missing or expired one is replaced, and an entry expired by now is not
// written. It runs through Update, on a store that is not an Importer.
func TestImportRule(t *testing.T) {
	ctx := context.Background()
	s := storeOnly{memory.MustNew()}
	key := store.Key{Namespace: "a:mine", ID: "k"} // a user's own algorithm: no state check
	for _, tc := range []struct {
		rule    string
		now     int64
		e       store.Entry
		wrote   bool
		state   string
		expires int64
	}{
		{"a key with no state takes the entry", 100, entry(key.Namespace, key.ID, []byte("12345678"), 200), true, "12345678", 200},
		{"a key with live state keeps it", 150, entry(key.Namespace, key.ID, []byte("87654321"), 300), false, "12345678", 200},
		{"an entry expired by now is skipped", 250, entry(key.Namespace, key.ID, []byte("87654321"), 250), false, "", 0},
		{"a key whose state expired takes the entry", 250, entry(key.Namespace, key.ID, []byte("87654321"), 400), true, "87654321", 400},
	} {
		wrote, err := statefile.Import(ctx, s, tc.e, time.UnixMicro(tc.now))
		if err != nil || wrote != tc.wrote {
			t.Fatalf("%s: Import at %d = %v, %v; want %v", tc.rule, tc.now, wrote, err, tc.wrote)
		}
		var got []store.Entry
		statefile.Export(ctx, s.Store, "", time.UnixMicro(tc.now), func(e store.Entry) error { got = append(got, e); return nil })
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
		e    store.Entry
		want error
	}{
		{entry("nocolon", "k", []byte("x"), 5), ratelimit.ErrInvalidKey},
		{entry("a:b:c", "k", []byte("x"), 5), ratelimit.ErrInvalidKey},
		{entry("a:{b}", "k", []byte("x"), 5), ratelimit.ErrInvalidKey},
		{entry("a:b", "", []byte("x"), 5), ratelimit.ErrInvalidKey},
		{entry("a:b", strings.Repeat("k", store.MaxKeyLen+1), []byte("x"), 5), ratelimit.ErrInvalidKey},
		{entry("a:b", "k", nil, 5), ratelimit.ErrCorruptState},
		{entry("a:b", "k", []byte("x"), -1), ratelimit.ErrCorruptState},
		{entry("a:b", "k", []byte("x"), algorithms.MaxExact+1), ratelimit.ErrCorruptState},
	} {
		if _, err := statefile.Import(ctx, s, tc.e, time.UnixMicro(0)); !errors.Is(err, tc.want) {
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
	in := []store.Entry{
		entry("api:gcra", "\x00\xff{}% ü", []byte{0, 1, 2, 255}, 1<<52),
		entry("web.v2:sliding_log", "u", []byte("0123456789abcdef"), 7),
	}
	var buf bytes.Buffer
	w := statefile.NewWriter(&buf)
	for _, e := range in {
		if err := w.Write(e); err != nil {
			t.Fatal(err)
		}
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	full := buf.String()
	var out []store.Entry
	if err := statefile.Read(&buf, func(e store.Entry) error { out = append(out, e); return nil }); err != nil {
		t.Fatal(err)
	}
	if fmt.Sprint(out) != fmt.Sprint(in) {
		t.Fatalf("round trip = %v, want %v", out, in)
	}

	buf.Reset()
	statefile.NewWriter(&buf).Close()
	if buf.String() != `{"format":"ratelimit-state","version":2}`+"\n"+`{"end":0}`+"\n" {
		t.Errorf("empty export = %q, want the header and the end line alone", buf.String())
	}
	n := 0
	if err := statefile.Read(&buf, func(store.Entry) error { n++; return nil }); err != nil || n != 0 {
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
		err := statefile.Read(strings.NewReader(tc.file), func(store.Entry) error { n++; return nil })
		if !(errors.Is(err, ratelimit.ErrCorruptState) || errors.Is(err, ratelimit.ErrInvalidKey)) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: Read(%q) = %v, want ErrCorruptState (ErrInvalidKey for a bad key) naming %q", tc.rule, tc.file, err, tc.want)
		}
		if strings.HasPrefix(tc.file, head+good) && n != 1 {
			t.Errorf("%s: Read(%q) passed %d entries before the fault, want 1", tc.rule, tc.file, n)
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
		s := memory.MustNew()
		e := entry("api:"+tc.alg.Name(), "user", tc.state, now+1e9)
		wrote, err := statefile.Import(ctx, s, e, time.UnixMicro(now))
		if tc.ok && (err != nil || !wrote) {
			t.Errorf("Import of %v state %x = %v, %v; want written", tc.alg, tc.state, wrote, err)
		}
		if !tc.ok && (!errors.Is(err, ratelimit.ErrCorruptState) || !strings.Contains(err.Error(), `"api:`+tc.alg.Name()+`:user"`) || wrote || s.Len() != 0) {
			t.Errorf("Import of %v state %x = %v, %v, %d keys stored; want ErrCorruptState naming the key, nothing written", tc.alg, tc.state, wrote, err, s.Len())
		}
	}
}

// ownAlg is a user's own algorithm: a GCRA under another name, whose state
// Import cannot check and writes through Update.
type ownAlg struct{ algorithms.Algorithm }

func (ownAlg) Name() string { return "own" }

// TestSnapshotRoundTrip checks the memory store's snapshot on the file
// format: every key of every limiter (namespace ""), a built-in, a
// composite and a user's own algorithm, exported into a Writer, read and
// imported into a fresh store, decides there as in the first, and a
// second import writes nothing.
func TestSnapshotRoundTrip(t *testing.T) {
	ctx := context.Background()
	fake := clock.NewFake(time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC))
	algs := map[string]algorithms.Algorithm{
		"api": algorithms.GCRA(10, time.Hour, 5),
		"web": algorithms.All(algorithms.SlidingLog(4, time.Hour), algorithms.TokenBucket(9, time.Hour, 9)),
		"own": ownAlg{algorithms.GCRA(3, time.Hour, 3)},
	}
	users := []string{"ann", "{bob}", "c:d\x00"}
	before := memory.MustNew()
	for name, alg := range algs {
		lim, err := ratelimit.New(before, alg, ratelimit.WithName(name), ratelimit.WithClock(fake))
		if err != nil {
			t.Fatal(err)
		}
		for i, u := range users {
			if _, err := lim.AllowN(ctx, u, 1+i); err != nil {
				t.Fatal(err)
			}
		}
	}
	var file bytes.Buffer
	w := statefile.NewWriter(&file)
	if err := statefile.Export(ctx, before, "", fake.Now(), w.Write); err != nil {
		t.Fatal(err)
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	fake.Advance(time.Minute)
	after := memory.MustNew()
	for round, want := range []int{len(algs) * len(users), 0} {
		n := 0
		err := statefile.Read(bytes.NewReader(file.Bytes()), func(e store.Entry) error {
			wrote, err := statefile.Import(ctx, after, e, fake.Now())
			if wrote {
				n++
			}
			return err
		})
		if err != nil || n != want {
			t.Fatalf("import %d of the snapshot = %d keys written, %v; want %d", round+1, n, err, want)
		}
	}
	// Exported again, the restored store holds every entry exactly as it
	// went in: key, state and expiry.
	if got, want := dump(t, after, fake.Now()), dump(t, before, fake.Now()); got != want {
		t.Errorf("restored store holds\n%s\nwant, as snapshotted:\n%s", got, want)
	}
	for name, alg := range algs {
		was, _ := ratelimit.New(before, alg, ratelimit.WithName(name), ratelimit.WithClock(fake))
		is, _ := ratelimit.New(after, alg, ratelimit.WithName(name), ratelimit.WithClock(fake))
		if n, err := statefile.Count(ctx, after, is.Namespace(), fake.Now()); n != len(users) || err != nil {
			t.Errorf("statefile.Count(restored, %q) = %d, %v; want %d", is.Namespace(), n, err, len(users))
		}
		for _, u := range users {
			want, err1 := was.Peek(ctx, u)
			got, err2 := is.Peek(ctx, u)
			if err := errors.Join(err1, err2); err != nil || got.Remaining != want.Remaining || got.RetryAfter != want.RetryAfter || got.ResetAfter != want.ResetAfter {
				t.Errorf("%s: Peek(%q) after the restore = %+v, %v; want %+v as before", name, u, got, err, want)
			}
		}
	}
}

// dump returns every live entry of s at now, one line each, sorted.
func dump(t *testing.T, s store.Store, now time.Time) string {
	t.Helper()
	var lines []string
	err := statefile.Export(context.Background(), s, "", now, func(e store.Entry) error {
		lines = append(lines, fmt.Sprintf("%q %x %d", e.Key.String(), e.State, e.Expires))
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	slices.Sort(lines)
	return strings.Join(lines, "\n")
}

// TestRekey rewrites a composite's state of before parts were keyed by
// name (namespace "<name>:all-<hash>", each part by place) keyed by the
// parts' names under "<name>:all", imports it into a memory store, and
// decides there with a part added and the parts reordered: every count is
// kept and the new part starts fresh. Bad namespaces and names are errors.
func TestRekey(t *testing.T) {
	ctx := context.Background()
	fake := clock.NewFake(time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC))
	gcra, window := algorithms.GCRA(10, time.Hour, 10), algorithms.FixedWindow(15, time.Hour)
	alg := algorithms.All(gcra, window)
	now := fake.Now().UnixMicro()
	var keyed []byte
	var exp int64
	for range 4 {
		st, err := alg.Decide(keyed, algorithms.Request{Now: now, Cost: 1})
		if err != nil {
			t.Fatal(err)
		}
		keyed, exp = st.Next, now+st.TTL
	}
	var old []byte // by place: (expiry, length, state) for each part
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
	e := store.Entry{Key: store.Key{Namespace: fmt.Sprintf("plan:all-%016x", h.Sum64()), ID: "ann"}, State: old, Expires: exp}
	got, err := statefile.Rekey(e, "plan:all", alg.(algorithms.Composite).PartNames())
	if err != nil || !bytes.Equal(got.State, keyed) || got.Key.Namespace != "plan:all" {
		t.Fatalf("Rekey = %q %v, %v; want the keyed state %v under plan:all", got.Key.Namespace, got.State, err, keyed)
	}
	st := memory.MustNew()
	if wrote, err := statefile.Import(ctx, st, got, fake.Now()); !wrote || err != nil {
		t.Fatalf("Import of the rekeyed entry = %v, %v", wrote, err)
	}
	lim, err := ratelimit.New(st, algorithms.All(algorithms.FixedWindow(100, 30*24*time.Hour), window, gcra), ratelimit.WithName("plan"), ratelimit.WithClock(fake))
	if err != nil {
		t.Fatal(err)
	}
	d, err := lim.Peek(ctx, "ann")
	if err != nil || fmt.Sprint(d.Limits[0].Remaining, d.Limits[1].Remaining, d.Limits[2].Remaining) != "100 11 6" {
		t.Errorf("after Rekey, a part added and the parts reordered: Peek = %+v, %v; want the parts' remaining 100 11 6", d, err)
	}
	for _, c := range []struct {
		e     store.Entry
		names []string
	}{
		{e, []string{"gcra-1h"}},
		{e, []string{"x", "x"}},
		{store.Entry{Key: store.Key{Namespace: "plan:gcra", ID: "ann"}, State: old, Expires: exp}, []string{"a", "b"}},
	} {
		if _, err := statefile.Rekey(c.e, "plan:all", c.names); !errors.Is(err, ratelimit.ErrInvalidParams) {
			t.Errorf("Rekey(%q, %v) = %v, want ErrInvalidParams", c.e.Key.Namespace, c.names, err)
		}
	}
	bad := e
	bad.State = old[:len(old)-8]
	if _, err := statefile.Rekey(bad, "plan:all", []string{"a", "b"}); !errors.Is(err, ratelimit.ErrCorruptState) {
		t.Errorf("Rekey of a state cut short = %v, want ErrCorruptState", err)
	}
}

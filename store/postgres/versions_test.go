package postgres_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/ratelimitkit/ratelimit"
	"github.com/ratelimitkit/ratelimit/algorithms"
	"github.com/ratelimitkit/ratelimit/algorithms/forms"
	"github.com/ratelimitkit/ratelimit/store/postgres"
)

// unusedFormsSQL lists the versioned functions of the SQL forms in the
// current schema that nothing calls any longer (docs/stores/postgres.md
// drops them the same way): no other function's source names them.
const unusedFormsSQL = `SELECT p.oid::regprocedure::text FROM pg_proc p
WHERE p.pronamespace = current_schema()::regnamespace
  AND p.proname ~ '^ratelimit_[a-z_]+_[0-9a-f]{8}$'
  AND NOT EXISTS (SELECT FROM pg_proc q WHERE q.oid <> p.oid AND q.prosrc LIKE '%' || p.proname || '%')`

// TestFormVersionsCoexist migrates two tables of one database with two
// versions of GCRA's SQL form (the release's, and a changed one under
// another version, as an older or newer release would install), in the
// order of a rolling deploy: the second migration does not replace the
// first's form, each table decides with its own, and once the changed
// version's table is gone its functions are unused and can be dropped
// while the release's stay.
func TestFormVersionsCoexist(t *testing.T) {
	p := newTestPool(t, 4)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()

	release := forms.SQLFunction("gcra")
	version := release[strings.LastIndexByte(release, '_')+1:]
	const other = "0badf00d"
	if version == other {
		t.Fatalf("the release's GCRA form has the test's version %s", other)
	}
	text, _ := forms.SQL("gcra")
	// The changed form reports a limit 1000 higher, so a decision shows
	// which form made it.
	changed := strings.ReplaceAll(strings.ReplaceAll(text, "_"+version, "_"+other), ":= args[5];", ":= args[5] + 1000;")
	if !strings.Contains(changed, "args[5] + 1000;") {
		t.Fatal("the GCRA form does not read its limit, args[5], into a variable")
	}
	changedFn := strings.TrimSuffix(release, version) + other

	a := newStore(t, p)
	b := newStore(t, p, postgres.WithSQLForm("gcra", changed, changedFn))
	// A rolling deploy: the release migrates again after the other version.
	if err := a.Migrate(ctx); err != nil {
		t.Fatalf("Migrate again: %v", err)
	}
	if err := b.Migrate(ctx); err != nil {
		t.Fatalf("Migrate the changed version again: %v", err)
	}
	for _, fn := range []string{release, changedFn, "ratelimit_corrupt_" + version, "ratelimit_corrupt_" + other} {
		var n int
		if err := p.QueryRow(ctx, "SELECT count(*) FROM pg_proc WHERE proname = $1", fn).Scan(&n); err != nil || n != 1 {
			t.Errorf("functions named %s: %d (%v), want 1", fn, n, err)
		}
	}
	alg := algorithms.GCRA(10, time.Second, 5)
	for _, c := range []struct {
		name  string
		s     *postgres.Store
		limit int
	}{{"release", a, 5}, {"changed", b, 1005}} {
		lim, err := ratelimit.New(c.s, alg)
		if err != nil {
			t.Fatal(err)
		}
		d, err := lim.Allow(ctx, "k")
		if err != nil || !d.Allowed || d.Limit != c.limit {
			t.Errorf("%s form: Allow = %+v, %v; want allowed with limit %d", c.name, d, err, c.limit)
		}
	}
	// Direct calls of both versions.
	for fn, limit := range map[string]int64{release: 5, changedFn: 1005} {
		var got int64
		err := p.QueryRow(ctx, "SELECT lim FROM "+fn+"(NULL, 1000000, 1, false, $1, 0, false, 0)", alg.(forms.ServerForm).ServerArgs()).Scan(&got)
		if err != nil || got != limit {
			t.Errorf("%s: limit %d (%v), want %d", fn, got, err, limit)
		}
	}

	// While a decide function calls them, neither version is unused.
	unused := func() map[string]bool {
		rows, err := p.Query(ctx, unusedFormsSQL)
		if err != nil {
			t.Fatal(err)
		}
		out := map[string]bool{}
		for _, r := range rows {
			out[r[0].(string)] = true
		}
		return out
	}
	for fn := range unused() {
		if v := versionOf(fn); v == version || v == other {
			t.Errorf("%s is listed as unused while a decide function calls it", fn)
		}
	}

	// Once the other version's table is gone, its functions are unused:
	// drop them (a pass frees the functions the dropped ones called).
	dropTable(t, p, strings.Trim(b.Table(), `"`))
	for pass := 0; ; pass++ {
		var drop []string
		for fn := range unused() {
			if versionOf(fn) == other {
				drop = append(drop, fn)
			}
		}
		if len(drop) == 0 {
			break
		}
		if pass == 3 {
			t.Fatalf("still unused after %d passes: %v", pass, drop)
		}
		for _, fn := range drop {
			if _, err := p.Exec(ctx, "DROP FUNCTION "+fn); err != nil {
				t.Fatal(err)
			}
		}
	}
	for fn, want := range map[string]int{release: 1, changedFn: 0, "ratelimit_corrupt_" + other: 0} {
		var n int
		if err := p.QueryRow(ctx, "SELECT count(*) FROM pg_proc WHERE proname = $1", fn).Scan(&n); err != nil || n != want {
			t.Errorf("functions named %s after the drop: %d (%v), want %d", fn, n, err, want)
		}
	}
	lim, err := ratelimit.New(a, alg)
	if err != nil {
		t.Fatal(err)
	}
	if d, err := lim.Allow(ctx, "k"); err != nil || !d.Allowed || d.Limit != 5 {
		t.Errorf("release form after the drop: Allow = %+v, %v", d, err)
	}
}

// versionOf returns the version a function's signature (as regprocedure
// prints it) carries in its name.
func versionOf(signature string) string {
	name, _, _ := strings.Cut(signature, "(")
	return name[strings.LastIndexByte(name, '_')+1:]
}

package postgres_test

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/ratelimitkit/ratelimit/algorithms"
	"github.com/ratelimitkit/ratelimit/algorithms/forms"
	"github.com/ratelimitkit/ratelimit/store/postgres"
)

// noDB is a postgres.DB that is never called: TestInstructionsSetup only
// builds SQL.
type noDB struct{ postgres.DB }

// TestInstructionsSetup writes, into RATELIMIT_BENCH_PG_INSTR_DIR, what
// instructions.sh needs to count the server's instructions per statement:
// schema.sql (the store's SchemaSQL for the table "rl", an upsert table
// "up" and a live row for each key) and one file per statement, each one
// line of SQL whose parameters are $1 the row key, $2 the time (NULL: the
// server's clock), $3 the cost, $4 the algorithm's arguments as a bigint[]
// and $5 onwards the same arguments one by one, so that every statement
// is prepared with the same parameters. It runs only with that variable set.
func TestInstructionsSetup(t *testing.T) {
	dir := os.Getenv("RATELIMIT_BENCH_PG_INSTR_DIR")
	if dir == "" {
		t.Skip("set RATELIMIT_BENCH_PG_INSTR_DIR (see instructions.sh)")
	}
	s, err := postgres.New(noDB{}, postgres.WithTable("rl"))
	if err != nil {
		t.Fatal(err)
	}
	schema := s.SchemaSQL() + `
CREATE TABLE up (k bytea PRIMARY KEY, n bigint NOT NULL) WITH (fillfactor = 70);
INSERT INTO up VALUES ('cost:gcra', 1), ('cost:token_bucket', 1);
`
	files := map[string]string{
		"upsert": "INSERT INTO up AS c (k, n) VALUES ($1, 1) ON CONFLICT (k) DO UPDATE SET n = c.n + 1 RETURNING n",
	}
	for _, n := range []string{"gcra", "token_bucket"} {
		alg := algorithms.GCRA(1_000_000_000, time.Second, 1_000_000)
		if n == "token_bucket" {
			alg = algorithms.TokenBucket(1_000_000_000, time.Second, 1_000_000)
		}
		args := alg.(forms.ServerForm).ServerArgs()
		var lit []string
		for _, a := range args {
			lit = append(lit, itoa(a))
		}
		schema += "SELECT rl_decide_" + n + "('cost:" + n + "', NULL, 1, false, '{" + strings.Join(lit, ",") + "}', NULL);\n"
		files[n+".row_form"] = rowFormUpdate(`"rl"`, forms.SQLRowFunction(n), len(args))
		files[n+".lateral_form"] = rowUpdate(`"rl"`, forms.SQLFunction(n), false)
		files[n+".constant_step"] = rowUpdate(`"rl"`, "", true)
	}
	// The row form's statement takes its arguments from $4 on; shift them
	// to $5 on, after the array every statement is prepared with.
	for name, q := range files {
		if strings.HasSuffix(name, ".row_form") {
			for i := 9; i >= 4; i-- {
				q = strings.ReplaceAll(q, "$"+itoa(int64(i)), "$"+itoa(int64(i+1)))
			}
			files[name] = q
		}
	}
	if err := os.WriteFile(filepath.Join(dir, "schema.sql"), []byte(schema), 0o644); err != nil {
		t.Fatal(err)
	}
	for name, q := range files {
		if err := os.WriteFile(filepath.Join(dir, name+".stmt"), []byte(q+"\n"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

func itoa(v int64) string { return strconv.FormatInt(v, 10) }

package postgres_test

import (
	"context"
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/ratelimitkit/ratelimit"
	"github.com/ratelimitkit/ratelimit/algorithms/forms"
	"github.com/ratelimitkit/ratelimit/bench/internal/handforms"
	"github.com/ratelimitkit/ratelimit/store/postgres"
)

// schemaPool returns a pool of callers connections whose search_path is a
// fresh schema of its own, dropped with everything in it at the end: a
// store built on it installs its table and the SQL forms there.
func schemaPool(t *testing.T, url, schema string) *pgxpool.Pool {
	t.Helper()
	ctx := context.Background()
	admin, err := pgx.Connect(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	defer admin.Close(ctx)
	id := pgx.Identifier{schema}.Sanitize()
	if _, err := admin.Exec(ctx, "CREATE SCHEMA "+id); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		c, err := pgx.Connect(context.Background(), url)
		if err == nil {
			_, _ = c.Exec(context.Background(), "DROP SCHEMA IF EXISTS "+id+" CASCADE")
			c.Close(context.Background())
		}
	})
	cfg, err := pgxpool.ParseConfig(url)
	if err != nil {
		t.Fatal(err)
	}
	cfg.ConnConfig.RuntimeParams["search_path"] = schema
	cfg.MaxConns, cfg.MinConns = callers, callers
	p, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(p.Close)
	return p
}

// TestFormsReport measures the generated SQL forms (algorithms/forms/sql) against
// the hand-written ones they replaced (bench/internal/handforms): two
// stores on the same server, each in a schema of its own, one with the
// forms Migrate installs and one whose forms are then replaced by the
// hand-written ones, make decisions through the limiter with 16 callers, on
// one hot key and on 10,000 keys. Each round runs both one after the other
// (who goes first alternates), so that drifting load hits both alike. It
// prints per row the median decisions/s of each and the median and range
// of the per-round ratio generated ÷ hand-written. It runs only with
// RATELIMIT_BENCH_FORMS=1 (=alone: only the form-alone table).
func TestFormsReport(t *testing.T) {
	if os.Getenv("RATELIMIT_BENCH_FORMS") == "" {
		t.Skip("set RATELIMIT_BENCH_FORMS=1 to compare the generated SQL forms with the hand-written ones")
	}
	url := os.Getenv("RATELIMIT_POSTGRES_URL")
	if url == "" {
		t.Fatal("RATELIMIT_POSTGRES_URL is not set: run under scripts/with-servers.sh")
	}
	const (
		rounds = 11
		n      = 1500
	)
	ctx := context.Background()
	tag := fmt.Sprintf("rl_forms_%d_%d", os.Getpid(), time.Now().UnixNano()%1_000_000)
	pools := []*pgxpool.Pool{schemaPool(t, url, tag+"_gen"), schemaPool(t, url, tag+"_hand")}
	if os.Getenv("RATELIMIT_BENCH_FORMS") == "alone" {
		// Only the form-alone table: install the forms and go.
		var out strings.Builder
		for _, alg := range algs() {
			if !slices.Contains(handforms.Names, alg.Name()) {
				continue
			}
			for i, p := range pools {
				s, err := postgres.New(p, postgres.WithTable("t_"+alg.Name()))
				if err == nil {
					err = s.Migrate(ctx)
				}
				// RATELIMIT_BENCH_FORMS_CONTROL=1 installs the hand-written
				// form on both sides: the ratios then show the
				// measurement's own bias and spread.
				if err == nil && (i == 1 || os.Getenv("RATELIMIT_BENCH_FORMS_CONTROL") != "") {
					err = installForm(ctx, p, s, alg.Name(), handforms.SQL(alg.Name()))
				}
				if err != nil {
					t.Fatal(err)
				}
			}
		}
		formAlone(t, pools, &out)
		t.Log(out.String())
		return
	}
	var out strings.Builder
	fmt.Fprintf(&out, "\nPostgreSQL store decisions (server clock), %d callers, %d decisions per form per round, %d rounds; ratio = generated ÷ hand-written\n\n", callers, n, rounds)
	fmt.Fprintf(&out, "| keys | algorithm | generated decisions/s | hand-written decisions/s | ratio median | ratio range |\n|---|---|---:|---:|---:|---|\n")
	for _, spread := range []bool{false, true} {
		keysName := "hot key"
		if spread {
			keysName = "10,000 keys"
		}
		for _, alg := range algs() {
			if !slices.Contains(handforms.Names, alg.Name()) {
				continue
			}
			var decide [2]func(int) error
			for i, p := range pools {
				s, err := postgres.New(p, postgres.WithTable("t_"+alg.Name()))
				if err != nil {
					t.Fatal(err)
				}
				if err := s.Migrate(ctx); err != nil {
					t.Fatal(err)
				}
				if i == 1 {
					if err := installForm(ctx, p, s, alg.Name(), handforms.SQL(alg.Name())); err != nil {
						t.Fatalf("installing the hand-written %s: %v", alg.Name(), err)
					}
				}
				lim, err := ratelimit.New(s, alg)
				if err != nil {
					t.Fatal(err)
				}
				decide[i] = func(i int) error {
					d, err := lim.Allow(ctx, keyFor(spread, i))
					if err == nil && !d.Allowed {
						err = fmt.Errorf("%s denied a request", alg.Name())
					}
					return err
				}
			}
			for _, d := range decide { // warm up: connections, plans
				if err := spreadCalls(200, d); err != nil {
					t.Fatal(err)
				}
			}
			var rates [2][]float64
			var ratios []float64
			for r := range rounds {
				var rate [2]float64
				for j := range 2 {
					i := (j + r) % 2
					start := time.Now()
					if err := spreadCalls(n, decide[i]); err != nil {
						t.Fatal(err)
					}
					rate[i] = float64(n) / time.Since(start).Seconds()
					rates[i] = append(rates[i], rate[i])
				}
				ratios = append(ratios, rate[0]/rate[1])
			}
			row := fmt.Sprintf("| %s | %s | %.0f | %.0f | %.3f | %.3f–%.3f |\n", keysName, alg.Name(),
				median(rates[0]), median(rates[1]), median(ratios), slices.Min(ratios), slices.Max(ratios))
			t.Log(row)
			out.WriteString(row)
		}
	}
	formAlone(t, pools, &out)
	t.Log(out.String())
}

// formAlone adds to out the cost of the SQL form alone, without the
// store's upsert or a round trip: a procedure in each schema calls the
// form in a loop, each call its own transaction (as each decision is), so
// that PL/pgSQL prepares the form's expressions again every time, carrying
// the state from call to call. Interleaved rounds as above; the ratio is
// hand-written ÷ generated time per call, above 1 when the generated form
// is cheaper.
func formAlone(t *testing.T, pools []*pgxpool.Pool, out *strings.Builder) {
	const (
		rounds = 11
		calls  = 5000
	)
	ctx := context.Background()
	cpuKnown := true
	defer func() {
		what := "the backend's CPU time (/proc/<pid>/schedstat)"
		if !cpuKnown {
			what = "wall-clock time (the backend's CPU time could not be read)"
		}
		fmt.Fprintf(out, "\nµs per call: %s.\n", what)
	}()
	fmt.Fprintf(out, "\nThe form alone: one call per transaction in a server-side loop (CALL of a procedure that COMMITs after each call), %d calls per form per round, %d rounds; ratio = hand-written ÷ generated µs per call\n\n", calls, rounds)
	fmt.Fprintf(out, "| algorithm | generated µs/call | hand-written µs/call | ratio median | ratio range |\n|---|---:|---:|---:|---|\n")
	for _, alg := range algs() {
		if !slices.Contains(handforms.Names, alg.Name()) {
			continue
		}
		proc := "rl_loop_" + alg.Name()
		for i, p := range pools {
			// The generated form under its versioned name; the
			// hand-written one (frozen before versions) under its plain one.
			fn := forms.SQLFunction(alg.Name())
			if i == 1 || os.Getenv("RATELIMIT_BENCH_FORMS_CONTROL") != "" {
				fn = "ratelimit_" + alg.Name()
			}
			if _, err := p.Exec(ctx, fmt.Sprintf(`CREATE OR REPLACE PROCEDURE %[1]s(n int, a bigint[]) LANGUAGE plpgsql AS $$
DECLARE
    st bigint[];
    r  ratelimit_step;
BEGIN
    FOR i IN 1 .. n LOOP
        r := %[2]s(st, (extract(epoch FROM clock_timestamp()) * 1000000)::bigint, 1, false, a);
        IF r.next_state IS NOT NULL THEN
            st := r.next_state;
        END IF;
        COMMIT;
    END LOOP;
END $$`, proc, fn)); err != nil {
				t.Fatal(err)
			}
		}
		args := alg.(interface{ ServerArgs() []int64 }).ServerArgs()
		var conns [2]*pgxpool.Conn
		var pids [2]uint32
		for i, p := range pools {
			c, err := p.Acquire(ctx)
			if err != nil {
				t.Fatal(err)
			}
			defer c.Release()
			conns[i] = c
			if err := c.QueryRow(ctx, "SELECT pg_backend_pid()").Scan(&pids[i]); err != nil {
				t.Fatal(err)
			}
		}
		// call returns the server's CPU µs per call when it can read the
		// backend's CPU time, else the wall-clock µs per call.
		call := func(i, n int) float64 {
			cpu0, ok := backendCPU(pids[i])
			start := time.Now()
			if _, err := conns[i].Exec(ctx, "CALL "+proc+"($1, $2)", n, args); err != nil {
				t.Fatal(err)
			}
			wall := float64(time.Since(start).Microseconds()) / float64(n)
			cpu1, ok1 := backendCPU(pids[i])
			if !ok || !ok1 {
				cpuKnown = false
				return wall
			}
			return (cpu1 - cpu0) / float64(n)
		}
		for i := range pools {
			call(i, 300) // warm up
		}
		var us [2][]float64
		var ratios []float64
		for r := range rounds {
			var u [2]float64
			for j := range 2 {
				i := (j + r) % 2
				u[i] = call(i, calls)
				us[i] = append(us[i], u[i])
			}
			ratios = append(ratios, u[1]/u[0])
		}
		row := fmt.Sprintf("| %s | %.2f | %.2f | %.3f | %.3f–%.3f |\n", alg.Name(), median(us[0]), median(us[1]),
			median(ratios), slices.Min(ratios), slices.Max(ratios))
		t.Log(row)
		out.WriteString(row)
	}
}

// backendCPU returns the CPU time in µs that the server process pid has
// used, from Linux's /proc/<pid>/schedstat (nanoseconds on the CPU), and
// false when it cannot: another OS, or a server on another machine (the
// process is not a postgres one).
func backendCPU(pid uint32) (float64, bool) {
	cmd, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
	if err != nil || !strings.Contains(string(cmd), "postgres") {
		return 0, false
	}
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/schedstat", pid))
	if err != nil {
		return 0, false
	}
	f := strings.Fields(string(b))
	if len(f) == 0 {
		return 0, false
	}
	ns, err := strconv.ParseFloat(f[0], 64)
	if err != nil {
		return 0, false
	}
	return ns / 1000, true
}

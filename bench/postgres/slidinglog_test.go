package postgres_test

import (
	"context"
	"fmt"
	"os"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/ratelimitkit/ratelimit"
	"github.com/ratelimitkit/ratelimit/algorithms"
	"github.com/ratelimitkit/ratelimit/algorithms/forms"
	"github.com/ratelimitkit/ratelimit/clock"
	"github.com/ratelimitkit/ratelimit/store/postgres"
)

// TestSlidingLogForms compares the sliding log's SQL form with an earlier
// version of it (a sliding_log.sql file named by
// RATELIMIT_BENCH_SLIDING_LOG_BASE, such as one from `git show
// <commit>:algorithms/sql/sliding_log.sql`) on one hot key with a full log
// of 1,000 entries, 16 callers, in interleaved rounds: each round installs
// one form, runs it, then the other. The limiter's clock advances 1 µs per
// call, so the log stays exactly full:
//   - admit: a period of 1,000 µs: every call admits, and one entry leaves;
//   - deny: a period of an hour: every call is denied.
//
// Each form's table calls its own form (the earlier one by the name its
// file defines, versioned or not), so the two never replace each other:
//
//	RATELIMIT_BENCH_SLIDING_LOG_BASE=old.sql go test -run TestSlidingLogForms -v ./postgres/
func TestSlidingLogForms(t *testing.T) {
	url, basePath := os.Getenv("RATELIMIT_POSTGRES_URL"), os.Getenv("RATELIMIT_BENCH_SLIDING_LOG_BASE")
	if url == "" || basePath == "" {
		t.Skip("set RATELIMIT_POSTGRES_URL (a database of its own) and RATELIMIT_BENCH_SLIDING_LOG_BASE to compare the forms")
	}
	base, err := os.ReadFile(basePath)
	if err != nil {
		t.Fatal(err)
	}
	current, _ := forms.SQL("sliding_log")
	forms := []struct{ name, sql string }{{"earlier", string(base)}, {"current", current}}
	cfg, err := pgxpool.ParseConfig(url)
	if err != nil {
		t.Fatal(err)
	}
	cfg.MaxConns, cfg.MinConns = callers, callers
	p, err := pgxpool.NewWithConfig(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	ctx := context.Background()
	const rounds, n = 5, 1000
	var out strings.Builder
	fmt.Fprintf(&out, "\nPostgreSQL, one hot key, a full sliding log of 1,000, %d callers, %d rounds of %d calls; ratio = current ÷ earlier decisions/s in the same round\n\n", callers, rounds, n)
	fmt.Fprintf(&out, "| workload | earlier decisions/s | current decisions/s | ratio, median (range) |\n|---|---:|---:|---:|\n")
	for _, w := range []struct {
		name   string
		period time.Duration
	}{{"admit", time.Millisecond}, {"deny", time.Hour}} {
		alg := algorithms.SlidingLog(1000, w.period)
		type contender struct {
			lim   *ratelimit.Limiter
			clock *clock.Fake
		}
		cs := make([]contender, len(forms))
		for i, f := range forms {
			s, err := postgres.New(p, postgres.WithTable(fmt.Sprintf("rl_bench_log_%d_%d", os.Getpid(), i)), postgres.WithRequestClock())
			if err != nil {
				t.Fatal(err)
			}
			if err := s.Migrate(ctx); err != nil {
				t.Fatal(err)
			}
			if err := installForm(ctx, p, s, "sliding_log", f.sql); err != nil {
				t.Fatalf("installing the %s form: %v", f.name, err)
			}
			t.Cleanup(func() { _, _ = p.Exec(context.Background(), "DROP TABLE IF EXISTS "+s.Table()) })
			fake := clock.NewFake(time.Date(2040, 1, 1, 0, 0, 0, 0, time.UTC))
			lim, err := ratelimit.New(s, alg, ratelimit.WithClock(fake))
			if err != nil {
				t.Fatal(err)
			}
			cs[i] = contender{lim, fake}
			for range 1000 { // fill the log
				fake.Advance(time.Microsecond)
				if _, err := lim.Allow(ctx, "hot"); err != nil {
					t.Fatalf("%s form: %v", f.name, err)
				}
			}
		}
		rates := make([][]float64, len(forms))
		var ratios []float64
		for r := 0; r < rounds; r++ {
			perSec := make([]float64, len(forms))
			for j := range forms {
				i := (j + r) % len(forms)
				c := cs[i]
				start := time.Now()
				err := spreadCalls(n, func(int) error {
					c.clock.Advance(time.Microsecond)
					d, err := c.lim.Allow(ctx, "hot")
					if err == nil && d.Allowed != (w.name == "admit") {
						err = fmt.Errorf("%s form, %s: decision %+v", forms[i].name, w.name, d)
					}
					return err
				})
				if err != nil {
					t.Fatal(err)
				}
				perSec[i] = n / time.Since(start).Seconds()
				rates[i] = append(rates[i], perSec[i])
			}
			ratios = append(ratios, perSec[1]/perSec[0])
		}
		fmt.Fprintf(&out, "| %s | %.0f | %.0f | %.2f (%.2f–%.2f) |\n", w.name, median(rates[0]), median(rates[1]),
			median(ratios), slices.Min(ratios), slices.Max(ratios))
	}
	// Leave the current form installed.
	if _, err := p.Exec(ctx, current); err != nil {
		t.Fatal(err)
	}
	t.Log(out.String())
}

func median(v []float64) float64 {
	s := slices.Clone(v)
	slices.Sort(s)
	return s[len(s)/2]
}

// installForm installs text, a SQL form of the algorithm named alg (of
// this release or another), and makes s's decide functions call it: the
// forms' function names carry their version (forms.SQLFunction), so
// text's are installed beside the release's and s's table calls them by
// the name text defines, versioned or not.
func installForm(ctx context.Context, p *pgxpool.Pool, s *postgres.Store, alg, text string) error {
	m := formName(alg).FindStringSubmatch(text)
	if m == nil {
		return fmt.Errorf("the form defines no function ratelimit_%s", alg)
	}
	schema := strings.ReplaceAll(s.SchemaSQL(), forms.SQLFunction(alg)+"(", m[1]+"(")
	_, err := p.Exec(ctx, text+"\n"+schema)
	return err
}

// formName finds the name of the function of the algorithm named alg in
// its SQL form's text, with a version (ratelimit_<alg>_<version>) or,
// before versions, without.
func formName(alg string) *regexp.Regexp {
	return regexp.MustCompile(`CREATE OR REPLACE FUNCTION (ratelimit_` + alg + `(?:_[0-9a-f]{8})?)\(`)
}

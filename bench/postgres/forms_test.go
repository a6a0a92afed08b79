package postgres_test

import (
	"context"
	"fmt"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/ratelimitkit/ratelimit"
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

// TestFormsReport measures the generated SQL forms (algorithms/sql) against
// the hand-written ones they replaced (bench/internal/handforms): two
// stores on the same server, each in a schema of its own, one with the
// forms Migrate installs and one whose forms are then replaced by the
// hand-written ones, make decisions through the limiter with 16 callers, on
// one hot key and on 10,000 keys. Each round runs both one after the other
// (who goes first alternates), so that drifting load hits both alike. It
// prints per row the median decisions/s of each and the median and range
// of the per-round ratio generated ÷ hand-written. It runs only with
// RATELIMIT_BENCH_FORMS=1.
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
					if _, err := p.Exec(ctx, handforms.SQL(alg.Name())); err != nil {
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
	t.Log(out.String())
}

func median(v []float64) float64 {
	s := slices.Clone(v)
	slices.Sort(s)
	return s[len(s)/2]
}

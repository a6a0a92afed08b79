package lease_test

import (
	"context"
	"fmt"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/ratelimitkit/ratelimit/store"
)

// TestLeasePostgresReport measures a lease on PostgreSQL: uncontended
// TryAcquire + Release, each call one statement (the table's lease
// function, the store's leasewire.Runner), beside the same cycle through Update
// (a transaction of four or five statements per call), on one pool and one
// server. The contenders take turns cycle by cycle (rotating who goes
// first); each round's figure is the median cycle time, the ratio is per
// round (the Update path's median time ÷ the lease function's, so above 1
// is faster), and the table gives the median ratio and its range. It runs
// only with RATELIMIT_BENCH_REPORT=1.
func TestLeasePostgresReport(t *testing.T) {
	if os.Getenv("RATELIMIT_BENCH_REPORT") == "" {
		t.Skip("set RATELIMIT_BENCH_REPORT=1 to print the PostgreSQL lease table")
	}
	var s store.Store
	for _, st := range stores {
		if st.name == "postgres" {
			s = st.make(t)
		}
	}
	contenders := []struct {
		name string
		fn   cycle
	}{
		{"lease TryAcquire+Release (Update path)", sdkCycle(t, updateOnly{s})},
		{"lease TryAcquire+Release (lease function)", sdkCycle(t, s)},
	}
	const rounds, n = 11, 200
	ctx := context.Background()
	for i, cs := range contenders {
		timeCycles(t, cs.fn, 200, -1-i) // warm up
	}
	medians := make([][]float64, len(contenders))
	for r := range rounds {
		times := make([][]float64, len(contenders))
		for k := range n {
			key := fmt.Sprintf("pg-r%d-k%d", r, k%256)
			for j := range contenders {
				i := (j + k) % len(contenders)
				start := time.Now()
				if err := contenders[i].fn(ctx, key); err != nil {
					t.Fatal(err)
				}
				times[i] = append(times[i], float64(time.Since(start).Microseconds()))
			}
		}
		for i := range contenders {
			medians[i] = append(medians[i], median(times[i]))
		}
	}
	var out strings.Builder
	fmt.Fprintf(&out, "\nUncontended on PostgreSQL (one pgx pool, same server; %d rounds of %d cycles, the contenders taking turns cycle by cycle; ratio = the Update path's median cycle time ÷ the contender's, per round)\n\n", rounds, n)
	fmt.Fprintf(&out, "| contender | median cycle (µs) | ratio to the Update path: median | min | max |\n|---|---:|---:|---:|---:|\n")
	for i, cs := range contenders {
		ratios := make([]float64, rounds)
		for r := range ratios {
			ratios[r] = medians[0][r] / medians[i][r]
		}
		fmt.Fprintf(&out, "| %s | %.0f | %.2f | %.2f | %.2f |\n", cs.name, median(medians[i]), median(ratios), slices.Min(ratios), slices.Max(ratios))
	}
	t.Log(out.String())
}

package walk_test

import (
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"github.com/ratelimitkit/ratelimit/algorithms"
	"github.com/ratelimitkit/ratelimit/internal/walk"
)

// TestWalk: a seed gives the same walk every time; every step moves the
// clock by one of the steps, costs 1 to the algorithm's MaxCost, and uses
// an algorithm of the family, the others too.
func TestWalk(t *testing.T) {
	fam := []algorithms.Algorithm{algorithms.GCRA(3, time.Second, 7), algorithms.FixedWindow(5, time.Second)}
	steps := []int64{0, 7, -5}
	draw := func() []algorithms.Request {
		w := walk.New(rand.New(rand.NewPCG(1, 2)), fam, steps, 2, 2)
		var reqs []algorithms.Request
		prev := int64(-1)
		others := 0
		for range 200 {
			alg, req := w.Next()
			if prev >= 0 && !slices.Contains(steps, req.Now-prev) {
				t.Fatalf("the clock moved by %d, not one of %v", req.Now-prev, steps)
			}
			if req.Cost < 1 || req.Cost > alg.MaxCost() {
				t.Fatalf("cost %d for %v", req.Cost, alg)
			}
			if alg != fam[0] {
				others++
			}
			prev = req.Now
			reqs = append(reqs, req)
		}
		if others == 0 {
			t.Fatal("200 steps, one in two for any of the family, never used the second")
		}
		return reqs
	}
	if a, b := draw(), draw(); !slices.Equal(a, b) {
		t.Fatal("one seed gave two walks")
	}
}

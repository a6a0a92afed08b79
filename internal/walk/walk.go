// Package walk draws the seeded random request walks that the module's
// differential tests hold two forms of an algorithm to (the Go form and
// its Lua or SQL form): a family of algorithms sharing a key, a clock that
// steps forwards and back, random costs and peeks.
package walk

import (
	"math/rand/v2"

	"github.com/ratelimitkit/ratelimit/algorithms"
)

// A Walk is one seeded sequence of requests on one key.
type Walk struct {
	rng         *rand.Rand
	family      []algorithms.Algorithm
	steps       []int64
	other, cost int
	now         int64
}

// New starts a walk drawn from rng at a random time near 1.9e15 µs. Its
// requests are for family[0], or, one in other, for any of family; each
// moves the clock by one of steps (µs, negative ones step it back) and
// costs 1, or, one in cost, a random cost up to the algorithm's MaxCost;
// one in eight is a peek.
func New(rng *rand.Rand, family []algorithms.Algorithm, steps []int64, other, cost int) *Walk {
	return &Walk{rng: rng, family: family, steps: steps, other: other, cost: cost,
		now: 1_900_000_000_000_000 + rng.Int64N(1_000_000)}
}

// Next returns the walk's next algorithm and request. It draws from the
// walk's rng in one fixed order, so a seed gives the same walk every run,
// and a test may draw more from the same rng between steps.
func (w *Walk) Next() (algorithms.Algorithm, algorithms.Request) {
	alg := w.family[0]
	if w.rng.IntN(w.other) == 0 {
		alg = w.family[w.rng.IntN(len(w.family))]
	}
	w.now += w.steps[w.rng.IntN(len(w.steps))]
	cost := int64(1)
	if w.rng.IntN(w.cost) == 0 {
		cost = 1 + w.rng.Int64N(alg.MaxCost())
	}
	return alg, algorithms.Request{Now: w.now, Cost: cost, Peek: w.rng.IntN(8) == 0}
}

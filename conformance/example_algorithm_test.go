package conformance_test

import (
	"testing"

	"github.com/ratelimitkit/ratelimit/conformance"
	"github.com/ratelimitkit/ratelimit/store/memory"
)

// A test of your own algorithm runs it on each store you deploy it on,
// compared with the memory store. Put this in a _test.go file as func
// TestMyAlgorithm(t *testing.T), with your store in place of the memory
// store and your algorithm in place of windowAlgorithm (at most 5 units
// per second, conformance/algorithm_test.go).
func ExampleRunAlgorithm() {
	var t *testing.T // the *testing.T of your TestMyAlgorithm
	alg := windowAlgorithm{limit: 5, period: 1_000_000}
	conformance.RunAlgorithm(t, alg, func(t *testing.T) conformance.Harness {
		return conformance.Harness{Store: memory.MustNew()}
	})
}

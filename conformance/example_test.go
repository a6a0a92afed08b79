package conformance_test

import (
	"testing"

	"github.com/ratelimitkit/ratelimit/conformance"
	"github.com/ratelimitkit/ratelimit/store/memory"
)

// A store's test runs the whole suite with a factory that returns a fresh
// store per subtest. Put this in a _test.go file as func TestConformance(t
// *testing.T); go test -run 'TestConformance/Concurrency' runs one group.
func ExampleRun() {
	var t *testing.T // the *testing.T of your TestConformance
	conformance.Run(t, func(t *testing.T) conformance.Harness {
		return conformance.Harness{Store: memory.MustNew()}
	})
}

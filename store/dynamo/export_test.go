package dynamo_test

import (
	"context"
	"errors"
	"testing"

	"github.com/ratelimitkit/ratelimit"
	"github.com/ratelimitkit/ratelimit/store/dynamo"
)

// getPutDelete is a Client that has only the Client interface's methods,
// not Scan; its nil embedded client panics, failing the test, if called.
type getPutDelete struct{ dynamo.Client }

// TestExportUnsupported checks that a Client without Scan (see
// dynamo.Scanner) cannot export, says so with ErrUnsupported, and sends
// nothing. The stores' exports on real servers are tested with the move
// command (cmd/ratelimit).
func TestExportUnsupported(t *testing.T) {
	s, err := dynamo.New(getPutDelete{})
	if err != nil {
		t.Fatal(err)
	}
	err = s.Export(context.Background(), "a:gcra", 0, func(ratelimit.Entry) error { return nil })
	if !errors.Is(err, ratelimit.ErrUnsupported) {
		t.Fatalf("Export with a Client that cannot Scan = %v, want ErrUnsupported", err)
	}
}

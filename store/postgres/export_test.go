package postgres_test

import (
	"context"
	"errors"
	"testing"

	"github.com/ratelimitkit/ratelimit/store"
	"github.com/ratelimitkit/ratelimit/store/postgres"
)

// TestExportUnsupported checks that a DB without Query (see
// postgres.Queryer) cannot export, says so with ErrUnsupported, and
// contacts no server. The stores' exports on real servers are tested with
// the move command (cmd/ratelimit).
func TestExportUnsupported(t *testing.T) {
	s, err := postgres.New(noServer{t})
	if err != nil {
		t.Fatal(err)
	}
	err = s.Export(context.Background(), "a:gcra", 0, func(store.Entry) error { return nil })
	if !errors.Is(err, store.ErrUnsupported) {
		t.Fatalf("Export with a DB that cannot Query = %v, want ErrUnsupported", err)
	}
}

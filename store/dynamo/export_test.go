package dynamo_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/ratelimitkit/ratelimit"
	"github.com/ratelimitkit/ratelimit/algorithms"
	"github.com/ratelimitkit/ratelimit/internal/testserver"
	"github.com/ratelimitkit/ratelimit/store"
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
	err = s.Export(context.Background(), "a:gcra", 0, func(store.Entry) error { return nil })
	if !errors.Is(err, store.ErrUnsupported) {
		t.Fatalf("Export with a Client that cannot Scan = %v, want ErrUnsupported", err)
	}
}

// TestExportKeyPrefix checks that stores with and without key prefixes on
// one table each count and export their own keys, and only those: a
// prefixed store's keys are stored as NUL, prefix, NUL, key, and export
// used to look for the bare prefix, finding none.
func TestExportKeyPrefix(t *testing.T) {
	client := newClient(testserver.DynamoDBEndpoint(t))
	table := newTable(t, client)
	ctx := context.Background()
	want := map[string]int{"": 2, "p": 3, "pq": 4}
	for prefix, n := range want {
		opts := []dynamo.Option{dynamo.WithTable(table)}
		if prefix != "" {
			opts = append(opts, dynamo.WithKeyPrefix(prefix))
		}
		s, err := dynamo.New(client, opts...)
		if err != nil {
			t.Fatal(err)
		}
		lim, err := ratelimit.New(s, algorithms.GCRA(10, time.Hour, 10), ratelimit.WithName("api"))
		if err != nil {
			t.Fatal(err)
		}
		for i := range n {
			if _, err := lim.Allow(ctx, fmt.Sprint(prefix, "-user-", i)); err != nil {
				t.Fatal(err)
			}
		}
	}
	for prefix, n := range want {
		opts := []dynamo.Option{dynamo.WithTable(table)}
		if prefix != "" {
			opts = append(opts, dynamo.WithKeyPrefix(prefix))
		}
		s, _ := dynamo.New(client, opts...)
		now := time.Now().UnixMicro()
		for _, ns := range []string{"", "api:gcra"} {
			got := 0
			err := s.Export(ctx, ns, now, func(e store.Entry) error {
				if !strings.HasPrefix(e.Key.ID, prefix+"-user-") {
					return fmt.Errorf("store with prefix %q exported %q", prefix, e.Key.String())
				}
				got++
				return nil
			})
			if err != nil || got != n {
				t.Errorf("store with prefix %q: Export(%q) = %d keys, %v; want its own %d", prefix, ns, got, err, n)
			}
		}
	}
}

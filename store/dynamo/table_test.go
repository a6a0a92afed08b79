package dynamo_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/ratelimitkit/ratelimit"
	"github.com/ratelimitkit/ratelimit/algorithms"
	"github.com/ratelimitkit/ratelimit/internal/testserver"
	"github.com/ratelimitkit/ratelimit/store/dynamo"
)

// TestCreateTableConcurrently: four processes (clients of their own) call
// CreateTable at once on a fresh table name, each followed at once by a
// decision (a write): CreateTable returns only once the table is ACTIVE,
// whoever created it, so every first write succeeds, and exactly one
// caller reports that it created the table. Before the fix a caller that
// found the table CREATING returned at once, and its first write failed
// with ResourceNotFoundException. The test's own dynalite keeps a new
// table CREATING for 200ms, as DynamoDB does for a few seconds (the shared
// one makes tables ACTIVE at once).
func TestCreateTableConcurrently(t *testing.T) {
	endpoint := "http://" + testserver.StartDynaliteSlowTables(t, 200).Addr()
	const rounds, procs = 6, 4
	for r := range rounds {
		name := fmt.Sprintf("ratelimit-test-concurrent-%d-%08x", time.Now().UnixNano(), rand.Uint32())
		cleanup := newClient(endpoint)
		t.Cleanup(func() {
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			if _, err := cleanup.DeleteTable(ctx, &dynamodb.DeleteTableInput{TableName: &name}); err != nil {
				t.Logf("deleting table %s: %v", name, err)
			}
		})
		var wg sync.WaitGroup
		var mu sync.Mutex
		created := 0
		start := make(chan struct{})
		for p := range procs {
			client := newClient(endpoint)
			s, err := dynamo.New(client, dynamo.WithTable(name))
			if err != nil {
				t.Fatal(err)
			}
			lim, err := ratelimit.New(s, algorithms.GCRA(10, time.Second, 5), ratelimit.WithName("first"))
			if err != nil {
				t.Fatal(err)
			}
			wg.Go(func() {
				ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
				defer cancel()
				<-start
				st, err := dynamo.CreateTable(ctx, client, name)
				if err != nil {
					t.Errorf("round %d, process %d: CreateTable: %v", r, p, err)
					return
				}
				if d, err := lim.Allow(ctx, fmt.Sprint("k", p)); err != nil || !d.Allowed {
					t.Errorf("round %d, process %d: the first decision after CreateTable: allowed %v, %v", r, p, d.Allowed, err)
				}
				mu.Lock()
				if st.Created {
					created++
				}
				mu.Unlock()
			})
		}
		close(start)
		wg.Wait()
		if created != 1 {
			t.Errorf("round %d: %d of %d callers report that they created the table, want 1", r, created, procs)
		}
	}
}

// TestNoTable: a store on a table that does not exist fails every call with
// an error that says to run CreateTable, names the table, wraps
// dynamo.ErrNoTable and still reaches DynamoDB's
// ResourceNotFoundException.
func TestNoTable(t *testing.T) {
	client := newClient(testserver.DynamoDBEndpoint(t))
	name := fmt.Sprintf("ratelimit-test-missing-%d-%08x", time.Now().UnixNano(), rand.Uint32())
	s, err := dynamo.New(client, dynamo.WithTable(name))
	if err != nil {
		t.Fatal(err)
	}
	lim, err := ratelimit.New(s, algorithms.GCRA(10, time.Second, 5), ratelimit.WithName("missing"))
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	check := func(what string, err error) {
		t.Helper()
		var nf *types.ResourceNotFoundException
		switch {
		case err == nil:
			t.Errorf("%s on a missing table: no error", what)
		case !errors.Is(err, dynamo.ErrNoTable):
			t.Errorf("%s: error %q does not wrap dynamo.ErrNoTable", what, err)
		case !errors.As(err, &nf):
			t.Errorf("%s: error %q does not reach the ResourceNotFoundException", what, err)
		case !strings.Contains(err.Error(), "CreateTable") || !strings.Contains(err.Error(), name):
			t.Errorf("%s: error %q does not name the table and say to run CreateTable", what, err)
		}
	}
	_, err = lim.Allow(ctx, "k")
	check("Allow", err)
	_, err = lim.Peek(ctx, "k")
	check("Peek", err)
	check("Reset", lim.Reset(ctx, "k"))
}

// TestRefusedEndpoint: a store whose endpoint refuses connections (nothing
// listens there) answers every decision within 100ms with an error that
// says "connection refused" and wraps it (before: each decision retried
// the dial until the limiter's 1s budget was nearly spent, 650-1000ms).
func TestRefusedEndpoint(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	s, err := dynamo.New(newClient("http://" + addr))
	if err != nil {
		t.Fatal(err)
	}
	lim, err := ratelimit.New(s, algorithms.GCRA(10, time.Second, 5), ratelimit.WithName("refused"))
	if err != nil {
		t.Fatal(err)
	}
	for i := range 10 {
		start := time.Now()
		d, err := lim.Allow(context.Background(), "k")
		took := time.Since(start)
		switch {
		case err == nil || d.Allowed:
			t.Fatalf("Allow %d on an endpoint that refuses connections: allowed %v, %v", i, d.Allowed, err)
		case took > 100*time.Millisecond:
			t.Errorf("Allow %d answered after %v, want within 100ms: %v", i, took, err)
		case !errors.Is(err, syscall.ECONNREFUSED) || !strings.Contains(err.Error(), "connection refused"):
			t.Errorf("Allow %d: error %q does not say and wrap connection refused", i, err)
		}
	}
}

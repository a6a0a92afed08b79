package dynamo_test

import (
	"context"
	"testing"

	"github.com/ratelimitkit/ratelimit/internal/testserver"
	"github.com/ratelimitkit/ratelimit/store"
	"github.com/ratelimitkit/ratelimit/store/dynamo"
)

// frozen is the conformance harness's Freeze: a store on a private
// dynalite (testserver.StartDynalite) and a function that freezes the process with
// SIGSTOP, so that the FaultHungStore group holds every Limiter and lease
// call to its bound on a server that really stopped answering. The process
// is stopped when t ends.
func frozen(t *testing.T) (store.Store, func()) {
	srv := testserver.StartDynalite(t)
	client := newClient("http://" + srv.Addr())
	const table = "ratelimit-frozen"
	if _, err := dynamo.CreateTable(context.Background(), client, table); err != nil {
		t.Fatalf("dynamo.CreateTable: %v", err)
	}
	s, err := dynamo.New(client, dynamo.WithTable(table))
	if err != nil {
		t.Fatalf("dynamo.New: %v", err)
	}
	return s, srv.Freeze
}

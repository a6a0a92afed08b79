package dynamo_test

import (
	"context"
	"syscall"
	"testing"

	"github.com/ratelimitkit/ratelimit"
	"github.com/ratelimitkit/ratelimit/store/dynamo"
)

// frozen is the conformance harness's Freeze: a store on a private
// dynalite (startDynalite) and a function that freezes the process with
// SIGSTOP, so that the FaultHungStore group holds every Limiter and lease
// call to its bound on a server that really stopped answering. The process
// is killed when t ends (SIGKILL ends a stopped process too).
func frozen(t *testing.T) (ratelimit.Store, func()) {
	srv := startDynalite(t)
	client := newClient(srv.endpoint())
	const table = "ratelimit-frozen"
	if _, err := dynamo.CreateTable(context.Background(), client, table); err != nil {
		t.Fatalf("dynamo.CreateTable: %v", err)
	}
	s, err := dynamo.New(client, dynamo.WithTable(table))
	if err != nil {
		t.Fatalf("dynamo.New: %v", err)
	}
	return s, func() {
		if err := srv.cmd.Process.Signal(syscall.SIGSTOP); err != nil {
			t.Fatalf("freezing dynalite: %v", err)
		}
	}
}

// Command testservers starts and stops the servers `make test` runs the
// tests against; scripts/servers.sh installs them and calls it.
//
//	go run ./internal/testserver/cmd/testservers start STATEDIR
//	go run ./internal/testserver/cmd/testservers stop STATEDIR
//
// start runs testserver.Up: it starts what no RATELIMIT_* variable names,
// leaves the processes running, and writes STATEDIR/env for a shell to
// source. stop runs testserver.Down: it stops exactly what start started.
package main

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"github.com/ratelimitkit/ratelimit/internal/testserver"
)

func main() {
	if len(os.Args) != 3 || os.Args[1] != "start" && os.Args[1] != "stop" {
		fmt.Fprintln(os.Stderr, "usage: testservers start|stop STATEDIR")
		os.Exit(2)
	}
	var err error
	if os.Args[1] == "start" {
		// An interrupt ends the start, which stops what it started.
		ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
		err = testserver.Up(ctx, os.Args[2], os.Stderr)
		stop()
	} else {
		err = testserver.Down(os.Args[2])
	}
	if err != nil {
		fmt.Fprintf(os.Stderr, "testservers %s: %v\n", os.Args[1], err)
		os.Exit(1)
	}
}

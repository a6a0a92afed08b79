package testserver

import (
	"slices"
	"strconv"
	"testing"
)

// StartDynaliteSlowTables is StartDynalite with tables that stay CREATING
// for createTableMs milliseconds after CreateTable, as DynamoDB's do,
// instead of becoming ACTIVE at once: for tests of what happens while a
// table is being created.
func StartDynaliteSlowTables(t testing.TB, createTableMs int) *Server {
	t.Helper()
	cli, err := dynaliteCLI()
	if err != nil {
		missing(t, err.Error())
	}
	dir := t.TempDir()
	return startServer(t, func(port int) *proc {
		p := dynaliteProc(cli, dir, port)
		if i := slices.Index(p.args, "--createTableMs"); i >= 0 {
			p.args[i+1] = strconv.Itoa(createTableMs)
		}
		return p
	})
}

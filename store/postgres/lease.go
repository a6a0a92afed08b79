package postgres

import (
	"context"
	_ "embed"
	"fmt"
	"strings"
	"text/template"

	"github.com/ratelimitkit/ratelimit/algorithms/forms"
	"github.com/ratelimitkit/ratelimit/lease/leasewire"
	"github.com/ratelimitkit/ratelimit/store"
)

// The lease's transition (leasewire.Step) as the table's lease function
// (lease.sql), so that a lease's every call is one statement.
var (
	//go:embed lease.sql
	leaseSQL      string
	leaseTemplate = template.Must(template.New("lease.sql").Parse(leaseSQL))
)

// leaseFunction is the quoted name of the table's lease function: the
// table's name with "_lease" appended.
func (s *Store) leaseFunction() string { return s.ident(s.table + "_lease") }

// leaseFunctionSQL returns the table's lease function (see lease.sql),
// quoted with a dollar tag that occurs nowhere else in it.
func (s *Store) leaseFunctionSQL() string {
	data := struct{ Func, Table, Now, Corrupt, Tag string }{
		s.leaseFunction(), s.ident(s.table), nowSQL, forms.SQLErrCorrupt, "",
	}
	for i := 0; ; i++ {
		data.Tag = fmt.Sprintf("$rl%d$", i)
		var b strings.Builder
		execute(&b, leaseTemplate, data)
		if strings.Count(b.String(), data.Tag) == 2 {
			return b.String()
		}
	}
}

// RunLease implements leasewire.Runner: a lease's acquire, extend, release or
// read is one statement, a call of the table's lease function (lease.sql),
// which applies leasewire.Step's transition to the key's row with the row
// locked, in the row format Update writes, so a record written by either
// path is read by the other. With the server clock on (the default), it
// reads the server's clock, as Update does.
//
// On a table migrated by a release without the lease function, it runs
// Step through Update instead.
func (s *Store) RunLease(ctx context.Context, key store.Key, now int64, req leasewire.Request) (leasewire.Result, error) {
	if err := req.Check(now); err != nil {
		return leasewire.Result{}, fmt.Errorf("postgres: lease %q: %w", key, err)
	}
	if err := ctx.Err(); err != nil {
		return leasewire.Result{}, fmt.Errorf("postgres: lease %q: %w", key, err)
	}
	var at any
	if s.requestClock {
		at = now
	}
	var (
		res    []int64
		holder []byte
	)
	err := s.db.QueryRow(ctx, s.leaseSQL, keyBytes(key), at, int32(req.Op), req.Fence, req.TTL, req.Owner[:]).
		Scan(&res, &holder)
	if undefinedFunction(err) {
		return s.leaseByUpdate(ctx, key, now, req)
	}
	if err != nil {
		return leasewire.Result{}, s.fail(ctx, "lease", key, err)
	}
	if len(res) != 6 || holder != nil && len(holder) != len(leasewire.Token{}) {
		return leasewire.Result{}, fmt.Errorf("postgres: lease %q: unexpected reply %v, owner of %d bytes", key, res, len(holder))
	}
	r := leasewire.Result{Code: leasewire.Code(res[0]), Now: res[1], Fence: res[2], Expires: res[3], Released: res[4] == 1, Found: res[5] == 1}
	copy(r.Owner[:], holder)
	return r, nil
}

// leaseByUpdate applies req with Step through Update.
func (s *Store) leaseByUpdate(ctx context.Context, key store.Key, now int64, req leasewire.Request) (leasewire.Result, error) {
	var res leasewire.Result
	err := s.Update(ctx, key, now, func(cur []byte, now int64) ([]byte, int64, error) {
		next, ttl, r, err := leasewire.Step(cur, now, req)
		res = r
		return next, ttl, err
	})
	return res, err
}

package redisengine

import (
	"context"
	"fmt"

	"github.com/ratelimitkit/ratelimit"
	"github.com/ratelimitkit/ratelimit/lease"
)

// leaseScript is the lease's transition (lease.Step) as a script.
var leaseScript = NewScript("lease", lease.Lua, 0)

// RunLease implements lease.Runner: a lease's acquire, extend or release is
// one EVALSHA of lease.Lua, the Lua form of lease.Step, on the key Update
// writes, so a record written by either path is read by the other. With
// the server clock on, the script reads the server's TIME. The stores get
// it by embedding the engine.
func (e *Engine) RunLease(ctx context.Context, key ratelimit.Key, now int64, req lease.Request) (lease.Result, error) {
	what := func() string { return fmt.Sprintf("lease %q", key.String()) } // for errors only
	if err := req.Check(now); err != nil {
		return lease.Result{}, fmt.Errorf("%s: %s: %w", e.name, what(), err)
	}
	if err := ctx.Err(); err != nil {
		return lease.Result{}, fmt.Errorf("%s: %s: %w", e.name, what(), err)
	}
	args := []any{now, flag(e.serverClock), e.slackArg, int64(req.Op), string(req.Owner[:]), req.Fence, req.TTL}
	r, err := e.run(ctx, leaseScript, []string{StateKey(e.prefix, key) + UpdateSuffix}, args)
	if err != nil {
		return lease.Result{}, wrap(ctx, e.name, what(), err)
	}
	arr, ok := r.([]any)
	if !ok || len(arr) != 7 {
		return lease.Result{}, fmt.Errorf("%s: %s: unexpected reply %v", e.name, what(), r)
	}
	var n [7]int64
	for i, v := range arr {
		if i == 4 {
			continue
		}
		if n[i], ok = v.(int64); !ok {
			return lease.Result{}, fmt.Errorf("%s: %s: unexpected reply %v", e.name, what(), r)
		}
	}
	owner, _ := arr[4].(string)
	res := lease.Result{Code: lease.Code(n[0]), Now: n[1], Fence: n[2], Expires: n[3], Released: n[5] == 1, Found: n[6] == 1}
	switch {
	case owner == "" && (res.Found || res.Code == lease.OK && req.Op != lease.OpRead):
		res.Owner = req.Owner // the script leaves out the caller's own token
	case len(owner) == len(res.Owner):
		copy(res.Owner[:], owner)
	case owner != "":
		return lease.Result{}, fmt.Errorf("%s: %s: unexpected owner of %d bytes in reply", e.name, what(), len(owner))
	}
	return res, nil
}

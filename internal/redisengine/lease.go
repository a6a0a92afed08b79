package redisengine

import (
	"context"
	"encoding/binary"
	"fmt"

	"github.com/ratelimitkit/ratelimit/lease/leasewire"
	"github.com/ratelimitkit/ratelimit/store"
)

// leaseScript is the lease's transition (leasewire.Step) as a script.
var leaseScript = NewScript("lease", leasewire.Lua, 0)

// leaseArgLen is the length of leasewire.Lua's one argument, packed as
// '<i8BBi8i8i8c16': now, the server-clock flag, the op, the slack, the
// fence, the TTL and the owner token.
const leaseArgLen = 8 + 1 + 1 + 8 + 8 + 8 + len(leasewire.Token{})

// leaseArg packs req for leasewire.Lua.
func (e *Engine) leaseArg(now int64, req leasewire.Request) string {
	var b [leaseArgLen]byte
	binary.LittleEndian.PutUint64(b[0:], uint64(now))
	if e.serverClock {
		b[8] = 1
	}
	b[9] = byte(req.Op)
	binary.LittleEndian.PutUint64(b[10:], uint64(e.slack))
	binary.LittleEndian.PutUint64(b[18:], uint64(req.Fence))
	binary.LittleEndian.PutUint64(b[26:], uint64(req.TTL))
	copy(b[34:], req.Owner[:])
	return string(b[:])
}

// RunLease implements leasewire.Runner: a lease's acquire, extend or release is
// one EVALSHA of leasewire.Lua, the Lua form of leasewire.Step, on the key Update
// writes, so a record written by either path is read by the other. With
// the server clock on, the script reads the server's TIME. Concurrent calls
// share round trips as decisions do (see batcher) when the backend
// pipelines, and the calls of one batch on keys that may share a script
// run go as one run (leaseRun). The stores get it by embedding the engine.
func (e *Engine) RunLease(ctx context.Context, key store.Key, now int64, req leasewire.Request) (leasewire.Result, error) {
	if err := req.Check(now); err != nil {
		return leasewire.Result{}, fmt.Errorf("%s: lease %q: %w", e.name, key.String(), err)
	}
	if err := ctx.Err(); err != nil {
		return leasewire.Result{}, fmt.Errorf("%s: lease %q: %w", e.name, key.String(), err)
	}
	c := pendingPool.Get().(*pending)
	c.key[0] = StateKey(e.prefix, key) + UpdateSuffix
	c.args[0] = e.leaseArg(now, req)
	c.Script, c.Keys, c.Args = leaseScript, c.key[:], c.args[:1]
	var r any
	var err error
	if e.batch == nil {
		r, err = e.run(ctx, leaseScript, c.Keys, c.Args)
		c.release()
	} else if err = e.batch.do(ctx, c); err == nil {
		r, err = c.Reply, c.Err
		c.release() // no batch holds it once do returned nil
	}
	if err != nil {
		return leasewire.Result{}, wrap(ctx, e.name, fmt.Sprintf("lease %q", key.String()), err)
	}
	res, err := leaseResult(r, req)
	if err != nil {
		return leasewire.Result{}, fmt.Errorf("%s: lease %q: %w", e.name, key.String(), err)
	}
	return res, nil
}

// leaseResult decodes leasewire.Lua's reply to req: {now, fence, found} when
// the script wrote the record, and {code, now, fence, expires, owner,
// released, found} otherwise, the owner empty when it is req's.
func leaseResult(r any, req leasewire.Request) (leasewire.Result, error) {
	arr, ok := r.([]any)
	if !ok || len(arr) != 3 && len(arr) != 7 {
		return leasewire.Result{}, fmt.Errorf("unexpected reply %v", r)
	}
	var n [7]int64
	for i, v := range arr {
		if i == 4 && len(arr) == 7 {
			continue
		}
		if n[i], ok = v.(int64); !ok {
			return leasewire.Result{}, fmt.Errorf("unexpected reply %v", r)
		}
	}
	if len(arr) == 3 {
		// Written: Step's Result for an acquire, an extend or a release
		// that succeeded.
		res := leasewire.Result{Code: leasewire.OK, Now: n[0], Fence: n[1], Owner: req.Owner, Found: n[2] == 1}
		switch req.Op {
		case leasewire.OpAcquire, leasewire.OpExtend:
			res.Expires = res.Now + req.TTL
		case leasewire.OpRelease:
			res.Released = true
		default:
			return leasewire.Result{}, fmt.Errorf("unexpected reply %v to lease op %d", r, req.Op)
		}
		return res, nil
	}
	owner, _ := arr[4].(string)
	res := leasewire.Result{Code: leasewire.Code(n[0]), Now: n[1], Fence: n[2], Expires: n[3], Released: n[5] == 1, Found: n[6] == 1}
	switch {
	case owner == "" && res.Found:
		res.Owner = req.Owner // the script leaves out the caller's own token
	case len(owner) == len(res.Owner):
		copy(res.Owner[:], owner)
	case owner != "":
		return leasewire.Result{}, fmt.Errorf("unexpected owner of %d bytes in reply", len(owner))
	}
	return res, nil
}

// A leaseRun is the lease calls of a batch that one run of the lease
// script takes: leasewire.Lua takes several requests, each on its own key,
// in order, and reads the server's TIME once for all of them, so that a
// batch's lease calls on keys that may share a script run
// (Pipeliner.Slot: any keys on a standalone server) cost the server one
// script's dispatch, one TIME and one reply instead of one of each per
// call. Its reply is an array of the calls' replies, each what the call
// alone would have got.
type leaseRun struct {
	Call
	members []*pending // in arrival order
}

// leaseRuns is a batch's lease runs, one per slot, and the runs of
// earlier batches to reuse: a scratch's.
type leaseRuns struct {
	bySlot map[int]*leaseRun
	runs   []*leaseRun
	free   []*leaseRun
}

// reset makes the runs of the last batch free for the next.
func (l *leaseRuns) reset() {
	l.free = append(l.free, l.runs...)
	clear(l.runs)
	l.runs = l.runs[:0]
	clear(l.bySlot)
}

// add puts c, a lease call whose key's slot is slot, in its slot's run (a
// new run once one holds maxRunKeys calls). A key whose slot is negative
// shares no run: c goes as its own call.
func (l *leaseRuns) add(c *pending, slot int) {
	if slot < 0 {
		return
	}
	r := l.bySlot[slot]
	if r == nil || len(r.members) == maxRunKeys {
		if n := len(l.free); n > 0 {
			r, l.free = l.free[n-1], l.free[:n-1]
			clear(r.members)
			*r = leaseRun{members: r.members[:0], Call: Call{Keys: r.Keys[:0], Args: r.Args[:0]}}
		} else {
			r = new(leaseRun)
		}
		if l.bySlot == nil {
			l.bySlot = make(map[int]*leaseRun)
		}
		l.bySlot[slot] = r
		l.runs = append(l.runs, r)
	}
	r.members = append(r.members, c)
}

// build sets each run's call, for runs of two calls or more, and marks
// their calls as sent by it; a call alone in its run goes as its own.
func (l *leaseRuns) build() {
	kept := l.runs[:0]
	for _, r := range l.runs {
		if len(r.members) < 2 {
			l.free = append(l.free, r)
			continue
		}
		keys, args := r.Keys[:0], r.Args[:0]
		for _, c := range r.members {
			keys = append(keys, c.Keys[0])
			args = append(args, c.Args[0])
			c.inRun = true
		}
		r.Call = Call{Script: leaseScript, Keys: keys, Args: args}
		r.members[0].leaseRun = r
		kept = append(kept, r)
	}
	clear(l.runs[len(kept):])
	l.runs = kept
}

// spread hands each run's outcome to its calls: the run's error to every
// call, the reply's items one per call (an error item as that call's
// error), or, for a reply of the wrong shape, the whole reply to each,
// which leaseResult rejects.
func (l *leaseRuns) spread() {
	for _, r := range l.runs {
		items, ok := r.Reply.([]any)
		ok = ok && len(items) == len(r.members)
		for i, c := range r.members {
			switch {
			case r.Err != nil:
				c.Reply, c.Err = nil, r.Err
			case !ok:
				c.Reply, c.Err = r.Reply, nil
			default:
				if err, isErr := items[i].(error); isErr {
					c.Reply, c.Err = nil, err
				} else {
					c.Reply, c.Err = items[i], nil
				}
			}
		}
	}
}

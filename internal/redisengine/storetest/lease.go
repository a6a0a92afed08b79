package storetest

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/ratelimitkit/ratelimit"
	"github.com/ratelimitkit/ratelimit/algorithms"
	"github.com/ratelimitkit/ratelimit/internal/redisengine"
	"github.com/ratelimitkit/ratelimit/lease/leasewire"
	"github.com/ratelimitkit/ratelimit/store"
)

// CoalescedLeases checks that lease calls queued behind a batch in flight
// go as one run of the lease script (leasewire.Lua takes several requests)
// and that each gets, field by field, the result the same requests get one
// after another on another prefix: acquires, extends, releases and reads
// by three owners on two keys, with the fences the owners were given and
// stale ones, leases that run out between calls, a key with a corrupt
// record, which fails only its own calls, and calls whose context ends
// while they wait, which never run. Each record afterwards is the same
// too. It needs a store whose every key may share a run (a standalone
// server's): on a cluster, lease keys of different slots share none.
func CoalescedLeases(t *testing.T, tg Target, q Queue) {
	ctx := context.Background()
	pa, pb := fmt.Sprintf("rltest-col-%d-a", time.Now().UnixNano()), fmt.Sprintf("rltest-col-%d-b", time.Now().UnixNano())
	sa, sb := tg.NewStore(t, pa, false), tg.NewStore(t, pb, false)
	ra, rb := sa.(leasewire.Runner), sb.(leasewire.Runner)
	ns := "col" + leasewire.NamespaceSuffix
	keys := []store.Key{{Namespace: ns, ID: "x"}, {Namespace: ns, ID: "y"}}
	bad := store.Key{Namespace: ns, ID: "bad"}
	for _, p := range []string{pa, pb} {
		if err := tg.Set(ctx, redisengine.StateKey(p, bad)+redisengine.UpdateSuffix, "garbage"); err != nil {
			t.Fatal(err)
		}
	}
	type call struct {
		key    store.Key
		now    int64
		req    leasewire.Request
		cancel bool
		res    leasewire.Result
		err    error
	}
	owners := []leasewire.Token{{1}, {2}, {3}}
	const acquire, extend, release, read = leasewire.OpAcquire, leasewire.OpExtend, leasewire.OpRelease, leasewire.OpRead
	none := -1
	steps := []struct {
		key, owner int // keys[key], or bad when key is 2; owners[owner]
		op         leasewire.Op
		fenceOf    int  // the step whose acquire's time is the fence, or none
		stale      bool // the fence after that one
		wait       bool // after the lease's TTL
		cancel     bool
	}{
		{0, 0, acquire, none, false, false, false},
		{1, 1, acquire, none, false, false, false},
		{0, 1, acquire, none, false, false, false}, // held
		{2, 0, acquire, none, false, false, false}, // corrupt
		{0, 0, extend, 0, false, false, false},
		{1, 1, read, none, false, false, true},
		{1, 1, extend, 1, true, false, true},
		{0, 0, release, 0, true, false, false}, // stale: lost
		{0, 0, release, 0, false, false, false},
		{0, 0, release, 0, false, false, false}, // a retried release
		{0, 2, acquire, none, false, false, false},
		{1, 1, release, 1, false, false, false},
		{2, 1, read, none, false, false, false},
		{0, 2, extend, 10, false, false, false},
		{1, 0, acquire, none, false, false, false},
		{0, 1, read, none, false, false, true},
		{0, 1, acquire, none, false, true, false}, // x's lease has run out
		{0, 2, extend, 10, false, false, false},   // lost to the takeover
		{1, 0, extend, 14, false, false, false},   // run out
		{1, 2, acquire, none, false, false, false},
		{0, 1, release, 16, false, false, false},
		{2, 2, release, none, false, false, false},
	}
	base := time.Now().UnixMicro()
	now := base
	var calls []*call
	for _, st := range steps {
		now += 60_000
		if st.wait {
			now += 1_200_000
		}
		c := &call{key: bad, now: now, cancel: st.cancel}
		if st.key < len(keys) {
			c.key = keys[st.key]
		}
		c.req = leasewire.Request{Op: st.op, Owner: owners[st.owner], TTL: 1_000_000}
		if st.fenceOf != none {
			c.req.Fence = calls[st.fenceOf].now // a free key's fence: the time it was taken
			if st.stale {
				c.req.Fence++
			}
		}
		calls = append(calls, c)
	}

	alg := algorithms.GCRA(5, time.Second, 5)
	first := store.Key{Namespace: "col", ID: "first"}
	if _, err := sa.(store.Decider).Decide(ctx, first, alg, algorithms.Request{Now: base, Cost: 1}); err != nil {
		t.Fatal(err) // the scripts loaded and the connection open
	}
	for _, k := range append(keys, bad) { // the lease script loaded
		if _, err := ra.RunLease(ctx, store.Key{Namespace: ns, ID: "load-" + k.ID}, base, leasewire.Request{Op: leasewire.OpRead, TTL: 1}); err != nil {
			t.Fatal(err)
		}
	}
	scripts := q.Scripts()
	queueCalls(t, q, sa, first, alg, base, len(calls), func(i int) bool { return calls[i].cancel }, func(ctx context.Context, i int) error {
		c := calls[i]
		c.res, c.err = ra.RunLease(ctx, c.key, c.now, c.req)
		return c.err
	})
	if got := q.Scripts() - scripts; got != 2 {
		t.Errorf("%d scripts sent for the held decision and the queued lease calls, want 2 (the decision, one run of the lease calls)", got)
	}
	oks := map[leasewire.Op]int{}
	for i, c := range calls {
		if c.cancel {
			continue
		}
		want, err := rb.RunLease(ctx, c.key, c.now, c.req)
		if c.key == bad {
			if !errors.Is(err, ratelimit.ErrCorruptState) || !errors.Is(c.err, ratelimit.ErrCorruptState) {
				t.Errorf("call %d on a corrupt record: in a run %v, alone %v; want ErrCorruptState from both", i, c.err, err)
			}
			continue
		}
		if err != nil || c.err != nil {
			t.Fatalf("call %d: in a run %v, alone %v", i, c.err, err)
		}
		if c.res != want {
			t.Errorf("call %d (op %d, owner %x, fence %d): in a run %+v, alone %+v", i, c.req.Op, c.req.Owner[0], c.req.Fence, c.res, want)
		}
		if want.Code == leasewire.OK {
			oks[c.req.Op]++
		}
	}
	if oks[acquire] < 4 || oks[extend] < 2 || oks[release] < 3 {
		t.Errorf("calls that succeeded, by op: %v; want at least 4 acquires, 2 extends and 3 releases, or the sequence tests little", oks)
	}
	for _, k := range keys {
		ga, ea, err1 := q.State(sa)(ctx, k)
		gb, eb, err2 := q.State(sb)(ctx, k)
		if err := errors.Join(err1, err2); err != nil {
			t.Fatal(err)
		}
		if string(ga) != string(gb) || ea != eb {
			t.Errorf("record of %s after the run %x (expires %d), one after another %x (expires %d)", k.ID, ga, ea, gb, eb)
		}
	}
}

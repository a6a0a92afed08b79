package storetest

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"testing"
	"time"

	"github.com/ratelimitkit/ratelimit"
	"github.com/ratelimitkit/ratelimit/algorithms"
	"github.com/ratelimitkit/ratelimit/internal/redisengine"
)

// Queue is what Coalesced needs of a store package beyond a Target.
type Queue struct {
	// Hold makes the next decision the store sends alone wait before the
	// server answers it, until release is called.
	Hold func(t *testing.T) (release func())
	// Queued returns how many decisions wait behind the batch in flight on
	// s, or -1 when none is in flight (redisengine.Queued).
	Queued func(s ratelimit.Store) int
	// Scripts returns how many scripts the store's client has sent so far.
	Scripts func() int64
	// State reads a key's state (redisengine.StateReader).
	State func(s ratelimit.Store) func(context.Context, ratelimit.Key) ([]byte, int64, error)
}

// Coalesced checks that decisions queued behind a batch in flight, several
// on one key, are decided in one run of the coalesced form and that each
// gets, field by field, the decision the same requests get decided one
// after another on another prefix: peeks mixed with admissions, different
// costs and times (on the limiter's clock), a key with corrupt state in the
// same batch that fails only its own decisions, and decisions whose context
// ends while they wait, which are never decided. The key's state
// afterwards is the same too. With other, alg and other take turns on one
// key (no corrupt key, nothing cancelled): nothing coalesces and each
// decision is its own script run, in arrival order.
func Coalesced(t *testing.T, tg Target, q Queue, alg, other algorithms.Algorithm) {
	ctx := context.Background()
	pa, pb := fmt.Sprintf("rltest-co-%d-a", time.Now().UnixNano()), fmt.Sprintf("rltest-co-%d-b", time.Now().UnixNano())
	sa, sb := tg.NewStore(t, pa, false), tg.NewStore(t, pb, false)
	da, db := sa.(ratelimit.Decider), sb.(ratelimit.Decider)
	hot := ratelimit.Key{Namespace: "co", ID: "hot"}
	bad := ratelimit.Key{Namespace: "co", ID: "bad"}
	for _, p := range []string{pa, pb} {
		if err := tg.Set(ctx, redisengine.StateKey(p, bad), "garbage"); err != nil {
			t.Fatal(err)
		}
	}
	type call struct {
		alg      algorithms.Algorithm
		key      ratelimit.Key
		req      algorithms.Request
		cancel   bool // its context ends while it waits
		d        algorithms.Decision
		err      error
		returned chan struct{}
	}
	base := time.Now().UnixMicro()
	var calls []*call
	for i := range 30 {
		cl := &call{alg: alg, key: hot, returned: make(chan struct{})}
		cl.req = algorithms.Request{Now: base + int64(i/2)*70_000, Cost: 1 + int64(i%3), Peek: i%5 == 3}
		switch {
		case other != nil:
			if i%2 == 1 {
				cl.alg = other
			}
		case i%7 == 2:
			cl.key = bad
		case i == 10 || i == 21:
			cl.cancel = true
		}
		calls = append(calls, cl)
	}

	// A lone decision on another key, held on its way, so that the calls
	// queue behind it in a known order.
	first := ratelimit.Key{Namespace: "co", ID: "first"}
	if _, err := da.Decide(ctx, first, alg, algorithms.Request{Now: base, Cost: 1}); err != nil {
		t.Fatal(err) // the script loaded and the connection open
	}
	scripts := q.Scripts()
	release := q.Hold(t)
	firstDone := make(chan error, 1)
	go func() {
		_, err := da.Decide(ctx, first, alg, algorithms.Request{Now: base, Cost: 1})
		firstDone <- err
	}()
	waitFor(t, func() bool { return q.Queued(sa) == 0 })
	for i, cl := range calls {
		cctx, cancel := context.WithCancel(ctx)
		defer cancel()
		go func() {
			defer close(cl.returned)
			cl.d, cl.err = da.Decide(cctx, cl.key, cl.alg, cl.req)
		}()
		waitFor(t, func() bool { return q.Queued(sa) == i+1 })
		if cl.cancel {
			cancel()
			<-cl.returned
			if !errors.Is(cl.err, context.Canceled) {
				t.Fatalf("a decision cancelled while queued: %v, want context.Canceled", cl.err)
			}
		}
	}
	release()
	if err := <-firstDone; err != nil {
		t.Fatal(err)
	}
	for _, cl := range calls {
		<-cl.returned
	}
	// The first, then the hot key's decisions and the corrupt key's as
	// two runs, or, with two sets of numbers on one key, each as its own.
	want := int64(1 + 2)
	if other != nil {
		want = int64(1 + len(calls))
	}
	if got := q.Scripts() - scripts; got != want {
		t.Errorf("%d scripts sent for the held decision and the queued ones, want %d", got, want)
	}

	// The same requests but the cancelled ones, one after another.
	for i, cl := range calls {
		if cl.cancel {
			continue
		}
		want, err := db.Decide(ctx, cl.key, cl.alg, cl.req)
		if cl.key == bad {
			if !errors.Is(err, ratelimit.ErrCorruptState) || !errors.Is(cl.err, ratelimit.ErrCorruptState) {
				t.Errorf("call %d on corrupt state: coalesced %v, sequential %v; want ErrCorruptState from both", i, cl.err, err)
			}
			continue
		}
		if err != nil || cl.err != nil {
			t.Fatalf("call %d: coalesced %v, sequential %v", i, cl.err, err)
		}
		if !reflect.DeepEqual(cl.d, want) {
			t.Errorf("call %d %+v: coalesced %+v, sequential %+v", i, cl.req, cl.d, want)
		}
	}
	ga, ea, err1 := q.State(sa)(ctx, hot)
	gb, eb, err2 := q.State(sb)(ctx, hot)
	if err := errors.Join(err1, err2); err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(ga, gb) || ea != eb {
		t.Errorf("state after coalesced decisions %v (expires %d), after sequential %v (expires %d)", ga, ea, gb, eb)
	}
}

// CoalescedAlgorithms are the algorithms Coalesced runs with: every one
// with a coalesced form, at numbers a 30-request test runs out of.
func CoalescedAlgorithms() []algorithms.Algorithm {
	return []algorithms.Algorithm{
		algorithms.GCRA(5, time.Second, 5),
		algorithms.TokenBucket(5, time.Second, 5),
		algorithms.LeakyBucket(5, time.Second, 5),
		algorithms.FixedWindow(5, time.Second),
		algorithms.SlidingWindow(5, time.Second),
	}
}

func waitFor(t *testing.T, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatal("condition not met within 10s")
		}
		time.Sleep(5 * time.Millisecond)
	}
}

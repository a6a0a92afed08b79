package redis_test

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
	"github.com/ratelimitkit/ratelimit/store/redis"
)

// TestCoalescedEqualSequential checks that decisions queued behind a batch
// in flight, several on one key, are decided in one run of the coalesced
// form and each gets, field by field, the decision the same requests get
// decided one after another on another prefix: peeks mixed with
// admissions, different costs and times (on the limiter's clock), a key
// with corrupt state in the same batch that fails only its own decisions,
// and a decision whose context ends while it waits, which is never
// decided. The key's state afterwards is the same too. On the standalone
// server and the cluster, for every algorithm with a coalesced form.
func TestCoalescedEqualSequential(t *testing.T) {
	algs := []algorithms.Algorithm{
		algorithms.GCRA(5, time.Second, 5),
		algorithms.TokenBucket(5, time.Second, 5),
		algorithms.LeakyBucket(5, time.Second, 5),
		algorithms.FixedWindow(5, time.Second),
		algorithms.SlidingWindow(5, time.Second),
	}
	for _, onCluster := range []bool{false, true} {
		for _, alg := range algs {
			name := map[bool]string{false: "standalone", true: "cluster"}[onCluster] + "/" + alg.Name()
			t.Run(name, func(t *testing.T) { coalescedEqualSequential(t, onCluster, alg, nil) })
		}
		// One key decided with two sets of numbers: nothing coalesces, each
		// decision is its own script run, in arrival order.
		name := map[bool]string{false: "standalone", true: "cluster"}[onCluster] + "/mixed numbers"
		t.Run(name, func(t *testing.T) {
			coalescedEqualSequential(t, onCluster, algorithms.GCRA(5, time.Second, 5), algorithms.GCRA(6, time.Second, 6))
		})
	}
}

// coalescedEqualSequential runs the test with alg, or, when other is not
// nil, with alg and other in turn on one key and no corrupt key nor
// cancelled decisions.
func coalescedEqualSequential(t *testing.T, onCluster bool, alg, other algorithms.Algorithm) {
	ctx := context.Background()
	g := newGate()
	c := hooked(t, g, onCluster)
	ref := standalone(t)
	if onCluster {
		ref = cluster(t)
	}
	pa, pb := uniquePrefix(), uniquePrefix()
	sa, err := redis.New(c, redis.WithPrefix(pa), redis.WithServerClock(false))
	if err != nil {
		t.Fatal(err)
	}
	sb, err := redis.New(ref, redis.WithPrefix(pb), redis.WithServerClock(false))
	if err != nil {
		t.Fatal(err)
	}
	hot := ratelimit.Key{Namespace: "co", ID: "hot"}
	bad := ratelimit.Key{Namespace: "co", ID: "bad"}
	for _, p := range []string{pa, pb} {
		if err := ref.Set(ctx, redisengine.StateKey(p, bad), "garbage", time.Minute).Err(); err != nil {
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

	// A lone decision on another key, held on its way to the server, so
	// that the calls queue behind it in a known order.
	g.hold.Store(true)
	firstDone := make(chan error, 1)
	go func() {
		_, err := sa.Decide(ctx, ratelimit.Key{Namespace: "co", ID: "first"}, alg, algorithms.Request{Now: base, Cost: 1})
		firstDone <- err
	}()
	select {
	case <-g.held:
	case <-time.After(10 * time.Second):
		t.Fatal("the first decision never reached the server")
	}
	for i, cl := range calls {
		cctx, cancel := context.WithCancel(ctx)
		defer cancel()
		go func() {
			defer close(cl.returned)
			cl.d, cl.err = sa.Decide(cctx, cl.key, cl.alg, cl.req)
		}()
		waitFor(t, func() bool { return redis.Queued(sa) == i+1 })
		if cl.cancel {
			cancel()
			<-cl.returned
			if !errors.Is(cl.err, context.Canceled) {
				t.Fatalf("a decision cancelled while queued: %v, want context.Canceled", cl.err)
			}
		}
	}
	piped := g.piped.Load()
	g.release <- struct{}{}
	if err := <-firstDone; err != nil {
		t.Fatal(err)
	}
	for _, cl := range calls {
		<-cl.returned
	}
	// The hot key's decisions and the corrupt key's went as two runs, or,
	// with two sets of numbers on one key, each as its own.
	want := int64(2)
	if other != nil {
		want = int64(len(calls))
	}
	if got := g.piped.Load() - piped; got != want {
		t.Errorf("%d scripts sent in pipelines for the queued decisions, want %d", got, want)
	}

	// The same requests but the cancelled ones, one after another.
	for i, cl := range calls {
		if cl.cancel {
			continue
		}
		want, err := sb.Decide(ctx, cl.key, cl.alg, cl.req)
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
	ga, ea, err1 := redis.State(sa)(ctx, hot)
	gb, eb, err2 := redis.State(sb)(ctx, hot)
	if err := errors.Join(err1, err2); err != nil {
		t.Fatal(err)
	}
	if fmt.Sprint(ga, ea) != fmt.Sprint(gb, eb) {
		t.Errorf("state after coalesced decisions %v (expires %d), after sequential %v (expires %d)", ga, ea, gb, eb)
	}
	ta, tb := c.PTTL(ctx, redisengine.StateKey(pa, hot)).Val(), ref.PTTL(ctx, redisengine.StateKey(pb, hot)).Val()
	if ta <= 0 || tb <= 0 || (ta-tb).Abs() > 2*time.Second {
		t.Errorf("key expiry after coalesced decisions %v, after sequential %v", ta, tb)
	}
}

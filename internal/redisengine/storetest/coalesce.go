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
	"github.com/ratelimitkit/ratelimit/store"
)

// Queue is what Coalesced needs of a store package beyond a Target.
type Queue struct {
	// Hold makes the next decision the store sends alone wait before the
	// server answers it, until release is called.
	Hold func(t *testing.T) (release func())
	// Queued returns how many decisions wait behind the batch in flight on
	// s, or -1 when none is in flight (redisengine.Queued).
	Queued func(s store.Store) int
	// Scripts returns how many scripts the store's client has sent so far.
	Scripts func() int64
	// State reads a key's state (redisengine.StateReader).
	State func(s store.Store) func(context.Context, store.Key) ([]byte, int64, error)
	// Slot is the store's rule for which keys may share a script run
	// (redisengine.Pipeliner's Slot): 0 for every key on a standalone
	// server, and on a cluster whose store has a redisengine.Router, 0
	// too, since the tests then choose keys on one node (see Node), where
	// any keys share a run; redisengine.ClusterSlot on a cluster without.
	Slot func(key string) int
	// Node, on a cluster whose store has a redisengine.Router, returns the
	// master that serves key. Each master's decisions have a batcher of
	// their own, so only the decisions on the held decision's master queue
	// behind it: the tests then choose every key on that master. Nil
	// otherwise.
	Node func(key string) int
}

// onNode returns the key of namespace ns whose ID is id, or, with q.Node,
// the first of id, id-0, id-1, ... whose state key under prefix lies on
// the master of near's: so that its decisions queue behind near's.
func (q Queue) onNode(prefix, ns, id string, near store.Key) store.Key {
	k := store.Key{Namespace: ns, ID: id}
	if q.Node == nil {
		return k
	}
	want := q.Node(redisengine.StateKey(prefix, near))
	for i := 0; q.Node(redisengine.StateKey(prefix, k)) != want; i++ {
		k.ID = fmt.Sprintf("%s-%d", id, i)
	}
	return k
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
	da, db := sa.(store.Decider), sb.(store.Decider)
	first := store.Key{Namespace: "co", ID: "first"}
	hot := q.onNode(pa, "co", "hot", first)
	bad := q.onNode(pa, "co", "bad", first)
	for _, p := range []string{pa, pb} {
		if err := tg.Set(ctx, redisengine.StateKey(p, bad), "garbage"); err != nil {
			t.Fatal(err)
		}
	}
	base := time.Now().UnixMicro()
	var calls []*queued
	for i := range 30 {
		cl := &queued{alg: alg, key: hot}
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
	if _, err := da.Decide(ctx, first, alg, algorithms.Request{Now: base, Cost: 1}); err != nil {
		t.Fatal(err) // the script loaded and the connection open
	}
	scripts := q.Scripts()
	queueBehind(t, q, sa, first, alg, base, calls)
	// The first, then the hot key's decisions and the corrupt key's as one
	// run when they may share one, two otherwise, or, with two sets of
	// numbers on one key, each as its own.
	want := int64(1 + 2)
	slot := q.Slot
	if _, composite := alg.(algorithms.Composite); composite && q.Node != nil {
		// The composite form has no node form: on a cluster, its
		// decisions share a run within one hash slot only.
		slot = redisengine.ClusterSlot
	}
	if h, b := slot(redisengine.StateKey(pa, hot)), slot(redisengine.StateKey(pa, bad)); h >= 0 && h == b {
		want = 1 + 1
	}
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

// CoalescedKeys checks that decisions on many keys queued behind a batch
// in flight share script runs as the store's Slot rule allows, one run per
// algorithm and slot, and that each gets, field by field, the decision the
// same requests get decided one after another on another prefix: keys
// with one algorithm at two sets of numbers in one run, other algorithms
// beside them, peeks, costs and times (on the limiter's clock), a key with
// corrupt state among healthy ones in a run, which fails only its own
// decisions, a key decided with two sets of numbers (each its own call),
// and decisions whose context ends while they wait, which are never
// decided. Every key's state afterwards is the same too.
func CoalescedKeys(t *testing.T, tg Target, q Queue) {
	ctx := context.Background()
	pa, pb := fmt.Sprintf("rltest-ck-%d-a", time.Now().UnixNano()), fmt.Sprintf("rltest-ck-%d-b", time.Now().UnixNano())
	sa, sb := tg.NewStore(t, pa, false), tg.NewStore(t, pb, false)
	da, db := sa.(store.Decider), sb.(store.Decider)
	gA, gB := algorithms.GCRA(5, time.Second, 5), algorithms.GCRA(7, time.Second, 3)
	tb, fw := algorithms.TokenBucket(5, time.Second, 5), algorithms.FixedWindow(5, time.Second)

	// Keys in two hash slots, several in each (so that on a cluster too
	// keys share runs), and one in a slot of its own; with q.Node, all on
	// the master of first's.
	key := func(id string) store.Key { return store.Key{Namespace: "ck", ID: id} }
	first := key("first")
	slotIDs := func(anchor string, n int) []string {
		anchor = q.onNode(pa, "ck", anchor, first).ID
		want := redisengine.ClusterSlot(redisengine.StateKey(pa, store.Key{Namespace: "ck", ID: anchor}))
		ids := []string{anchor}
		for i := 0; len(ids) < n; i++ {
			id := fmt.Sprintf("%s-%d", anchor, i)
			if redisengine.ClusterSlot(redisengine.StateKey(pa, store.Key{Namespace: "ck", ID: id})) == want {
				ids = append(ids, id)
			}
		}
		return ids
	}
	as, bs := slotIDs("a", 6), slotIDs("b", 3)
	lone := q.onNode(pa, "ck", "lone", first)
	type use struct {
		key store.Key
		alg algorithms.Algorithm
	}
	bad, mixed := key(as[4]), key(as[5])
	uses := []use{
		{key(as[0]), gA}, {key(as[1]), gA}, {key(as[2]), gB}, {key(as[3]), tb}, {bad, gA}, {mixed, gA}, {mixed, gB},
		{key(bs[0]), gA}, {key(bs[1]), tb}, {key(bs[2]), fw}, {lone, fw}, {q.onNode(pa, "ck", "c", first), gB}, {q.onNode(pa, "ck", "d", first), gA},
	}
	for _, p := range []string{pa, pb} {
		if err := tg.Set(ctx, redisengine.StateKey(p, bad), "garbage"); err != nil {
			t.Fatal(err)
		}
	}
	base := time.Now().UnixMicro()
	var calls []*queued
	for i := range 48 {
		u := uses[i%len(uses)]
		if u.key == lone && i >= len(uses) {
			u = uses[0] // "lone" is decided once: alone in its run
		}
		cl := &queued{alg: u.alg, key: u.key}
		cl.req = algorithms.Request{Now: base + int64(i/4)*60_000, Cost: 1 + int64(i%3), Peek: i%5 == 3}
		cl.cancel = i == 14 || i == 27 // on keys decided again after
		calls = append(calls, cl)
	}

	if _, err := da.Decide(ctx, first, gA, algorithms.Request{Now: base, Cost: 1}); err != nil {
		t.Fatal(err)
	}
	for _, a := range []algorithms.Algorithm{tb, fw} { // every script loaded
		if _, err := da.Decide(ctx, key("warm-"+a.Name()), a, algorithms.Request{Now: base, Cost: 1}); err != nil {
			t.Fatal(err)
		}
	}
	scripts := q.Scripts()
	queueBehind(t, q, sa, first, gA, base, calls)

	// The runs the rule allows: per key, its decisions (each its own call
	// when it has two sets of numbers); per algorithm and slot, one run.
	type runKey struct {
		alg  string
		slot int
		key  string // set when the slot is negative: a run per key
	}
	algOf := map[store.Key]algorithms.Algorithm{}
	count := map[store.Key]int{}
	mixedKeys := map[store.Key]bool{}
	for _, cl := range calls {
		if cl.cancel {
			continue
		}
		if a, ok := algOf[cl.key]; ok && a != cl.alg {
			mixedKeys[cl.key] = true
		}
		algOf[cl.key] = cl.alg
		count[cl.key]++
	}
	want := int64(1) // the held decision
	runs := map[runKey]bool{}
	for k, a := range algOf {
		if mixedKeys[k] {
			want += int64(count[k])
			continue
		}
		rk := runKey{alg: a.Name(), slot: q.Slot(redisengine.StateKey(pa, k))}
		if rk.slot < 0 {
			rk.key = k.ID
		}
		runs[rk] = true
	}
	want += int64(len(runs))
	if got := q.Scripts() - scripts; got != want {
		t.Errorf("%d scripts sent for the held decision and %d queued ones, want %d", got, len(calls), want)
	}

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
			t.Fatalf("call %d on %s: coalesced %v, sequential %v", i, cl.key.ID, cl.err, err)
		}
		if !reflect.DeepEqual(cl.d, want) {
			t.Errorf("call %d on %s %+v: coalesced %+v, sequential %+v", i, cl.key.ID, cl.req, cl.d, want)
		}
	}
	for k := range algOf {
		if k == bad {
			continue
		}
		ga, ea, err1 := q.State(sa)(ctx, k)
		gb, eb, err2 := q.State(sb)(ctx, k)
		if err := errors.Join(err1, err2); err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(ga, gb) || ea != eb {
			t.Errorf("state of %s after coalesced decisions %v (expires %d), after sequential %v (expires %d)", k.ID, ga, ea, gb, eb)
		}
	}
}

// queued is one decision that Coalesced or CoalescedKeys queues behind a
// batch in flight, and its outcome.
type queued struct {
	alg    algorithms.Algorithm
	key    store.Key
	req    algorithms.Request
	cancel bool // its context ends while it waits
	d      algorithms.Decision
	err    error
}

// queueBehind decides first (with alg at now) alone on s while the store
// holds it on its way, queues calls behind it in order, one by one (ending
// the context of each one marked cancel while it waits, which must then
// return context.Canceled), then lets first through and waits until every
// call has returned.
func queueBehind(t *testing.T, q Queue, s store.Store, first store.Key, alg algorithms.Algorithm, now int64, calls []*queued) {
	t.Helper()
	d := s.(store.Decider)
	queueCalls(t, q, s, first, alg, now, len(calls), func(i int) bool { return calls[i].cancel }, func(ctx context.Context, i int) error {
		cl := calls[i]
		cl.d, cl.err = d.Decide(ctx, cl.key, cl.alg, cl.req)
		return cl.err
	})
}

// queueCalls is queueBehind for any n calls: call(ctx, i) makes call i and
// returns its error, and cancel(i) says whether its context ends while it
// waits.
func queueCalls(t *testing.T, q Queue, s store.Store, first store.Key, alg algorithms.Algorithm, now int64, n int, cancel func(i int) bool, call func(ctx context.Context, i int) error) {
	t.Helper()
	ctx := context.Background()
	d := s.(store.Decider)
	release := q.Hold(t)
	firstDone := make(chan error, 1)
	go func() {
		_, err := d.Decide(ctx, first, alg, algorithms.Request{Now: now, Cost: 1})
		firstDone <- err
	}()
	waitFor(t, func() bool { return q.Queued(s) == 0 })
	returned := make([]chan error, n)
	for i := range n {
		cctx, end := context.WithCancel(ctx)
		defer end()
		returned[i] = make(chan error, 1)
		go func() { returned[i] <- call(cctx, i) }()
		waitFor(t, func() bool { return q.Queued(s) == i+1 })
		if cancel(i) {
			end()
			err := <-returned[i]
			returned[i] <- err
			if !errors.Is(err, context.Canceled) {
				t.Fatalf("a call cancelled while queued: %v, want context.Canceled", err)
			}
		}
	}
	release()
	if err := <-firstDone; err != nil {
		t.Fatal(err)
	}
	for _, r := range returned {
		<-r
	}
}

// CoalescedAlgorithms are the algorithms Coalesced runs with: every one
// with a coalesced form, at numbers a 30-request test runs out of, and two
// composites (the coalesced composite form), one with a sliding log part.
func CoalescedAlgorithms() []algorithms.Algorithm {
	return []algorithms.Algorithm{
		algorithms.GCRA(5, time.Second, 5),
		algorithms.TokenBucket(5, time.Second, 5),
		algorithms.LeakyBucket(5, time.Second, 5),
		algorithms.FixedWindow(5, time.Second),
		algorithms.SlidingWindow(5, time.Second),
		algorithms.All(algorithms.GCRA(5, time.Second, 5), algorithms.FixedWindow(8, time.Second)),
		algorithms.All(algorithms.SlidingLog(6, time.Second), algorithms.TokenBucket(5, time.Second, 5)),
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

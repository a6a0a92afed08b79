package redisengine

import (
	"context"
	"encoding/binary"
	"math"
	"runtime"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/ratelimitkit/ratelimit/algorithms"
	"github.com/ratelimitkit/ratelimit/algorithms/forms"
	"github.com/ratelimitkit/ratelimit/internal/ctxaware"
)

// Call is one script run in a pipelined batch: a Pipeliner sends it and
// sets Reply and Err.
type Call struct {
	// Script is the script to run.
	Script *Script
	// ByText asks for EVAL of Script.Src instead of EVALSHA of Script.SHA.
	ByText bool
	// Keys and Args are the script's KEYS and ARGV.
	Keys []string
	Args []any
	// Reply and Err are the call's own outcome, as EvalSha would return
	// them: one call's error (such as a CORRUPT reply) never touches
	// another's. When Ints is set, Reply may instead be an IntReply.
	Reply any
	Err   error
	// Ints says the reply is read as integers (a decision's, a run's): a
	// Pipeliner may hand an array reply whose items are all integers or
	// error replies over as an IntReply, which boxes no item.
	Ints bool
	// Node, when not nil, is the cluster node the call must go to
	// (Router.Node): the call of a node form, which declares no keys.
	Node any

	cmd [3 + 1 + forms.LuaFixedArgs + 1]any // Command's array, when it fits
}

// IntReply is an array reply whose items are all integers or error
// replies, as a Pipeliner may hand over a Call's reply when the call's Ints
// is set: Ints holds the items (0 for an error item); Errs is nil when no
// item is an error, and otherwise as long as Ints, with each error item's
// error at its index.
type IntReply struct {
	Ints []int64
	Errs []error
}

// The commands' names, boxed once.
var (
	evalSha any = "evalsha"
	evalSrc any = "eval"
)

// Command returns the call as one command's words, for clients that take
// a command as a list of arguments: EVALSHA sha numkeys keys... args... (or
// EVAL src ...). For a decision it builds them in the call itself, so the
// only allocation is boxing the key.
func (c *Call) Command() []any {
	cmd := c.cmd[:0]
	if n := 3 + len(c.Keys) + len(c.Args); n > len(c.cmd) {
		cmd = make([]any, 0, n)
	}
	if c.ByText {
		cmd = append(cmd, evalSrc, c.Script.src)
	} else {
		cmd = append(cmd, evalSha, c.Script.sha)
	}
	cmd = append(cmd, int64(len(c.Keys)))
	for _, k := range c.Keys {
		cmd = append(cmd, k)
	}
	return append(cmd, c.Args...)
}

// Pipeliner is what a Backend whose client does not pipeline concurrent
// commands by itself may add: sending many script runs in one round trip
// per server. The engine batches concurrent decisions through it; a backend
// without it gets one EvalSha per decision.
type Pipeliner interface {
	// Pipeline sends every call (each by its SHA, or its source when
	// ByText) in one pipeline per server the calls' keys live on, and
	// sets each call's Reply and Err. It returns when every call has its
	// outcome.
	Pipeline(ctx context.Context, calls []*Call)
	// Slot says which keys one script run may touch: keys of equal Slot
	// may share one (any keys on a standalone server, the keys of one
	// hash slot on a cluster, ClusterSlot); a key whose Slot is negative
	// shares a run with no other key (a ring's, whose shard the client
	// picks).
	Slot(key string) int
}

// Overlapper is what a Pipeliner adds when two of its Pipeline calls may
// be in flight at once, each bounded by its own context alone: each on a
// connection of its own, as a go-redis pool gives them. The batcher then
// keeps up to maxFlying batches in flight. valkey-go, by contrast, sends
// concurrent calls on one connection per server and puts a lone call's
// deadline on that connection, so that a batch of callers with short
// deadlines would end the other batch's commands too: its backend is not
// an Overlapper, and its batches go one at a time.
type Overlapper interface {
	// Overlaps reports whether Pipeline calls may run at once.
	Overlaps() bool
}

// Detacher is what a Pipeliner adds when its client may hold a call past
// the call's context, as valkey-go holds one that waits for a connection
// another call is opening (store/valkey): the batcher then sends a lone
// caller's call from a goroutine of its own (ctxaware.Go), counted in
// flight until the client returns, and the caller returns when its context
// ends. Queued callers wait for their own contexts on any backend.
type Detacher interface {
	// DetachLone reports whether a lone caller's call is sent from a
	// goroutine apart from the caller.
	DetachLone() bool
}

// detachesLone reports whether p is a Detacher that asks for it.
func detachesLone(p Pipeliner) bool {
	d, ok := p.(Detacher)
	return ok && d.DetachLone()
}

// flyingFor returns how many batches may be in flight at once through p.
func flyingFor(p Pipeliner) int {
	if o, ok := p.(Overlapper); ok && o.Overlaps() {
		return maxFlying
	}
	return 1
}

// The batcher shares round trips among concurrent decisions without a
// timer. A caller that finds no batch in flight sends its own call at once,
// alone, so a lone caller pays nothing. Callers that arrive while a batch is
// in flight queue; when the batch's replies are in, everything queued
// meanwhile, in arrival order, goes as the next batch, and so on until a
// batch comes back with nothing queued behind it. Before taking the next
// batch, the sender yields the processor (settle), so that the callers it
// just answered, which are runnable and mostly decide again at once, queue
// first: on a cluster, where each master's batcher sees a third of the
// callers, that takes the decisions per script run at 10,000 keys and 32
// callers from about 5 to about 7 (measured with one batch in flight at a
// time, before the second below).
//
// While a batch is in flight the server works and the client waits, and
// while the client answers a batch's callers and builds the next the
// server waits: so up to maxFlying batches (2) may be in flight at once,
// on a backend whose pipelines may overlap (Overlapper; one at a time on
// any other). Once a busy stretch has begun (the batch in flight is not a
// lone caller's call), a caller that queues while fewer than maxFlying batches
// are in flight and finds the queue big enough (secondAt callers, or
// secondAtPlain when one of them is a call no coalesced run takes, such as
// a lease's, which costs the server a script run in whichever batch it
// goes) sends the queue at once as another batch, without waiting for the
// one in flight. Behind a lone caller's call the queue always waits, so
// that a burst that meets it goes as one batch. With two batches in
// flight, callers queue until either comes back, and that batch's sender
// takes the queue; a sender that finds nothing queued stops, and the
// batcher is idle when the last one does. Two batches in flight may hold
// decisions on one key and reach the server in either order, as
// concurrent calls' do; a caller waits for its outcome before its next
// call, so one caller's decisions stay in order.
//
// A batch of queued calls carries several callers' decisions, so no one
// caller's context may cancel it: the batches of one busy stretch are sent,
// one after another, by a goroutine (loop), started by the lone sender that
// found callers queued behind its call or by the caller that sent the queue
// as another batch, each batch under a context without cancellation whose
// deadline is the latest of its callers' (none if one has none); each
// queued caller waits for its outcome or for its own context. A loop ends
// when its batch comes back with nothing queued: at most maxFlying run at
// once, none outlives the batches in flight, and the store needs no Close.
//
// A batch holds the requests in arrival order, so the decisions in it that
// use one algorithm, on keys that may share a script run, are decided in
// one run of the algorithm's coalesced form (Script.Many), each key's in
// that order (see coalesce): a hot key costs the server one script run per
// batch, not per decision, and so do many keys on a standalone server,
// which pays the script's dispatch and TIME once per batch. With a Router
// (a cluster), each master has a batcher of its own (Engine.batcherFor),
// and the keys of one master, whatever their slots, share a run (the node
// form, node.go).
type batcher struct {
	p        Pipeliner
	noScript func(error) bool
	router   Router // nil unless the backend can say which node serves a key
	mu       sync.Mutex
	flying   int        // batches in flight, at most maxFly
	maxFly   int        // flyingFor(p): maxFlying, or 1
	detach   bool       // detachesLone(p)
	lone     bool       // the batch in flight is a lone caller's call
	queue    []*pending // callers waiting for the next batch, in arrival order
	plain    int        // of the queue, calls that no coalesced run takes
	// The scratches of the senders (loop) not sending now: each batch of
	// several calls is coalesced, sent and spread with one, which no other
	// batch in flight uses meanwhile.
	spare []*scratch
}

// pending is one decision waiting in, or sent in, a batch.
type pending struct {
	Call
	ctx  context.Context    // its caller's, while queued
	req  algorithms.Request // a decision's request, for the coalesced form
	key  [1]string
	args [forms.LuaFixedArgs + 4]any // with a reservation's or refund's three
	one  [1]*Call                    // a batch of one call, without allocating
	done chan struct{}               // one send: the outcome is in

	// width is how many reply fields the decision takes in a coalesced
	// run's reply: LuaReplyLen (when 0), or that per part of a composite.
	width int

	// Set by coalesce, in the goroutine that sends its batch (loop).
	leads *run // the run this decision's call sends
	// The lease run this lease call's call sends (set on the run's first
	// call; the others are inRun), or nil.
	leaseRun *leaseRun
	inRun    bool // decided in a run: sends no call of its own
	retry    bool // its run's node did not serve its key: sent again alone
	// The node that serves its key, as the Router saw it when the
	// decision was made (nil without one): keys of one node share a run.
	node any
	// Set by spread instead of Reply, when the decision was decided in a
	// run whose reply had its fields: the run's reply's own elements, so
	// that no interface is boxed per decision (ints when the reply was an
	// IntReply).
	fields []any
	ints   []int64
	// Guarded by batcher.mu.
	gone bool // its caller returned early; skip it
}

// pendingPool recycles the pendings of decisions that returned with their
// outcome (so no batch holds them any more), with their done channels.
var pendingPool = sync.Pool{New: func() any { return new(pending) }}

// release clears c and returns it to pendingPool. Only a caller whose do
// returned nil may release its pending: one whose context ended may still
// be in a batch in flight.
func (c *pending) release() {
	done := c.done
	*c = pending{}
	c.done = done
	pendingPool.Put(c)
}

// do runs c, sharing a round trip with concurrent calls, and leaves its
// outcome in c.Reply and c.Err (or c.fields). When ctx ends while c waits,
// it returns ctx's error at once instead, and c's outcome is never read: c
// is skipped if still queued, or its reply dropped if already sent.
func (b *batcher) do(ctx context.Context, c *pending) error {
	b.mu.Lock()
	if b.flying == 0 {
		b.flying, b.lone = 1, true
		b.mu.Unlock()
		if b.detach && ctx.Done() != nil {
			c.ctx = ctx
			if c.done == nil {
				c.done = make(chan struct{}, 1)
			}
			ctxaware.Go(func() { b.sendLone(ctx, c, true) })
			return b.wait(c)
		}
		b.sendLone(ctx, c, false)
		return nil
	}
	c.ctx = ctx
	if c.done == nil {
		c.done = make(chan struct{}, 1)
	}
	b.queue = append(b.queue, c)
	if !coalescable(c) {
		b.plain++
	}
	var second []*pending
	if b.flying < b.maxFly && !b.lone && b.pays() {
		b.flying++
		second = b.take()
	}
	b.mu.Unlock()
	if second != nil {
		go b.loop(second)
	}
	return b.wait(c)
}

// sendLone sends a lone caller's call under ctx, its caller's context,
// and then what queued behind it (loop): on the caller's goroutine, which
// returns once the call has its outcome (the loop on a goroutine of its
// own), or detached from it (batcher.detach), where c.done says the outcome
// is in.
func (b *batcher) sendLone(ctx context.Context, c *pending, detached bool) {
	calls := c.one[:]
	calls[0] = &c.Call
	b.pipeline(ctx, calls)
	next := b.next(nil)
	if detached {
		c.done <- struct{}{}
		if next != nil {
			b.loop(next)
		}
		return
	}
	if next != nil {
		go b.loop(next)
	}
}

// wait waits for c's outcome, or for its caller's context (c.ctx): when
// that ends first, c is skipped if still queued, its reply dropped if
// already sent, and wait returns the context's error.
func (b *batcher) wait(c *pending) error {
	select {
	case <-c.done:
		return nil
	case <-c.ctx.Done():
		b.mu.Lock()
		c.gone = true
		b.mu.Unlock()
		return c.ctx.Err()
	}
}

// maxFlying bounds the batches in flight on one batcher (one server, or
// one master of a cluster).
const maxFlying = 2

// secondAt and secondAtPlain are how many callers must queue behind the
// batches in flight before they go at once as another batch (when fewer
// than maxFlying are in flight): secondAtPlain when one of them is a call
// that no coalesced run takes (a lease's, a reservation's), which costs
// the server a script run whichever batch it goes in.
const (
	secondAt      = 8
	secondAtPlain = 4
)

// pays reports whether the queue goes at once as another batch. b.mu is
// held.
func (b *batcher) pays() bool {
	return len(b.queue) >= secondAt || b.plain > 0 && len(b.queue) >= secondAtPlain
}

// next takes what queued while a batch was in flight, its callers still
// waiting, in arrival order, or, with nothing queued, counts the batch as
// landed (the batcher idle when it was the only one in flight), puts s,
// its sender's scratch (nil for a lone caller), back in b.spare, and
// returns nil.
func (b *batcher) next(s *scratch) []*pending {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.lone = false
	next := b.take()
	if next == nil {
		b.flying--
		if s != nil {
			b.spare = append(b.spare, s)
		}
	}
	return next
}

// take returns the queue's callers still waiting, in arrival order, or nil
// when none is, and empties the queue. b.mu is held.
func (b *batcher) take() []*pending {
	var next []*pending
	for _, c := range b.queue {
		if !c.gone {
			next = append(next, c)
		}
	}
	clear(b.queue)
	b.queue, b.plain = b.queue[:0], 0
	return next
}

// loop sends batch, delivers its outcomes, and then sends what queued
// meanwhile, and so on until nothing queued: one goroutine for a stretch
// of busy batches, which no caller's context cancels (see batchContext).
func (b *batcher) loop(batch []*pending) {
	b.mu.Lock()
	var s *scratch
	if n := len(b.spare); n > 0 {
		s, b.spare = b.spare[n-1], b.spare[:n-1]
	} else {
		s = new(scratch)
	}
	b.mu.Unlock()
	for batch != nil {
		calls, runs := s.coalesce(batch, b.p.Slot)
		bctx, cancel := batchContext(batch)
		b.pipeline(bctx, calls)
		for _, r := range runs {
			r.spread()
		}
		s.leases.spread()
		if again := s.retries(batch); len(again) > 0 {
			// A node run found keys its node does not serve: each of
			// their decisions goes again as its own call, its key
			// declared, which the client routes and redirects.
			b.router.Missed()
			b.pipeline(bctx, again)
		}
		cancel()
		for _, c := range batch {
			c.done <- struct{}{}
		}
		b.settle(len(batch))
		batch = b.next(s)
	}
}

// settle lets the callers of a batch just answered queue before the next
// batch is taken: they are runnable, and most decide again at once. It
// yields the processor (runtime.Gosched) until the queue stops growing,
// holds as many callers as were answered, maxSettle yields have passed or
// maxSettleTime has, so that the next batch is larger (fewer round trips
// and script runs per decision) without waiting on a timer; when no caller
// comes, it costs a yield. In a process whose other goroutines keep every
// processor busy, a yield lets them run first: maxSettleTime bounds how
// long settle goes on yielding.
func (b *batcher) settle(answered int) {
	start := time.Now()
	prev := -1
	for range maxSettle {
		runtime.Gosched()
		b.mu.Lock()
		q := len(b.queue)
		b.mu.Unlock()
		if q == prev || q >= answered || time.Since(start) > maxSettleTime {
			return
		}
		prev = q
	}
}

// maxSettle and maxSettleTime bound the yields of settle.
const (
	maxSettle     = 4
	maxSettleTime = 200 * time.Microsecond
)

// batchContext returns the context a batch is sent under: its first
// caller's values, no cancellation, and the latest deadline of its callers,
// or none when one of them has none.
func batchContext(batch []*pending) (context.Context, context.CancelFunc) {
	var latest time.Time
	for _, c := range batch {
		d, ok := c.ctx.Deadline()
		if !ok {
			return context.WithoutCancel(batch[0].ctx), func() {}
		}
		if d.After(latest) {
			latest = d
		}
	}
	return context.WithDeadline(context.WithoutCancel(batch[0].ctx), latest)
}

// pipeline sends calls by their SHAs and once more, by their sources, those
// whose server did not have the script (after a restart or SCRIPT FLUSH),
// which reloads it there.
func (b *batcher) pipeline(ctx context.Context, calls []*Call) {
	b.p.Pipeline(ctx, calls)
	var again []*Call
	for _, c := range calls {
		if c.Err != nil && b.noScript(c.Err) {
			c.ByText, c.Reply, c.Err = true, nil, nil
			again = append(again, c)
		}
	}
	if len(again) > 0 {
		b.p.Pipeline(ctx, again)
	}
}

// A run is the decisions of a batch that one call of their algorithm's
// coalesced form (forms.ManyLua) decides: the keys of one algorithm
// that may share a script run (Pipeliner.Slot), each with its decisions in
// arrival order. KEYS are the keys in order of their first decision; ARGV
// the server clock flag, every request packed (by key, each key's in
// order), then for each key its slack, its packed parameters and its
// number of requests.
type run struct {
	Call
	keys []*entry
	reqs []byte // the packed requests, built here
	node any    // the node all its keys are on (Router.Node), or nil
}

// maxRunKeys bounds the keys of one run, so that a batch of thousands of
// keys does not hold the server in one script for long: past it, the
// next keys start another run (in the same pipeline).
const maxRunKeys = 128

// entry is the decisions of a batch on one key.
type entry struct {
	members []*pending
	one     [1]*pending // members' array while there is one
	bad     bool        // they cannot share a run: each sends its own call
}

// coalesce returns the calls that send batch, in the order of their first
// decisions: for each set of keys that use one algorithm and may share a
// script run (Pipeliner.Slot: any keys on a standalone server, one hash
// slot's on a cluster), one call of the coalesced form deciding all their
// decisions; a decision alone in its run as its own call of the single
// form; and every decision on a key whose decisions cannot share a run
// (two algorithms, or two sets of numbers, on one key) as its own call, in
// arrival order. It returns the runs too, whose outcomes spread hands to
// their members once the calls are sent.
func coalesce(batch []*pending, slot func(string) int) ([]*Call, []*run) {
	var s scratch
	return s.coalesce(batch, slot)
}

// runKey is what the keys of one run share.
type runKey struct {
	s    *Script
	slot int
	node any // set instead of slot when a Router says which node
}

// scratch is coalesce's memory, reused from batch to batch: what one
// coalesce returns is valid until the next.
type scratch struct {
	byKey   map[string]*entry
	entries []entry
	byRun   map[runKey]*run
	runs    []*run
	free    []*run // runs of earlier batches, to reuse
	calls   []*Call
	again   []*Call
	leases  leaseRuns
}

func (s *scratch) coalesce(batch []*pending, slot func(string) int) ([]*Call, []*run) {
	if s.byKey == nil {
		s.byKey = make(map[string]*entry, len(batch))
		s.byRun = make(map[runKey]*run)
	}
	clear(s.byKey)
	clear(s.byRun)
	byKey, byRun := s.byKey, s.byRun
	s.free = append(s.free, s.runs...)
	if cap(s.entries) < len(batch) {
		s.entries = make([]entry, 0, len(batch))
	}
	clear(s.entries[:cap(s.entries)])
	entries := s.entries[:0] // never grows: pointers stay
	s.leases.reset()
	for _, c := range batch {
		c.leads, c.leaseRun, c.inRun, c.retry, c.fields, c.ints = nil, nil, false, false, nil, nil
		if c.Script == leaseScript {
			s.leases.add(c, slot(c.Keys[0]))
			continue
		}
		e := byKey[c.Keys[0]]
		if e == nil {
			entries = append(entries, entry{bad: !coalescable(c)})
			e = &entries[len(entries)-1]
			e.one[0] = c
			e.members = e.one[:1:1]
			byKey[c.Keys[0]] = e
			continue
		}
		e.bad = e.bad || !coalescable(c) || !sameNumbers(c, e.members[0])
		e.members = append(e.members, c)
	}
	runs := s.runs[:0]
	for i := range entries {
		e := &entries[i]
		if e.bad {
			continue
		}
		m := e.members[0]
		k := runKey{s: m.Script.Many, slot: slot(m.Keys[0])}
		if m.node != nil && k.slot >= 0 && m.Script.Many.Node != nil {
			k.slot, k.node = 0, m.node
		}
		r := byRun[k]
		if r == nil || k.slot < 0 || len(r.keys) == maxRunKeys {
			r = s.newRun()
			r.node = k.node
			byRun[k] = r
			runs = append(runs, r)
			m.leads = r
		}
		r.keys = append(r.keys, e)
	}
	kept := runs[:0]
	for _, r := range runs {
		if len(r.keys) == 1 && len(r.keys[0].members) == 1 {
			r.keys[0].members[0].leads = nil // alone: its own call of the single form
			s.free = append(s.free, r)
			continue
		}
		for _, e := range r.keys {
			for _, c := range e.members {
				c.inRun = true
			}
		}
		kept = append(kept, r)
	}
	s.runs = kept
	s.leases.build()
	calls := s.calls[:0]
	for _, c := range batch {
		switch {
		case c.leads != nil:
			c.leads.build(c.Script.Many)
			calls = append(calls, &c.leads.Call)
		case c.leaseRun != nil:
			calls = append(calls, &c.leaseRun.Call)
		case !c.inRun:
			calls = append(calls, &c.Call)
		}
	}
	clear(calls[len(calls):cap(calls)])
	s.calls = calls
	return calls, kept
}

// retries returns the calls of the batch's decisions whose run's node did
// not serve their key (spread marked them), in arrival order, each its own
// call of the single form, to be sent again.
func (s *scratch) retries(batch []*pending) []*Call {
	again := s.again[:0]
	for _, c := range batch {
		if c.retry {
			c.fields, c.ints = nil, nil
			c.Reply, c.Err, c.ByText = nil, nil, false
			again = append(again, &c.Call)
		}
	}
	clear(again[len(again):cap(again)])
	s.again = again
	return again
}

// newRun returns an empty run, an earlier batch's if there is one.
func (s *scratch) newRun() *run {
	if n := len(s.free); n > 0 {
		r := s.free[n-1]
		s.free = s.free[:n-1]
		keys, reqs, runKeys, args := r.keys[:0], r.reqs[:0], r.Keys[:0], r.Args[:0]
		clear(r.keys[:cap(r.keys)])
		*r = run{keys: keys, reqs: reqs}
		r.Keys, r.Args = runKeys, args
		return r
	}
	return &run{}
}

// coalescable reports whether c is a decision of an algorithm with a
// coalesced form (Engine.decide's call: its Args are the calling
// convention's six).
func coalescable(c *pending) bool {
	return c.Script.Many != nil && len(c.Args) == forms.LuaFixedArgs+1
}

// sameNumbers reports whether two coalescable decisions run one script
// with the same clock, slack and parameters.
func sameNumbers(a, b *pending) bool {
	return a.Script == b.Script && a.Args[3] == b.Args[3] && a.Args[4] == b.Args[4] && a.Args[5] == b.Args[5]
}

// build sets the run's call of s, the coalesced form, from its keys: on a
// node (r.node), and of several keys, a call of s's node form (Script.Node)
// sent to that node, whose ARGV end with the keys.
func (r *run) build(s *Script) {
	n := 0
	for _, e := range r.keys {
		n += len(e.members)
	}
	onNode := r.node != nil && len(r.keys) > 1
	reqs := slices.Grow(r.reqs[:0], 24*n)
	keys := slices.Grow(r.Keys[:0], len(r.keys))
	args := slices.Grow(r.Args[:0], 2+4*len(r.keys))[:2]
	args[0] = r.keys[0].members[0].Args[3] // the clock flag, the engine's
	for _, e := range r.keys {
		for _, c := range e.members {
			peek := 0.0
			if c.req.Peek {
				peek = 1
			}
			reqs = binary.LittleEndian.AppendUint64(reqs, math.Float64bits(float64(c.req.Now)))
			reqs = binary.LittleEndian.AppendUint64(reqs, math.Float64bits(float64(c.req.Cost)))
			reqs = binary.LittleEndian.AppendUint64(reqs, math.Float64bits(peek))
		}
		m := e.members[0]
		if !onNode {
			keys = append(keys, m.Keys[0])
		}
		args = append(args, m.Args[4], m.Args[5], int64(len(e.members)))
	}
	args[1] = string(reqs)
	r.Script, r.Keys, r.Args, r.reqs, r.Ints, r.Node = s, keys, args, reqs, true, nil
	if onNode {
		for _, e := range r.keys {
			args = append(args, e.members[0].Keys[0])
		}
		r.Script, r.Args, r.Node = s.Node, args, r.node
	}
}

// spread hands the run's outcome to its members. The reply is flat: for
// each key in order, LuaReplyLen fields per decision, or one item, an
// error reply, which the clients hand over as an error in the array, the
// same error the single form's reply gives (state the script cannot read
// fails every decision on that key, as it would fail each one alone, and
// no other key's). The call's error goes to every member; a reply of the
// wrong shape goes to each whole, for Ints to reject.
func (r *run) spread() {
	var rep reply
	switch v := r.Reply.(type) {
	case []any:
		rep.arr, rep.ok, rep.n = v, v != nil, len(v)
	case IntReply:
		rep.ir, rep.ok, rep.n = v, true, len(v.Ints)
	}
	at := 0
	for _, e := range r.keys {
		var ierr error
		if at < rep.n {
			ierr = rep.err(at)
		}
		w := e.members[0].width // every member's: they share a run's numbers
		if w == 0 {
			w = forms.LuaReplyLen
		}
		n := w * len(e.members)
		if ierr != nil {
			n = 1
		}
		fits := r.Err == nil && rep.ok && at+n <= rep.n
		for i, c := range e.members {
			switch {
			case r.Err != nil:
				c.Reply, c.Err = nil, r.Err
			case !fits:
				c.Reply, c.Err = r.Reply, nil
			case ierr != nil && (strings.HasPrefix(ierr.Error(), NotLocal) || r.Node != nil && !stateErr(ierr)):
				c.Reply, c.Err, c.retry = nil, nil, true
			case ierr != nil:
				c.Reply, c.Err = nil, ierr
			default:
				f, l := at+i*w, w
				c.Reply, c.Err = nil, nil
				if rep.arr != nil {
					c.fields = rep.arr[f : f+l : f+l]
				} else {
					c.ints = rep.ir.Ints[f : f+l : f+l]
				}
			}
		}
		at += n
	}
	if r.Err == nil && at != rep.n {
		for _, e := range r.keys {
			for _, c := range e.members {
				c.Reply, c.Err, c.fields, c.ints = r.Reply, nil, nil, nil // the wrong shape: Ints rejects it
			}
		}
	}
}

// reply is a run's array reply, either form.
type reply struct {
	arr []any
	ir  IntReply
	ok  bool // an array
	n   int  // its length
}

// err returns item i when it is an error reply.
func (r *reply) err(i int) error {
	if r.arr != nil {
		err, _ := r.arr[i].(error)
		return err
	}
	if r.ir.Errs != nil {
		return r.ir.Errs[i]
	}
	return nil
}

// Queued returns how many decisions wait behind the batches in flight on
// e, or -1 when no batch is in flight (always, when its backend does not
// pipeline), so that a test can queue decisions in a known order. It is not
// a method so that the stores, which embed the Engine, do not offer it;
// their tests reach it.
func Queued(e *Engine) int {
	if e.batch == nil {
		return -1
	}
	n := e.batch.queued()
	e.nodes.Range(func(_, b any) bool {
		if q := b.(*batcher).queued(); q >= 0 {
			n = max(n, 0) + q
		}
		return true
	})
	return n
}

// queued is Queued for one batcher.
func (b *batcher) queued() int {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.flying == 0 {
		return -1
	}
	return len(b.queue)
}

// Masters returns how many masters' batchers e has made (a Router's nodes
// it has sent decisions to; see batcherFor), so that a test can tell its
// decisions went by master. It is not a method so that the stores, which
// embed the Engine, do not offer it; their tests reach it.
func Masters(e *Engine) int {
	n := 0
	e.nodes.Range(func(_, _ any) bool { n++; return true })
	return n
}

package redis_test

import (
	"context"
	"errors"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/ratelimitkit/ratelimit"
	"github.com/ratelimitkit/ratelimit/algorithms"
	"github.com/ratelimitkit/ratelimit/internal/redisengine"
	"github.com/ratelimitkit/ratelimit/store"
	"github.com/ratelimitkit/ratelimit/store/redis"
)

// gate is a go-redis hook that counts the script runs and pipelines the
// store sends and, while held, stops the next lone EVALSHA before it leaves
// (so the test can queue decisions behind a batch in flight).
type gate struct {
	hold      atomic.Bool
	holdPipe  atomic.Bool   // likewise, the next pipeline
	held      chan struct{} // receives when a command is stopped
	release   chan struct{}
	single    atomic.Int64 // EVALSHAs sent alone (EVALs after NOSCRIPT are not counted)
	pipelines atomic.Int64 // pipelines sent
	piped     atomic.Int64 // EVALSHAs sent in pipelines
	biggest   atomic.Int64 // most commands in one pipeline
}

func newGate() *gate { return &gate{held: make(chan struct{}, 1), release: make(chan struct{}, 1)} }

func (g *gate) DialHook(next goredis.DialHook) goredis.DialHook { return next }

func (g *gate) ProcessHook(next goredis.ProcessHook) goredis.ProcessHook {
	return func(ctx context.Context, cmd goredis.Cmder) error {
		if n := cmd.Name(); n == "evalsha" || n == "eval" {
			if n == "evalsha" {
				g.single.Add(1)
			}
			if g.hold.CompareAndSwap(true, false) {
				g.held <- struct{}{}
				<-g.release
			}
		}
		return next(ctx, cmd)
	}
}

func (g *gate) ProcessPipelineHook(next goredis.ProcessPipelineHook) goredis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []goredis.Cmder) error {
		scripts := 0
		for _, c := range cmds {
			if c.Name() == "evalsha" {
				scripts++
			}
		}
		if scripts == 0 {
			// A connection's handshake (HELLO, CLIENT SETINFO), not ours.
			return next(ctx, cmds)
		}
		g.pipelines.Add(1)
		g.piped.Add(int64(scripts))
		if g.holdPipe.CompareAndSwap(true, false) {
			g.held <- struct{}{}
			<-g.release
		}
		for {
			b := g.biggest.Load()
			if int64(len(cmds)) <= b || g.biggest.CompareAndSwap(b, int64(len(cmds))) {
				break
			}
		}
		return next(ctx, cmds)
	}
}

// hooked returns a client of the standalone server, or the cluster, with g
// as its hook: on a cluster, the hook of every master's client, so that it
// sees what each master is sent, the runs the store sends to a master
// itself (redisengine.Router) included.
func hooked(t *testing.T, g *gate, onCluster bool) goredis.UniversalClient {
	if onCluster {
		c := cluster(t).(*goredis.ClusterClient)
		c.OnNewNode(func(n *goredis.Client) { n.AddHook(g) })
		return c
	}
	c := standalone(t)
	c.AddHook(g)
	return c
}

// holdFirst starts one decision on lim that the gate stops on its way to
// the server, and returns when it is stopped, so that every decision made
// before release queues behind it. The returned channel yields its error.
func holdFirst(t *testing.T, g *gate, lim *ratelimit.Limiter, key string) <-chan error {
	t.Helper()
	g.hold.Store(true)
	first := make(chan error, 1)
	go func() {
		_, err := lim.Allow(context.Background(), key)
		first <- err
	}()
	select {
	case <-g.held:
	case <-time.After(10 * time.Second):
		t.Fatal("the first decision never reached the server")
	}
	return first
}

// TestBatching checks that decisions made while a batch is in flight go
// to the server together, in one script run on the standalone server and
// on the held decision's master of the cluster, each getting its own exact
// decision, in arrival order on one key.
func TestBatching(t *testing.T) {
	for _, onCluster := range []bool{false, true} {
		t.Run(map[bool]string{false: "standalone", true: "cluster"}[onCluster], func(t *testing.T) {
			g := newGate()
			c := hooked(t, g, onCluster)
			s, err := redis.New(c, redis.WithPrefix(uniquePrefix()))
			if err != nil {
				t.Fatal(err)
			}
			// A window that cannot end during the test: exactly 10 of the
			// decisions on the hot key are admitted.
			lim, err := ratelimit.New(s, algorithms.FixedWindow(10, time.Hour))
			if err != nil {
				t.Fatal(err)
			}
			first := holdFirst(t, g, lim, "hot")
			const queued = 40
			var wg sync.WaitGroup
			var admitted atomic.Int64
			errs := make(chan error, queued)
			for i := range queued {
				wg.Add(1)
				go func() {
					defer wg.Done()
					key := "hot"
					if i%2 == 1 {
						key = "spread-" + string(rune('a'+i%26))
					}
					d, err := lim.Allow(context.Background(), key)
					if err != nil {
						errs <- err
						return
					}
					if key == "hot" && d.Allowed {
						admitted.Add(1)
					}
				}()
			}
			// Let them queue, then let the first batch go.
			waitFor(t, func() bool { return runtime.NumGoroutine() > queued })
			time.Sleep(200 * time.Millisecond)
			close(g.release)
			if err := <-first; err != nil {
				t.Fatal(err)
			}
			wg.Wait()
			close(errs)
			for err := range errs {
				t.Error(err)
			}
			// The first decision on the hot key was admitted too.
			if got := admitted.Load() + 1; got != 10 {
				t.Errorf("%d decisions on the hot key admitted, want exactly 10", got)
			}
			sent := g.single.Load() + g.piped.Load()
			if onCluster && sent > 1+1+queued/2 {
				// The hot key's 20 decisions queued behind the held one,
				// on its master: they share one run.
				t.Errorf("%d scripts sent for %d decisions, want at most %d: the hot key's queued decisions did not share a run", sent, 1+queued, 1+1+queued/2)
			}
			if !onCluster && sent != 2 {
				// One algorithm on one server: the queued decisions, on
				// the hot key and the others, share one script run.
				t.Errorf("%d scripts sent for %d decisions, want 2: the held one and one run", sent, 1+queued)
			}
			if sent > 1+queued {
				t.Errorf("%d scripts sent for %d decisions", sent, 1+queued)
			}
		})
	}
}

// windowOfTen returns a gate on a standalone client and a limiter through
// it admitting 10 an hour.
func windowOfTen(t *testing.T) (*gate, *ratelimit.Limiter) {
	g := newGate()
	s, err := redis.New(hooked(t, g, false), redis.WithPrefix(uniquePrefix()))
	if err != nil {
		t.Fatal(err)
	}
	lim, err := ratelimit.New(s, algorithms.FixedWindow(10, time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	return g, lim
}

// TestBatchCancel checks that a decision whose context ends while it waits
// for the batch in flight returns the context's error at once, is never
// sent, and leaves no goroutine behind.
func TestBatchCancel(t *testing.T) {
	g, lim := windowOfTen(t)
	before := runtime.NumGoroutine()
	first := holdFirst(t, g, lim, "k")
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		_, err := lim.Allow(ctx, "k")
		done <- err
	}()
	time.Sleep(100 * time.Millisecond) // let it queue
	cancel()
	select {
	case err := <-done:
		if !errors.Is(err, context.Canceled) {
			t.Errorf("cancelled decision: %v, want context.Canceled", err)
		}
	case <-time.After(2 * time.Second):
		t.Fatal("a cancelled decision waited for the batch in flight")
	}
	g.release <- struct{}{}
	if err := <-first; err != nil {
		t.Fatal(err)
	}
	// The cancelled decision was never sent: one more decision is the
	// second admitted of the window's ten.
	d, err := lim.Allow(context.Background(), "k")
	if err != nil || d.Remaining != 8 {
		t.Errorf("after a cancelled decision: %+v, %v, want 8 remaining", d, err)
	}
	waitFor(t, func() bool { return runtime.NumGoroutine() <= before })
}

// TestBatchSenderCancel checks that the caller sending a batch returns its
// context's error at once when that ends, while the batch carries on and
// the other decisions in it get their outcomes.
func TestBatchSenderCancel(t *testing.T) {
	g, lim := windowOfTen(t)
	before := runtime.NumGoroutine()
	first := holdFirst(t, g, lim, "k")
	ctx, cancel := context.WithCancel(context.Background())
	sender := make(chan error, 1)
	go func() {
		_, err := lim.Allow(ctx, "k") // queued first: it sends the next batch
		sender <- err
	}()
	time.Sleep(100 * time.Millisecond)
	others := make(chan error, 2)
	for range 2 {
		go func() {
			_, err := lim.Allow(context.Background(), "k")
			others <- err
		}()
	}
	time.Sleep(100 * time.Millisecond)
	// The three queued decisions on k go as one run of the coalesced
	// form, a lone command.
	g.hold.Store(true)
	g.release <- struct{}{} // the first decision goes; the batch is held
	if err := <-first; err != nil {
		t.Fatal(err)
	}
	select {
	case <-g.held:
	case <-time.After(10 * time.Second):
		t.Fatal("the batch never reached the server")
	}
	cancel()
	select {
	case err := <-sender:
		if !errors.Is(err, context.Canceled) {
			t.Errorf("cancelled sender: %v, want context.Canceled", err)
		}
	case <-time.After(2 * time.Second):
		t.Fatal("a cancelled sender waited for its batch")
	}
	g.release <- struct{}{}
	for range 2 {
		if err := <-others; err != nil {
			t.Errorf("a decision in a batch whose sender gave up: %v", err)
		}
	}
	// All four were sent: six of the window's ten are left.
	d, err := lim.Allow(context.Background(), "k")
	if err != nil || d.Remaining != 5 {
		t.Errorf("after the batch: %+v, %v, want 5 remaining", d, err)
	}
	waitFor(t, func() bool { return runtime.NumGoroutine() <= before })
}

// TestBatchIsolation checks that in one batch, decided in one script run
// on the standalone server, a key with corrupt state fails only its own
// decision, with an error that reaches go-redis's, and that scripts lost by
// SCRIPT FLUSH are reloaded for the whole batch.
func TestBatchIsolation(t *testing.T) {
	g := newGate()
	c := hooked(t, g, false)
	prefix := uniquePrefix()
	s, err := redis.New(c, redis.WithPrefix(prefix))
	if err != nil {
		t.Fatal(err)
	}
	lim, err := ratelimit.New(s, algorithms.GCRA(100, time.Second, 10), ratelimit.WithName("iso"))
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	bad := redisengine.StateKey(prefix, store.Key{Namespace: lim.Namespace(), ID: "bad"})
	if err := c.Set(ctx, bad, "garbage", time.Minute).Err(); err != nil {
		t.Fatal(err)
	}
	// The first decision runs another script, so that the batch behind it
	// finds its own script flushed.
	other, err := ratelimit.New(s, algorithms.TokenBucket(100, time.Second, 10), ratelimit.WithName("iso"))
	if err != nil {
		t.Fatal(err)
	}
	first := holdFirst(t, g, other, "first")
	if err := c.ScriptFlush(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	type outcome struct {
		key string
		err error
	}
	keys := []string{"a", "bad", "b", "c"}
	out := make(chan outcome, len(keys))
	for _, k := range keys {
		go func() {
			_, err := lim.Allow(ctx, k)
			out <- outcome{k, err}
		}()
	}
	time.Sleep(200 * time.Millisecond) // let them queue
	sent := g.single.Load() + g.piped.Load()
	g.release <- struct{}{}
	if err := <-first; err != nil {
		// The lone first call met the flushed script and reloaded it.
		t.Fatal(err)
	}
	for range keys {
		o := <-out
		if o.key != "bad" {
			if o.err != nil {
				t.Errorf("decision on %q failed beside a corrupt key: %v", o.key, o.err)
			}
			continue
		}
		var rerr goredis.Error
		if !errors.Is(o.err, ratelimit.ErrCorruptState) || !errors.As(o.err, &rerr) {
			t.Errorf("decision on corrupt state: %v, want ErrCorruptState wrapping a go-redis error", o.err)
		}
	}
	if n := g.single.Load() + g.piped.Load() - sent; n != 1 {
		// The held one was counted when it reached the gate.
		t.Errorf("%d scripts sent for the queued decisions, want 1: one run for the four keys", n)
	}
}

func waitFor(t *testing.T, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatal("condition not met within 10s")
		}
		time.Sleep(10 * time.Millisecond)
	}
}

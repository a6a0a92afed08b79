package redis_test

import (
	"context"
	"errors"
	"net"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/ratelimitkit/ratelimit"
	"github.com/ratelimitkit/ratelimit/algorithms"
	"github.com/ratelimitkit/ratelimit/internal/testserver"
	"github.com/ratelimitkit/ratelimit/store/redis"
)

// onCaller counts, for each write a go-redis client makes on a
// connection, whether it runs on the goroutine of the test function named
// caller (its frame is on the stack) or on a goroutine apart from it.
type onCaller struct {
	caller      string
	apart, mine atomic.Int64
}

func (o *onCaller) note() {
	buf := make([]byte, 16<<10)
	if strings.Contains(string(buf[:runtime.Stack(buf, false)]), o.caller) {
		o.mine.Add(1)
	} else {
		o.apart.Add(1)
	}
}

// dialer is a go-redis Dialer whose connections tell o of every write.
func (o *onCaller) dialer(ctx context.Context, network, addr string) (net.Conn, error) {
	c, err := (&net.Dialer{}).DialContext(ctx, network, addr)
	if err != nil {
		return nil, err
	}
	return &noting{Conn: c, o: o}, nil
}

type noting struct {
	net.Conn
	o *onCaller
}

func (n *noting) Write(p []byte) (int, error) {
	n.o.note()
	return n.Conn.Write(p)
}

// Process and ProcessPipeline make onCaller a go-redis hook that counts
// commands as they pass.
func (o *onCaller) DialHook(next goredis.DialHook) goredis.DialHook { return next }
func (o *onCaller) ProcessPipelineHook(next goredis.ProcessPipelineHook) goredis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []goredis.Cmder) error {
		o.mine.Add(1)
		return next(ctx, cmds)
	}
}
func (o *onCaller) ProcessHook(next goredis.ProcessHook) goredis.ProcessHook {
	return func(ctx context.Context, cmd goredis.Cmder) error {
		o.mine.Add(1)
		return next(ctx, cmd)
	}
}

// decideSome makes decisions and a Reset through st, as a lone caller
// does, with and without a deadline of the caller's, with the default
// store budget, and returns how many store calls it made.
func decideSome(t *testing.T, st *redis.Store) int {
	t.Helper()
	calls := 0
	for _, alg := range []algorithms.Algorithm{algorithms.GCRA(100, time.Second, 100), algorithms.SlidingLog(100, time.Second)} {
		lim, err := ratelimit.New(st, alg)
		if err != nil {
			t.Fatal(err)
		}
		ctx := context.Background()
		for _, key := range []string{"a", "b", "c", "a"} {
			if _, err := lim.Allow(ctx, key); err != nil {
				t.Fatalf("%s: Allow: %v", alg.Name(), err)
			}
		}
		if err := lim.Reset(ctx, "a"); err != nil {
			t.Fatalf("%s: Reset: %v", alg.Name(), err)
		}
		withDeadline, cancel := context.WithTimeout(ctx, 30*time.Second)
		_, err = lim.Allow(withDeadline, "d")
		cancel()
		if err != nil {
			t.Fatalf("%s: Allow under a 30s deadline: %v", alg.Name(), err)
		}
		calls += 6
	}
	return calls
}

// TestDefaultClientCallsOnCallersGoroutine: through a go-redis client
// built with default options (no ContextTimeoutEnabled) and a limiter with
// the default store budget, a lone caller's decisions and deletes are
// written by the caller's own goroutine, not handed to another one per
// call (issue #29 item 9: that hand-off cost a lone caller about a fifth
// of its decisions per second, below redis_rate on the same client).
func TestDefaultClientCallsOnCallersGoroutine(t *testing.T) {
	o := &onCaller{caller: "TestDefaultClientCallsOnCallersGoroutine"}
	c := goredis.NewClient(&goredis.Options{Addr: testserver.RedisAddr(t), Dialer: o.dialer})
	defer c.Close()
	st, err := redis.New(c, redis.WithPrefix(uniquePrefix()))
	if err != nil {
		t.Fatal(err)
	}
	decideSome(t, st)
	if o.apart.Load() != 0 || o.mine.Load() == 0 {
		t.Errorf("writes from the caller's goroutine: %d, from another goroutine: %d; want all from the caller's", o.mine.Load(), o.apart.Load())
	}
}

// TestDefaultClientHooksSeeEveryCall: a client with a hook (tracing,
// metrics) keeps seeing every call the store makes, though a clone of
// WithTimeout would not run it: such a client's calls are not cloned.
func TestDefaultClientHooksSeeEveryCall(t *testing.T) {
	c := goredis.NewClient(&goredis.Options{Addr: testserver.RedisAddr(t)})
	defer c.Close()
	o := &onCaller{}
	c.AddHook(o)
	st, err := redis.New(c, redis.WithPrefix(uniquePrefix()))
	if err != nil {
		t.Fatal(err)
	}
	calls := decideSome(t, st)
	if got := o.mine.Load(); got < int64(calls) {
		t.Errorf("the client's hook saw %d commands of the store's %d calls (or more, with script loads), want every one", got, calls)
	}
}

// TestDefaultClientHungServerWithinBudget: through a go-redis client built
// with default options (read timeout five seconds, retried), a frozen
// server still costs each decision at most the limiter's default one-second
// budget: 20 concurrent callers and then a lone one each answer within it
// (and a little slack for a loaded machine), with an error wrapping
// context.DeadlineExceeded, and the store works again after the thaw.
func TestDefaultClientHungServerWithinBudget(t *testing.T) {
	srv := testserver.StartRedis(t)
	c := goredis.NewClient(&goredis.Options{Addr: srv.Addr()})
	defer c.Close()
	st, err := redis.New(c)
	if err != nil {
		t.Fatal(err)
	}
	lim, err := ratelimit.New(st, algorithms.GCRA(1000, time.Second, 1000))
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	for range 4 {
		if _, err := lim.Allow(ctx, "k"); err != nil {
			t.Fatal(err)
		}
	}
	srv.Freeze()
	thawed := false
	defer func() {
		if !thawed {
			srv.Thaw()
		}
	}()
	const bound = time.Second + 400*time.Millisecond
	check := func(who string) {
		start := time.Now()
		_, err := lim.Allow(ctx, "k")
		took := time.Since(start)
		var ne net.Error
		if !errors.Is(err, context.DeadlineExceeded) && !(errors.As(err, &ne) && ne.Timeout()) {
			t.Errorf("%s: Allow on a frozen server: %v, want an error wrapping context.DeadlineExceeded", who, err)
		}
		if took > bound {
			t.Errorf("%s: Allow on a frozen server answered after %v, want within %v", who, took, bound)
		}
	}
	var wg sync.WaitGroup
	for range 20 {
		wg.Go(func() { check("one of 20 callers") })
	}
	wg.Wait()
	check("a lone caller")
	srv.Thaw()
	thawed = true
	deadline := time.Now().Add(10 * time.Second)
	for {
		_, err := lim.Allow(ctx, "k")
		if err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("Allow 10s after the thaw: %v", err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

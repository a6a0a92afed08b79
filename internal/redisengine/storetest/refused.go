package storetest

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/ratelimitkit/ratelimit"
	"github.com/ratelimitkit/ratelimit/algorithms"
	"github.com/ratelimitkit/ratelimit/internal/testserver"
	"github.com/ratelimitkit/ratelimit/store"
)

// RefusedBound is how long a call may take on a server that refuses
// connections, counted from the call's start: the answer comes within
// 100ms of the refusal, with an error that says so (issue 29, where every
// call took the limiter's whole 1s budget and said "timeout").
const RefusedBound = 100 * time.Millisecond

// ClosedPort returns the address of a loopback port that nothing listens
// on (listened on, then closed): a dial there is refused at once.
func ClosedPort(t testing.TB) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	return addr
}

// CheckRefused fails t unless err, returned after took, came within
// RefusedBound and says the connection was refused: its text does,
// errors.Is reaches syscall.ECONNREFUSED and errors.As a *net.OpError, it
// is not a timeout, and it starts with name (the store's).
func CheckRefused(t testing.TB, name, what string, took time.Duration, err error) {
	t.Helper()
	var op *net.OpError
	switch {
	case err == nil:
		t.Errorf("%s: no error from a server that refuses connections", what)
	case took > RefusedBound:
		t.Errorf("%s: answered after %v, want within %v of the refusal: %v", what, took, RefusedBound, err)
	case errors.Is(err, context.DeadlineExceeded):
		t.Errorf("%s: error %q says the call timed out; the connection was refused", what, err)
	case !strings.Contains(err.Error(), "connection refused") || !errors.Is(err, syscall.ECONNREFUSED) || !errors.As(err, &op):
		t.Errorf("%s: error %q does not say (and wrap) connection refused", what, err)
	case name != "" && !strings.HasPrefix(err.Error(), name+": "):
		t.Errorf("%s: error %q does not start with %q", what, err, name+": ")
	}
}

// refusedLimiters returns a limiter on s for each path a call takes (one
// script, a composite's script, the sliding log's, Update's two steps for
// a user's algorithm), with the limiter's defaults otherwise: the 1s store
// budget and FailClosed.
func refusedLimiters(t testing.TB, s store.Store) map[string]*ratelimit.Limiter {
	t.Helper()
	lims := map[string]*ratelimit.Limiter{}
	for name, alg := range map[string]algorithms.Algorithm{
		"gcra":        algorithms.GCRA(10, time.Second, 5),
		"all":         algorithms.All(algorithms.FixedWindow(10, time.Second), algorithms.TokenBucket(5, time.Second, 5)),
		"sliding_log": algorithms.SlidingLog(10, time.Second),
		"own":         counter{limit: 3},
	} {
		lim, err := ratelimit.New(s, alg, ratelimit.WithName("refused-"+name))
		if err != nil {
			t.Fatal(err)
		}
		lims[name] = lim
	}
	return lims
}

// Refused checks a store whose client points at a port nothing listens
// on. newStore returns a store on a client of addr, or the client's error
// when the client dials at once and fails (valkey-go does); that error
// must come within RefusedBound and say "connection refused". Otherwise
// every call, 25 one after another and 32 at once, for each path a call
// takes, Allow and Reset, must answer within RefusedBound with an error
// that says "connection refused", and FailClosed denies.
func Refused(t *testing.T, name string, newStore func(t *testing.T, addr string) (store.Store, error)) {
	start := time.Now()
	s, err := newStore(t, ClosedPort(t))
	if err != nil {
		CheckRefused(t, "", "creating the client", time.Since(start), err)
		return
	}
	ctx := context.Background()
	var mu sync.Mutex
	var calls int
	var slowest time.Duration
	check := func(what string, start time.Time, err error) {
		took := time.Since(start)
		CheckRefused(t, name, what, took, err)
		mu.Lock()
		calls++
		slowest = max(slowest, took)
		mu.Unlock()
	}
	defer func() { t.Logf("%d calls refused, the slowest answered in %v", calls, slowest) }()
	for alg, lim := range refusedLimiters(t, s) {
		for i := range 25 {
			start := time.Now()
			d, err := lim.Allow(ctx, "k")
			check(fmt.Sprintf("%s: Allow %d", alg, i), start, err)
			if d.Allowed {
				t.Fatalf("%s: Allow %d allowed by FailClosed on a dead store", alg, i)
			}
		}
		var wg sync.WaitGroup
		for g := range 32 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				start := time.Now()
				_, err := lim.Allow(ctx, fmt.Sprint("k", g))
				check(alg+": concurrent Allow", start, err)
			}()
		}
		wg.Wait()
		start := time.Now()
		err := lim.Reset(ctx, "k")
		check(alg+": Reset", start, err)
	}
}

// Killed checks a store on a private server that is killed (SIGKILL)
// under 8 callers making decisions: every call answers within
// RefusedBound of the moment the server's process had exited (of its own
// start, when it started later), with an error (the connection's: EOF or
// a reset for a call the kill cut, "connection refused" once nothing
// listens), some of them "connection refused", and decisions come back by
// themselves once the server is started again. A go-redis client that
// retries (MaxRetries) took up to 150ms on a call the kill cut: the
// HELLO of a connection opened just before the kill was sent again, 10ms
// to 1s apart. newStore returns a
// store (server clock on) on a new client of addr.
func Killed(t *testing.T, newStore func(t *testing.T, addr string) store.Store) {
	srv := testserver.StartRedis(t)
	s := newStore(t, srv.Addr())
	lim, err := ratelimit.New(s, algorithms.GCRA(1e6, time.Second, 1000), ratelimit.WithName("killed"))
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if _, err := lim.Allow(ctx, "warm"); err != nil {
		t.Fatalf("with the server up: %v", err)
	}
	var dead atomic.Int64 // when the killed server had exited (UnixNano), 0 before
	var mu sync.Mutex
	var bad []string
	var late []lateCall
	var after, refused int
	var slowest, slowestCut time.Duration
	stop := make(chan struct{})
	var wg sync.WaitGroup
	stalls := probeStalls(stop, &wg)
	for g := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; ; i++ {
				select {
				case <-stop:
					return
				default:
				}
				start := time.Now()
				_, err := lim.Allow(ctx, fmt.Sprintf("k%d-%d", g, i%50))
				end := time.Now()
				k := dead.Load()
				if k == 0 || end.UnixNano() < k {
					continue // answered before the server was gone
				}
				// From the call's start, or from the moment the
				// server was gone for a call already in flight then
				// (one the kill cut).
				cut := start.UnixNano() < k
				if cut {
					start = time.Unix(0, k)
				}
				took := end.Sub(start)
				bound := RefusedBound
				mu.Lock()
				after++
				if cut {
					slowestCut = max(slowestCut, took)
				} else {
					slowest = max(slowest, took)
				}
				switch {
				case err == nil:
					bad = append(bad, "a decision with no error from a killed server")
				case took > bound:
					late = append(late, lateCall{start, took, bound, err})
				case errors.Is(err, context.DeadlineExceeded):
					bad = append(bad, fmt.Sprintf("a timeout from a killed server: %v", err))
				case errors.Is(err, syscall.ECONNREFUSED):
					refused++
				}
				mu.Unlock()
				if err != nil {
					time.Sleep(time.Millisecond) // a caller that failed tries again soon
				}
			}
		}()
	}
	time.Sleep(200 * time.Millisecond)
	srv.Stop() // SIGKILL, and waits until the process has exited
	dead.Store(time.Now().UnixNano())
	time.Sleep(500 * time.Millisecond)
	close(stop)
	wg.Wait()
	for _, c := range late {
		if stalled := stalls.within(c.start, c.took); c.took-stalled > c.bound {
			bad = append(bad, fmt.Sprintf("answered after %v (%v of it while the process stood still): %v", c.took, stalled, c.err))
		} else {
			t.Logf("answered after %v, %v of it while the process stood still (the machine's load, not the store's): %v", c.took, stalled, c.err)
		}
	}
	for i, b := range bad {
		if i == 10 {
			t.Errorf("... and %d more", len(bad)-i)
			break
		}
		t.Error(b)
	}
	if refused == 0 {
		t.Errorf("none of %d calls after the kill said connection refused", after)
	}
	t.Logf("%d calls after the kill, %d refused; the slowest that started after it answered in %v, the slowest it cut in %v", after, refused, slowest, slowestCut)

	srv.Start()
	var d ratelimit.Decision
	for end := time.Now().Add(5 * time.Second); time.Now().Before(end); time.Sleep(20 * time.Millisecond) {
		if d, err = lim.Allow(ctx, "after"); err == nil {
			break
		}
	}
	if err != nil || !d.Allowed {
		t.Fatalf("after the restart: allowed %v, %v; want decisions back within 5s", d.Allowed, err)
	}
}

// lateCall is a call that answered after RefusedBound.
type lateCall struct {
	start       time.Time
	took, bound time.Duration
	err         error
}

// stallLog holds the spans in which a goroutine that sleeps 1ms at a time
// woke more than 10ms late: the process (or the whole machine) stood
// still, and a call that spanned them was late by the machine's load, not
// by anything the store or its client waited for.
type stallLog struct {
	mu    sync.Mutex
	spans [][2]time.Time
}

// probeStalls starts the goroutine that fills a stallLog until stop closes.
func probeStalls(stop <-chan struct{}, wg *sync.WaitGroup) *stallLog {
	l := &stallLog{}
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			select {
			case <-stop:
				return
			default:
			}
			before := time.Now()
			time.Sleep(time.Millisecond)
			if now := time.Now(); now.Sub(before) > 10*time.Millisecond {
				l.mu.Lock()
				l.spans = append(l.spans, [2]time.Time{before.Add(time.Millisecond), now})
				l.mu.Unlock()
			}
		}
	}()
	return l
}

// within returns how much of the span of took from start the process
// stood still.
func (l *stallLog) within(start time.Time, took time.Duration) time.Duration {
	l.mu.Lock()
	defer l.mu.Unlock()
	end := start.Add(took)
	var d time.Duration
	for _, s := range l.spans {
		from, to := s[0], s[1]
		if from.Before(start) {
			from = start
		}
		if to.After(end) {
			to = end
		}
		if to.After(from) {
			d += to.Sub(from)
		}
	}
	return d
}

package storetest

import (
	"context"
	"errors"
	"io"
	"net"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/ratelimitkit/ratelimit"
	"github.com/ratelimitkit/ratelimit/algorithms"
	"github.com/ratelimitkit/ratelimit/internal/testserver"
	"github.com/ratelimitkit/ratelimit/store"
)

// Failure checks a store against a private server that stops, freezes and
// comes back: errors come back within the context's deadline, prefixed with
// name and wrapping the backend's error; the limiter applies its failure
// policy and still returns the error; the store recovers by itself when the
// server returns, scripts lost included; and no goroutine outlives the
// client.
//
// newStore returns a store (server clock on) on a new client of addr, and a
// function that closes the client.
func Failure(t *testing.T, name string, newStore func(t *testing.T, addr string) (store.Store, func())) {
	before := runtime.NumGoroutine()
	srv := testserver.StartRedis(t)
	s, closeClient := newStore(t, srv.Addr())

	alg := algorithms.GCRA(10, time.Second, 5)
	open, err := ratelimit.New(s, alg, ratelimit.WithName("open"), ratelimit.WithFailurePolicy(ratelimit.FailOpen))
	if err != nil {
		t.Fatal(err)
	}
	closed, err := ratelimit.New(s, alg, ratelimit.WithName("closed"), ratelimit.WithFailurePolicy(ratelimit.FailClosed))
	if err != nil {
		t.Fatal(err)
	}
	own, err := ratelimit.New(s, counter{limit: 3}, ratelimit.WithName("own"))
	if err != nil {
		t.Fatal(err)
	}
	lims := []struct {
		name string
		lim  *ratelimit.Limiter
		want bool // the decision when the store fails
	}{{"fail-open", open, true}, {"fail-closed", closed, false}, {"own-algorithm", own, false}}
	ctx := context.Background()
	for _, l := range lims {
		if d, err := l.lim.Allow(ctx, "k"); err != nil || !d.Allowed {
			t.Fatalf("%s: lim.Allow(k) with the server up = %v, %v; want allowed", l.name, d.Allowed, err)
		}
	}

	failing := func(when string) {
		t.Helper()
		const deadline = 300 * time.Millisecond
		for _, l := range lims {
			ctx, cancel := context.WithTimeout(context.Background(), deadline)
			start := time.Now()
			d, err := l.lim.Allow(ctx, "k")
			took := time.Since(start)
			cancel()
			switch {
			case err == nil:
				t.Errorf("%s: %s: lim.Allow(k) = %v with no error, want an error", when, l.name, d.Allowed)
				continue
			case took > deadline+200*time.Millisecond:
				t.Errorf("%s: %s: lim.Allow(k) took %v with a %v deadline", when, l.name, took, deadline)
			case !strings.HasPrefix(err.Error(), name+": "):
				t.Errorf("%s: %s: error %q does not start with %q", when, l.name, err, name+": ")
			case errors.Unwrap(err) == nil && len(unwrapAll(err)) == 0:
				t.Errorf("%s: %s: error %q wraps nothing: the backend's error is lost", when, l.name, err)
			}
			var netErr net.Error
			if !errors.As(err, &netErr) && !errors.Is(err, context.DeadlineExceeded) && !errors.Is(err, io.EOF) && !errors.Is(err, io.ErrUnexpectedEOF) {
				t.Errorf("%s: %s: error %q reaches none of net.Error, io.EOF and context.DeadlineExceeded", when, l.name, err)
			}
			if d.Allowed != l.want {
				t.Errorf("%s: %s: lim.Allow(k) on a failing store = allowed %v, want %v", when, l.name, d.Allowed, l.want)
			}
			t.Logf("%s: %s: allowed=%v after %v: %v", when, l.name, d.Allowed, took.Round(time.Millisecond), err)
		}
	}
	recovered := func(when string) {
		t.Helper()
		for _, l := range lims {
			var err error
			var d ratelimit.Decision
			for end := time.Now().Add(10 * time.Second); time.Now().Before(end); time.Sleep(50 * time.Millisecond) {
				ctx, cancel := context.WithTimeout(context.Background(), time.Second)
				d, err = l.lim.Allow(ctx, "k")
				cancel()
				if err == nil {
					break
				}
			}
			if err != nil || !d.Allowed {
				t.Fatalf("%s: %s: lim.Allow(k) did not recover within 10s: %v, %v", when, l.name, d.Allowed, err)
			}
		}
	}

	srv.Freeze()
	failing("server frozen")
	srv.Thaw()
	recovered("server thawed")

	srv.Stop()
	failing("server stopped")
	srv.Start() // empty: no keys and no scripts
	recovered("server restarted")

	closeClient()
	srv.Stop()
	var now int
	for i := 0; i < 150; i++ {
		if now = runtime.NumGoroutine(); now <= before {
			return
		}
		time.Sleep(20 * time.Millisecond)
	}
	buf := make([]byte, 1<<16)
	t.Errorf("%d goroutines before the test, %d after closing the client: a leak\n%s", before, now, buf[:runtime.Stack(buf, true)])
}

func unwrapAll(err error) []error {
	if u, ok := err.(interface{ Unwrap() []error }); ok {
		return u.Unwrap()
	}
	return nil
}

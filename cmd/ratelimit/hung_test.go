package main

import (
	"context"
	"errors"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ratelimitkit/ratelimit/internal/testserver"
)

// TestServeHungStore: serve, on the Redis client the command builds, with
// its Redis process frozen (SIGSTOP), answers 40 concurrent clients on its
// six endpoints with 503 and a Retry-After within the limiters' default
// store budget and a little slack, not after the clients' own timeouts and
// retries, and queued behind one another's hung batches.
func TestServeHungStore(t *testing.T) {
	srv := testserver.StartRedis(t)
	store, closeStore, err := openStore(context.Background(), "redis://"+srv.Addr(), func(string) string { return "" })
	if err != nil {
		t.Fatal(err)
	}
	defer closeStore()
	cfg, err := parseServeFlags(nil)
	if err != nil {
		t.Fatal(err)
	}
	d, err := newDemo(cfg, store, func(*http.Request, error) {})
	if err != nil {
		t.Fatal(err)
	}
	if err := d.check(context.Background()); err != nil {
		t.Fatal(err)
	}
	hs := httptest.NewServer(d)
	defer hs.Close()
	if len(d.endpoints) != 6 {
		t.Fatalf("the demo has %d endpoints, want 6", len(d.endpoints))
	}
	for _, e := range d.endpoints { // a healthy store first
		if r := fetch(t, hs.URL+e.path); r.status != http.StatusOK {
			t.Fatalf("GET %s with the store up: status %d, want 200", e.path, r.status)
		}
	}

	srv.Freeze()
	defer srv.Thaw()
	const slack = 700 * time.Millisecond // 40 clients under -race on a loaded machine
	client := &http.Client{Timeout: defaultStoreTimeout + 10*time.Second}
	var wg sync.WaitGroup
	var mu sync.Mutex
	var slowest time.Duration
	for i := range 40 {
		path := d.endpoints[i%len(d.endpoints)].path
		wg.Go(func() {
			start := time.Now()
			resp, err := client.Get(hs.URL + path)
			took := time.Since(start)
			mu.Lock()
			slowest = max(slowest, took)
			mu.Unlock()
			if err != nil {
				t.Errorf("GET %s on a frozen store: %v after %v", path, err, took)
				return
			}
			resp.Body.Close()
			if resp.StatusCode != http.StatusServiceUnavailable || resp.Header.Get("Retry-After") == "" || strings.HasPrefix(resp.Header.Get("Retry-After"), "0") {
				t.Errorf("GET %s on a frozen store: status %d, Retry-After %q; want 503 with a Retry-After", path, resp.StatusCode, resp.Header.Get("Retry-After"))
			}
			if took > defaultStoreTimeout+slack {
				t.Errorf("GET %s on a frozen store answered after %v, want within the store budget %v + %v", path, took, defaultStoreTimeout, slack)
			}
		})
	}
	wg.Wait()
	t.Logf("40 clients on 6 endpoints, store frozen: the slowest answer came after %v", slowest)
}

// TestUnreachableStoreFailsFast runs the command in a child process against
// a Redis address nothing listens on, and against a frozen Redis: it exits
// with an error in seconds, and go-redis's own log lines (a failed dial,
// "redis: 2026/01/02 15:04:05 pool.go:...") stay off the terminal.
func TestUnreachableStoreFailsFast(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	closed := l.Addr().String()
	l.Close()
	frozen := testserver.StartRedis(t)
	frozen.Freeze()
	defer frozen.Thaw()
	out := filepath.Join(t.TempDir(), "state")
	clientLog := regexp.MustCompile(`(?m)^redis: \d{4}/\d\d/\d\d |pool\.go:\d+`)
	for _, c := range []struct {
		what, args string
		within     time.Duration
	}{
		{"serve, nothing listening", "serve -addr 127.0.0.1:0 -store redis://" + closed, 5 * time.Second},
		{"move, nothing listening", "move -from redis://" + closed + " -to file:" + out, 5 * time.Second},
		{"serve, frozen", "serve -addr 127.0.0.1:0 -store redis://" + frozen.Addr(), defaultStoreTimeout + 3*time.Second},
	} {
		cmd := exec.Command(os.Args[0], "-test.run=^$")
		cmd.Env = append(os.Environ(), "RATELIMIT_CMD_TEST_MAIN=1", "RATELIMIT_CMD_TEST_ARGS="+c.args)
		start := time.Now()
		timer := time.AfterFunc(60*time.Second, func() { cmd.Process.Kill() }) // the test's own bound
		output, err := cmd.CombinedOutput()
		timer.Stop()
		took := time.Since(start)
		var exit *exec.ExitError
		if !errors.As(err, &exit) || exit.ExitCode() != exitError {
			t.Errorf("%s: ratelimit %s: %v, want exit status %d; output:\n%s", c.what, c.args, err, exitError, output)
		}
		if took > c.within {
			t.Errorf("%s: ratelimit %s took %v to fail, want within %v", c.what, c.args, took, c.within)
		}
		if clientLog.Match(output) {
			t.Errorf("%s: ratelimit %s printed the client's own log lines:\n%s", c.what, c.args, output)
		}
		t.Logf("%s: failed after %v: %s", c.what, took.Round(time.Millisecond), strings.TrimSpace(string(output)))
	}
}

// defaultStoreTimeout is the store budget of a limiter without
// ratelimit.WithStoreTimeout (one second).
const defaultStoreTimeout = time.Second

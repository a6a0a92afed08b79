package dynamo_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/aws/smithy-go"

	"github.com/ratelimitkit/ratelimit"
	"github.com/ratelimitkit/ratelimit/algorithms"
	"github.com/ratelimitkit/ratelimit/clock"
	"github.com/ratelimitkit/ratelimit/internal/testserver"
	"github.com/ratelimitkit/ratelimit/store"
	"github.com/ratelimitkit/ratelimit/store/dynamo"
)

// workers counts the store's queue workers still running.
func workers() int {
	buf := make([]byte, 1<<20)
	n := runtime.Stack(buf, true)
	return strings.Count(string(buf[:n]), "store/dynamo.(*Store).work(")
}

// checkNoWorkers fails the test if queue workers outlive the calls.
func checkNoWorkers(t *testing.T) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for workers() > 0 && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	if n := workers(); n > 0 {
		t.Errorf("%d queue workers still running after every call returned (goroutine leak)", n)
	}
}

// TestServerStopped stops the server during a test: decisions fail within
// their context's deadline with an error that reaches the SDK's, the
// failure policy applies, and once the server is back (empty, as dynalite
// in memory loses everything) and the table is recreated, the store
// recovers.
func TestServerStopped(t *testing.T) {
	srv := testserver.StartDynalite(t)
	// No SDK retries: the store's own retries are under test.
	client := newClient("http://"+srv.Addr(), func(o *dynamodb.Options) { o.Retryer = aws.NopRetryer{} })
	ctx := context.Background()
	const table = "ratelimit-fault"
	if _, err := dynamo.CreateTable(ctx, client, table); err != nil {
		t.Fatal(err)
	}
	// Retries enough to outlast any deadline: only the deadline can stop
	// them in time.
	s, err := dynamo.New(client, dynamo.WithTable(table), dynamo.WithMaxRetries(1000), dynamo.WithBackoff(20*time.Millisecond, 200*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	fc := clock.NewFake(epoch)
	alg := algorithms.FixedWindow(100, time.Minute)
	closed, _ := ratelimit.New(s, alg, ratelimit.WithClock(fc), ratelimit.WithName("closed"), ratelimit.WithFailurePolicy(ratelimit.FailClosed))
	open, _ := ratelimit.New(s, alg, ratelimit.WithClock(fc), ratelimit.WithName("open"), ratelimit.WithFailurePolicy(ratelimit.FailOpen))
	for _, lim := range []*ratelimit.Limiter{closed, open} {
		if d, err := lim.Allow(ctx, "k"); err != nil || !d.Allowed {
			t.Fatalf("lim.Allow with the server up = %+v, %v", d, err)
		}
	}

	srv.Stop()
	for _, c := range []struct {
		lim   *ratelimit.Limiter
		allow bool
	}{{closed, false}, {open, true}} {
		for _, key := range []string{"k", "unseen"} {
			cctx, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
			start := time.Now()
			d, err := c.lim.Allow(cctx, key)
			took := time.Since(start)
			cancel()
			if err == nil {
				t.Fatalf("%s lim.Allow(%q) with the server down: no error", c.lim.Namespace(), key)
			}
			if took > 1200*time.Millisecond {
				t.Errorf("%s lim.Allow(%q) with the server down took %v, want within the 300ms deadline", c.lim.Namespace(), key, took)
			}
			if d.Allowed != c.allow {
				t.Errorf("%s lim.Allow(%q) with the server down: allowed = %v, want %v (failure policy)", c.lim.Namespace(), key, d.Allowed, c.allow)
			}
			// The backend's error stays reachable: the refused connection,
			// or, when the deadline struck during an attempt, the
			// context's error that ended it.
			var opErr *smithy.OperationError
			var netErr *net.OpError
			if !errors.As(err, &opErr) || !errors.As(err, &netErr) && !errors.Is(err, context.DeadlineExceeded) {
				t.Errorf("error %v does not reach the SDK's OperationError and either net.OpError or the deadline", err)
			}
			if !strings.HasPrefix(err.Error(), "dynamo: ") {
				t.Errorf("error %q lacks the dynamo: prefix", err)
			}
			t.Logf("%s after %v: %v", c.lim.Namespace(), took.Round(time.Millisecond), err)
		}
	}
	// Without a deadline either, a refused connection is not retried
	// (TestOneRetryPolicy counts the retries of what is retried): the
	// call returns the refusal after one attempt.
	few, err := dynamo.New(client, dynamo.WithTable(table), dynamo.WithMaxRetries(3), dynamo.WithBackoff(5*time.Millisecond, 20*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	if err := few.Delete(ctx, store.Key{Namespace: closed.Namespace(), ID: "k"}); !errors.Is(err, syscall.ECONNREFUSED) || strings.Contains(err.Error(), "gave up") {
		t.Errorf("store.Delete with the server down and no deadline = %v, want the refused connection after one attempt", err)
	}

	srv.Start()
	if _, err := dynamo.CreateTable(ctx, client, table); err != nil {
		t.Fatalf("CreateTable after restart: %v", err)
	}
	for _, lim := range []*ratelimit.Limiter{closed, open} {
		// The store remembers state the restarted server lost: its first
		// write fails its condition, and it recovers from the truth.
		if d, err := lim.Allow(ctx, "k"); err != nil || !d.Allowed || d.Remaining != 99 {
			t.Errorf("%s lim.Allow after restart = %+v, %v; want allowed with remaining 99 (the server lost its data)", lim.Namespace(), d, err)
		}
	}
	checkNoWorkers(t)
}

// TestNoGoroutineLeak runs decisions whose contexts end at random points,
// in flight included, and checks that the per-key workers end once their
// queues are empty. It uses a private dynalite, since dynalite 4.0.0 may
// crash when a client aborts a request (index.js throws on the request's
// "aborted" error); the store's retries are cut short so that the test
// ends quickly either way.
func TestNoGoroutineLeak(t *testing.T) {
	srv := testserver.StartDynalite(t)
	client := newClient("http://" + srv.Addr())
	table := newTable(t, client)
	s, err := dynamo.New(client, dynamo.WithTable(table), dynamo.WithMaxRetries(1), dynamo.WithBackoff(time.Millisecond, 5*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	lim, err := ratelimit.New(s, algorithms.TokenBucket(100, time.Second, 100))
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	for w := 0; w < 16; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < 20; i++ {
				ctx, cancel := context.WithTimeout(context.Background(), time.Duration(i%3+1)*time.Millisecond)
				lim.Allow(ctx, "key-"+strconv.Itoa(i%4))
				cancel()
				ctx, cancel = context.WithTimeout(context.Background(), time.Second)
				lim.Allow(ctx, "key-"+strconv.Itoa(i%5))
				cancel()
			}
		}()
	}
	wg.Wait()
	checkNoWorkers(t)
	if !srv.Running() {
		t.Logf("dynalite crashed when a client aborted a request (a known dynalite defect)")
	}
}

// serveProxy serves h on a free loopback port until the test ends and
// returns its URL.
func serveProxy(t *testing.T, h http.Handler) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	hs := &http.Server{Handler: h}
	go hs.Serve(l)
	t.Cleanup(func() { hs.Close() })
	return "http://" + l.Addr().String()
}

// throttler is an HTTP proxy in front of a real server that answers the
// first n requests (all of them when n < 0) with a throttling error, as
// DynamoDB does under load, and forwards the rest.
type throttler struct {
	n, seen, throttled atomic.Int64
	code               string
	proxy              *httputil.ReverseProxy
}

func (p *throttler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	seen := p.seen.Add(1)
	if n := p.n.Load(); n < 0 || seen <= n {
		io.Copy(io.Discard, r.Body)
		p.throttled.Add(1)
		w.Header().Set("Content-Type", "application/x-amz-json-1.0")
		w.WriteHeader(http.StatusBadRequest)
		fmt.Fprintf(w, `{"__type":"com.amazonaws.dynamodb.v20120810#%s","message":"throttled by the test proxy"}`, p.code)
		return
	}
	p.proxy.ServeHTTP(w, r)
}

// TestThrottlingRetried checks that throttling errors are retried with
// backoff, and surfaced, reachable with errors.As, when they last past the
// context's deadline.
func TestThrottlingRetried(t *testing.T) {
	endpoint := testserver.DynamoDBEndpoint(t)
	direct := newClient(endpoint)
	table := newTable(t, direct)
	target, _ := url.Parse(endpoint)
	for _, code := range []string{"ProvisionedThroughputExceededException", "ThrottlingException", "RequestLimitExceeded"} {
		t.Run(code, func(t *testing.T) {
			p := &throttler{code: code, proxy: httputil.NewSingleHostReverseProxy(target)}
			p.n.Store(3)
			proxyURL := serveProxy(t, p)
			client := newClient(proxyURL, func(o *dynamodb.Options) { o.Retryer = aws.NopRetryer{} })
			s, err := dynamo.New(client, dynamo.WithTable(table), dynamo.WithBackoff(time.Millisecond, 20*time.Millisecond))
			if err != nil {
				t.Fatal(err)
			}
			lim, _ := ratelimit.New(s, algorithms.GCRA(10, time.Second, 10), ratelimit.WithName(strings.ReplaceAll(code, "Exception", "")))
			d, err := lim.Allow(context.Background(), "throttled")
			if err != nil || !d.Allowed {
				t.Fatalf("lim.Allow through 3 throttled responses = %+v, %v; want allowed", d, err)
			}
			if p.throttled.Load() != 3 {
				t.Errorf("proxy throttled %d requests, want 3", p.throttled.Load())
			}
			p.n.Store(-1)
			ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
			defer cancel()
			start := time.Now()
			_, err = lim.Allow(ctx, "throttled")
			if took := time.Since(start); took > 600*time.Millisecond {
				t.Errorf("lim.Allow while always throttled took %v, want within the 200ms deadline", took)
			}
			var api smithy.APIError
			if !errors.As(err, &api) || api.ErrorCode() != code {
				t.Errorf("lim.Allow while always throttled = %v, want an error reaching the SDK's %s", err, code)
			}
			if code == "ProvisionedThroughputExceededException" {
				var pte *types.ProvisionedThroughputExceededException
				if !errors.As(err, &pte) {
					t.Errorf("errors.As(%v, *types.ProvisionedThroughputExceededException) = false", err)
				}
			}
			if retries := p.throttled.Load() - 3; retries < 3 {
				t.Errorf("only %d attempts while always throttled within 200ms, want retries", retries)
			}
			t.Logf("%v", err)
		})
	}
}

// TestOneRetryPolicy checks that the store's retries do not stack on the
// client's: with the AWS client's default retryer (three attempts per
// call) and WithMaxRetries(2), a request that is always throttled is sent
// exactly three times.
func TestOneRetryPolicy(t *testing.T) {
	endpoint := testserver.DynamoDBEndpoint(t)
	table := newTable(t, newClient(endpoint))
	target, _ := url.Parse(endpoint)
	p := &throttler{code: "ThrottlingException", proxy: httputil.NewSingleHostReverseProxy(target)}
	p.n.Store(-1)
	proxyURL := serveProxy(t, p)
	client := newClient(proxyURL) // the SDK's default retryer
	s, err := dynamo.New(client, dynamo.WithTable(table), dynamo.WithMaxRetries(2), dynamo.WithBackoff(time.Millisecond, 2*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	// No store budget: without a deadline, WithMaxRetries alone bounds the
	// attempts (with one, the store retries until the deadline).
	lim, _ := ratelimit.New(s, algorithms.GCRA(10, time.Second, 10), ratelimit.WithName("one-policy"), ratelimit.WithStoreTimeout(0))
	if _, err := lim.Allow(context.Background(), "k"); err == nil {
		t.Fatal("lim.Allow while always throttled = no error")
	}
	if got := p.throttled.Load(); got != 3 {
		t.Errorf("one decision while always throttled sent %d requests, want 3 (WithMaxRetries(2) and no client retries)", got)
	}
}

// dropper is an HTTP proxy in front of a real server that forwards the
// request numbered drop and then cuts the connection instead of answering,
// as when a response is lost on the network after the table applied the
// write.
type dropper struct {
	drop, seen atomic.Int64
	target     *url.URL
}

func (p *dropper) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if p.seen.Add(1) != p.drop.Load() {
		httputil.NewSingleHostReverseProxy(p.target).ServeHTTP(w, r)
		return
	}
	rec := &discard{header: http.Header{}}
	httputil.NewSingleHostReverseProxy(p.target).ServeHTTP(rec, r)
	conn, _, err := w.(http.Hijacker).Hijack()
	if err == nil {
		conn.Close()
	}
}

type discard struct{ header http.Header }

func (d *discard) Header() http.Header         { return d.header }
func (d *discard) Write(b []byte) (int, error) { return len(b), nil }
func (d *discard) WriteHeader(int)             {}

// TestLostResponse checks that a write whose response is lost, and which
// the store therefore retries, is counted once: the retry fails its
// condition against the item the first attempt wrote, and the store
// recognises its own version there.
func TestLostResponse(t *testing.T) {
	endpoint := testserver.DynamoDBEndpoint(t)
	table := newTable(t, newClient(endpoint))
	target, _ := url.Parse(endpoint)
	for _, cold := range []bool{false, true} {
		p := &dropper{target: target}
		proxyURL := serveProxy(t, p)
		client := &counter{Client: newClient(proxyURL, func(o *dynamodb.Options) { o.Retryer = aws.NopRetryer{} })}
		s, err := dynamo.New(client, dynamo.WithTable(table), dynamo.WithBackoff(time.Millisecond, 10*time.Millisecond))
		if err != nil {
			t.Fatal(err)
		}
		fc := clock.NewFake(epoch)
		lim, _ := ratelimit.New(s, algorithms.FixedWindow(10, time.Minute), ratelimit.WithClock(fc), ratelimit.WithName(fmt.Sprintf("lost-%v", cold)))
		ctx := context.Background()
		p.drop.Store(1) // the conditional create of a new key
		if !cold {
			if _, err := lim.Allow(ctx, "k"); err != nil {
				t.Fatal(err)
			}
			p.drop.Store(2) // the conditional update of a known key
		}
		d, err := lim.Allow(ctx, "k")
		if err != nil || !d.Allowed {
			t.Fatalf("lim.Allow with a lost response = %+v, %v; want allowed", d, err)
		}
		want := 9
		if !cold {
			want = 8
		}
		if d.Remaining != want {
			t.Errorf("lim.Allow with a lost response (new key: %v) = remaining %d, want %d (the decision counted once)", cold, d.Remaining, want)
		}
		d, err = lim.Allow(ctx, "k")
		if err != nil || d.Remaining != want-1 {
			t.Errorf("next lim.Allow = %+v, %v; want remaining %d", d, err, want-1)
		}
		t.Logf("new key %v: %d reads, %d writes", cold, client.gets.Load(), client.puts.Load())
	}
}

package httplimit_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"runtime"
	"slices"
	"testing"
	"time"

	"github.com/ratelimitkit/ratelimit"
	"github.com/ratelimitkit/ratelimit/algorithms"
	"github.com/ratelimitkit/ratelimit/httplimit"
	"github.com/ratelimitkit/ratelimit/internal/cputime"
	"github.com/ratelimitkit/ratelimit/store/memory"
)

// The benchmarks run on the memory store with a limit no request reaches,
// so every request is admitted and takes the full path: key, decision,
// RateLimit-Policy and RateLimit fields, the next handler.
//
//	go test -run '^$' -bench . -benchmem ./httplimit/
//	go test -run '^$' -bench Overhead -benchtime 201x ./httplimit/

// fiveHops is an X-Forwarded-For of five hops: the client, then four
// trusted proxies; the connection comes from a fifth.
const fiveHops = "203.0.113.9, 10.0.0.1, 10.0.0.2, 10.0.0.3, 10.0.0.4"

func benchLimiter(b *testing.B) *ratelimit.Limiter {
	lim, err := ratelimit.New(memory.MustNew(), algorithms.GCRA(1<<40, time.Second, 1<<30))
	if err != nil {
		b.Fatal(err)
	}
	return lim
}

// nopWriter is a ResponseWriter that keeps the headers and drops the rest,
// so that the benchmarks measure the middleware, not a recorder.
type nopWriter struct{ h http.Header }

func (w *nopWriter) Header() http.Header         { return w.h }
func (w *nopWriter) Write(p []byte) (int, error) { return len(p), nil }
func (w *nopWriter) WriteHeader(int)             {}

var nop = http.HandlerFunc(func(http.ResponseWriter, *http.Request) {})

func benchRequest() *http.Request {
	r := httptest.NewRequest(http.MethodGet, "/", nil)
	r.RemoteAddr = "203.0.113.9:4711"
	return r
}

// BenchmarkAllow is the bare decision the middleware wraps.
func BenchmarkAllow(b *testing.B) {
	lim := benchLimiter(b)
	ctx := context.Background()
	b.ReportAllocs()
	for b.Loop() {
		if _, err := lim.Allow(ctx, "203.0.113.9"); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkMiddleware is one admitted request through the middleware,
// keyed by RemoteIP.
func BenchmarkMiddleware(b *testing.B) {
	h := benchMiddleware(b, []httplimit.Rule{{Limiter: benchLimiter(b)}})
	if h.Get("RateLimit") == "" {
		b.Fatal("no RateLimit field")
	}
}

// benchMiddleware times one request through a middleware of rules and
// returns the header fields it wrote.
func benchMiddleware(b *testing.B, rules []httplimit.Rule) http.Header {
	mw, err := httplimit.New(rules)
	if err != nil {
		b.Fatal(err)
	}
	h := mw.Handler(nop)
	r := benchRequest()
	w := &nopWriter{h: make(http.Header)}
	b.ReportAllocs()
	for b.Loop() {
		clear(w.h)
		h.ServeHTTP(w, r)
	}
	return w.h
}

// BenchmarkMiddlewareTier is BenchmarkMiddleware with the rule's numbers
// chosen per request (Rule.Tier): a tier made beforehand, whose
// RateLimit-Policy member is serialised once.
func BenchmarkMiddlewareTier(b *testing.B) {
	lim := benchLimiter(b)
	tier, err := lim.Tier(algorithms.GCRA(2, time.Second, 1e9))
	if err != nil {
		b.Fatal(err)
	}
	h := benchMiddleware(b, []httplimit.Rule{{Limiter: lim, Tier: func(*http.Request) *ratelimit.Tier { return tier }}})
	if h.Get("RateLimit-Policy") != `"gcra";q=1000000000;w=500000000` {
		b.Fatalf("RateLimit-Policy %q, want the tier's", h.Get("RateLimit-Policy"))
	}
}

// BenchmarkClientIPForwarded is key extraction behind five hops of
// X-Forwarded-For, walked from the right past four trusted proxies. The
// one allocation is the key string.
func BenchmarkClientIPForwarded(b *testing.B) {
	key, err := httplimit.ClientIP(httplimit.TrustProxies("10.0.0.0/8"))
	if err != nil {
		b.Fatal(err)
	}
	r := benchRequest()
	r.RemoteAddr = "10.0.0.5:4711"
	r.Header.Set("X-Forwarded-For", fiveHops)
	b.ReportAllocs()
	for b.Loop() {
		if k, err := key(r); err != nil || k != "203.0.113.9" {
			b.Fatalf("key %q, %v", k, err)
		}
	}
}

// BenchmarkOverhead measures the middleware's cost over a bare Allow in
// one process: each of its b.N rounds measures a batch of bare Allow calls
// and then a batch of requests through the middleware, interleaved, in
// the CPU time of the benchmark's thread (steadier than wall time on a
// shared machine), and it
// reports the median per-request difference with its range, the median
// ratio, and the allocations the middleware adds. Run it with a round
// count: -benchtime 201x.
func BenchmarkOverhead(b *testing.B) {
	const batch = 5000
	lim := benchLimiter(b)
	mw, err := httplimit.New([]httplimit.Rule{{Limiter: lim}})
	if err != nil {
		b.Fatal(err)
	}
	h := mw.Handler(nop)
	r := benchRequest()
	w := &nopWriter{h: make(http.Header)}
	ctx := context.Background()
	allow := func() {
		if _, err := lim.Allow(ctx, "203.0.113.9"); err != nil {
			b.Fatal(err)
		}
	}
	serve := func() {
		clear(w.h)
		h.ServeHTTP(w, r)
	}
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	measure := func(f func()) time.Duration {
		start := cputime.Thread()
		for range batch {
			f()
		}
		return cputime.Thread() - start
	}
	measure(allow) // warm up
	measure(serve)
	var over, ratio []float64
	for range b.N {
		a := measure(allow)
		m := measure(serve)
		over = append(over, float64(m-a)/batch)
		ratio = append(ratio, float64(m)/float64(a))
	}
	slices.Sort(over)
	slices.Sort(ratio)
	extraAllocs := testing.AllocsPerRun(1000, serve) - testing.AllocsPerRun(1000, allow)
	b.ReportMetric(over[len(over)/2], "overhead-ns/req")
	b.ReportMetric(over[0], "overhead-min-ns")
	b.ReportMetric(over[len(over)-1], "overhead-max-ns")
	b.ReportMetric(ratio[len(ratio)/2], "ratio")
	b.ReportMetric(extraAllocs, "extra-allocs/req")
	b.ReportMetric(0, "ns/op") // the per-round time means nothing here
}

// TestClientIPAllocs holds key extraction behind five hops to the one
// allocation of the key string.
func TestClientIPAllocs(t *testing.T) {
	key := mustClientIP(t, httplimit.TrustProxies("10.0.0.0/8"))
	r := benchRequest()
	r.RemoteAddr = "10.0.0.5:4711"
	r.Header.Set("X-Forwarded-For", fiveHops)
	if n := testing.AllocsPerRun(100, func() { key(r) }); n > 1 {
		t.Errorf("ClientIP behind five hops: %v allocations, want at most 1 (the key)", n)
	}
}

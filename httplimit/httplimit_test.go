package httplimit_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/dunglas/httpsfv"
	goredis "github.com/redis/go-redis/v9"

	"github.com/ratelimitkit/ratelimit"
	"github.com/ratelimitkit/ratelimit/algorithms"
	"github.com/ratelimitkit/ratelimit/clock"
	"github.com/ratelimitkit/ratelimit/httplimit"
	"github.com/ratelimitkit/ratelimit/internal/testserver"
	"github.com/ratelimitkit/ratelimit/store"
	"github.com/ratelimitkit/ratelimit/store/memory"
	"github.com/ratelimitkit/ratelimit/store/redis"
)

// epoch is a multiple of every period the tests use, so windows start on it.
var epoch = time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)

// ok is the handler behind the middleware.
var ok = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "ok\n") })

func newLimiter(t testing.TB, alg algorithms.Algorithm, opts ...ratelimit.Option) *ratelimit.Limiter {
	t.Helper()
	lim, err := ratelimit.New(memory.MustNew(), alg, opts...)
	if err != nil {
		t.Fatal(err)
	}
	return lim
}

// serve starts a real HTTP server running next behind a middleware built
// from rules and opts.
func serve(t *testing.T, rules []httplimit.Rule, next http.Handler, opts ...httplimit.Option) *httptest.Server {
	t.Helper()
	mw, err := httplimit.New(rules, opts...)
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(mw.Handler(next))
	t.Cleanup(srv.Close)
	return srv
}

// response is what a real client received.
type response struct {
	status int
	header http.Header
	body   string
}

func get(t *testing.T, c *http.Client, url string, header ...string) response {
	t.Helper()
	req, err := http.NewRequest(http.MethodGet, url, nil)
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i+1 < len(header); i += 2 {
		req.Header.Add(header[i], header[i+1])
	}
	resp, err := c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return response{resp.StatusCode, resp.Header, string(b)}
}

// statuses makes n GET requests and returns their status codes, printed.
func statuses(t *testing.T, srv *httptest.Server, n int) string {
	t.Helper()
	var got []int
	for range n {
		got = append(got, get(t, srv.Client(), srv.URL).status)
	}
	return fmt.Sprint(got)
}

// member is one parsed member of a RateLimit or RateLimit-Policy field.
type member struct {
	name   string
	params map[string]int64
}

// parseField parses a RateLimit or RateLimit-Policy field with httpsfv,
// requiring a List of String Items with Integer parameters.
func parseField(t *testing.T, h http.Header, name string) []member {
	t.Helper()
	values := h.Values(name)
	if len(values) == 0 {
		t.Fatalf("no %s field in %v", name, h)
	}
	list, err := httpsfv.UnmarshalList(values)
	if err != nil {
		t.Fatalf("%s: %q is not a structured field list: %v", name, values, err)
	}
	var out []member
	for _, m := range list {
		item, ok := m.(httpsfv.Item)
		if !ok {
			t.Fatalf("%s: member %v is not an item", name, m)
		}
		s, ok := item.Value.(string)
		if !ok {
			t.Fatalf("%s: member %v is not a string", name, item.Value)
		}
		mb := member{name: s, params: map[string]int64{}}
		for _, k := range item.Params.Names() {
			v, _ := item.Params.Get(k)
			n, ok := v.(int64)
			if !ok {
				t.Fatalf("%s: parameter %s=%v is not an integer", name, k, v)
			}
			mb.params[k] = n
		}
		out = append(out, mb)
	}
	return out
}

// TestFieldsPerAlgorithm checks q, w, r and t for each algorithm as
// docs/algorithms.md defines them, and the 429 that follows the quota.
func TestFieldsPerAlgorithm(t *testing.T) {
	tests := []struct {
		alg algorithms.Algorithm
		// after one request at a window start, and on the denial after
		// the quota is spent
		q, w, r, t, retry int64
		rule              string
	}{
		{algorithms.FixedWindow(3, 3*time.Second), 3, 3, 2, 3, 3, "fixed window: t is the window's end"},
		{algorithms.SlidingLog(3, 3*time.Second), 3, 3, 2, 3, 3, "sliding log: t is when the newest entry leaves"},
		{algorithms.SlidingWindow(3, 3*time.Second), 3, 3, 2, 6, 4, "sliding window: t is when the current count has aged out; the retry waits into the next window"},
		{algorithms.TokenBucket(3, 3*time.Second, 3), 3, 3, 2, 1, 1, "token bucket: t is when the bucket is full"},
		{algorithms.GCRA(3, 3*time.Second, 3), 3, 3, 2, 1, 1, "gcra: as the token bucket"},
		{algorithms.LeakyBucket(3, 3*time.Second, 3), 3, 3, 2, 1, 1, "leaky bucket: t is when the queue has drained"},
		{algorithms.GCRA(1, 2*time.Second, 5), 5, 10, 4, 2, 2, "a burst above the limit: w is the refill time of the burst"},
	}
	for _, tt := range tests {
		t.Run(tt.alg.Name(), func(t *testing.T) {
			c := clock.NewFake(epoch)
			lim := newLimiter(t, tt.alg, ratelimit.WithClock(c))
			srv := serve(t, []httplimit.Rule{{Limiter: lim, Name: "demo"}}, ok, httplimit.WithoutDelay(), httplimit.WithLegacyHeaders())
			resp := get(t, srv.Client(), srv.URL)
			if resp.status != http.StatusOK {
				t.Fatalf("first request: status %d, want 200 (%s)", resp.status, resp.body)
			}
			pol := parseField(t, resp.header, "RateLimit-Policy")
			if len(pol) != 1 || pol[0].name != "demo" || pol[0].params["q"] != tt.q || pol[0].params["w"] != tt.w || len(pol[0].params) != 2 {
				t.Errorf("RateLimit-Policy = %+v, want \"demo\";q=%d;w=%d (%s)", pol, tt.q, tt.w, tt.rule)
			}
			rl := parseField(t, resp.header, "RateLimit")
			if len(rl) != 1 || rl[0].name != "demo" || rl[0].params["r"] != tt.r || rl[0].params["t"] != tt.t || len(rl[0].params) != 2 {
				t.Errorf("RateLimit = %+v, want \"demo\";r=%d;t=%d (%s)", rl, tt.r, tt.t, tt.rule)
			}
			legacy := []string{resp.header.Get("X-RateLimit-Limit"), resp.header.Get("X-RateLimit-Remaining"), resp.header.Get("X-RateLimit-Reset")}
			if want := []string{fmt.Sprint(tt.q), fmt.Sprint(tt.r), fmt.Sprint(tt.t)}; strings.Join(legacy, " ") != strings.Join(want, " ") {
				t.Errorf("X-RateLimit-Limit/Remaining/Reset = %v, want %v (q, r, t)", legacy, want)
			}
			if resp.header.Get("Retry-After") != "" {
				t.Errorf("admitted request has Retry-After %q", resp.header.Get("Retry-After"))
			}
			for i := int64(1); i < tt.q; i++ {
				if resp := get(t, srv.Client(), srv.URL); resp.status != http.StatusOK {
					t.Fatalf("request %d: status %d, want 200", i+1, resp.status)
				}
			}
			resp = get(t, srv.Client(), srv.URL)
			if resp.status != http.StatusTooManyRequests {
				t.Fatalf("request %d: status %d, want 429", tt.q+1, resp.status)
			}
			if got := resp.header.Get("Retry-After"); got != fmt.Sprint(tt.retry) {
				t.Errorf("Retry-After = %q, want %d (%s)", got, tt.retry, tt.rule)
			}
			if rl := parseField(t, resp.header, "RateLimit"); rl[0].params["r"] != 0 {
				t.Errorf("denied: RateLimit = %+v, want r=0", rl)
			}
		})
	}
}

// TestRetryAfterRounding: Retry-After is whole seconds rounded up, and
// never 0 on a denial.
func TestRetryAfterRounding(t *testing.T) {
	tests := []struct {
		alg  algorithms.Algorithm
		want string
		rule string
	}{
		{algorithms.GCRA(10, time.Second, 1), "1", "a 100ms wait is 1, never 0"},
		{algorithms.TokenBucket(2, 3*time.Second, 1), "2", "a 1.5s wait rounds up to 2"},
		{algorithms.FixedWindow(1, 2*time.Second), "2", "exact seconds stay as they are"},
	}
	for _, tt := range tests {
		c := clock.NewFake(epoch)
		srv := serve(t, []httplimit.Rule{{Limiter: newLimiter(t, tt.alg, ratelimit.WithClock(c))}}, ok)
		get(t, srv.Client(), srv.URL)
		resp := get(t, srv.Client(), srv.URL)
		if resp.status != http.StatusTooManyRequests || resp.header.Get("Retry-After") != tt.want {
			t.Errorf("%v: second request = %d with Retry-After %q, want 429 with %s (%s)",
				tt.alg, resp.status, resp.header.Get("Retry-After"), tt.want, tt.rule)
		}
	}
}

// problemBody is an RFC 9457 body as a client reads it.
type problemBody struct {
	Type       string `json:"type"`
	Title      string `json:"title"`
	Status     int    `json:"status"`
	Detail     string `json:"detail"`
	RetryAfter int64  `json:"retry_after"`
}

func parseProblem(t *testing.T, resp response) problemBody {
	t.Helper()
	if ct := resp.header.Get("Content-Type"); ct != "application/problem+json" {
		t.Errorf("Content-Type = %q, want application/problem+json", ct)
	}
	var p problemBody
	if err := json.Unmarshal([]byte(resp.body), &p); err != nil {
		t.Fatalf("body %q: %v", resp.body, err)
	}
	if p.Status != resp.status || p.Type != "about:blank" || p.Title != http.StatusText(resp.status) {
		t.Errorf("problem %+v does not match status %d", p, resp.status)
	}
	return p
}

func TestDenialBody(t *testing.T) {
	lim := newLimiter(t, algorithms.FixedWindow(1, time.Hour), ratelimit.WithClock(clock.NewFake(epoch)), ratelimit.WithName("api"))
	srv := serve(t, []httplimit.Rule{{Limiter: lim}}, ok)
	get(t, srv.Client(), srv.URL)
	resp := get(t, srv.Client(), srv.URL)
	p := parseProblem(t, resp)
	if resp.status != http.StatusTooManyRequests || p.RetryAfter != 3600 || !strings.Contains(p.Detail, `"api"`) {
		t.Errorf("denial = %d %+v, want 429 naming \"api\" with retry_after 3600", resp.status, p)
	}
}

func TestDenyHandler(t *testing.T) {
	lim := newLimiter(t, algorithms.FixedWindow(1, time.Minute), ratelimit.WithClock(clock.NewFake(epoch)))
	deny := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		res, ok := httplimit.ResultFrom(r.Context())
		if !ok {
			t.Error("deny handler: no Result in the context")
		}
		w.WriteHeader(http.StatusTooManyRequests)
		fmt.Fprintf(w, "rule %s, retry %v, allowed %v", res.Rule, res.RetryAfter, res.Decision.Allowed)
	})
	srv := serve(t, []httplimit.Rule{{Limiter: lim, Name: "mine"}}, ok, httplimit.WithDenyHandler(deny))
	get(t, srv.Client(), srv.URL)
	resp := get(t, srv.Client(), srv.URL)
	if want := "rule mine, retry 1m0s, allowed false"; resp.body != want || resp.header.Get("Retry-After") != "60" {
		t.Errorf("custom denial = %q with Retry-After %q, want %q with 60", resp.body, resp.header.Get("Retry-After"), want)
	}
}

// deadStore returns a Redis store whose server is gone: a real client
// against a loopback port nothing listens on.
func deadStore(t *testing.T) store.Store {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	c := goredis.NewClient(&goredis.Options{Addr: addr, MaxRetries: -1, DialTimeout: time.Second})
	t.Cleanup(func() { c.Close() })
	s, err := redis.New(c)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// TestStoreFailure: a dead store is answered by the failure policy, never
// by a 429.
func TestStoreFailure(t *testing.T) {
	t.Run("closed", func(t *testing.T) {
		lim, err := ratelimit.New(deadStore(t), algorithms.GCRA(10, time.Second, 10))
		if err != nil {
			t.Fatal(err)
		}
		var hooked atomic.Int32
		hook := func(r *http.Request, err error) { hooked.Add(1) }
		srv := serve(t, []httplimit.Rule{{Limiter: lim}}, ok, httplimit.WithErrorHook(hook), httplimit.WithFailureRetryAfter(1500*time.Millisecond))
		resp := get(t, srv.Client(), srv.URL)
		p := parseProblem(t, resp)
		if resp.status != http.StatusServiceUnavailable || resp.header.Get("Retry-After") != "2" || p.RetryAfter != 2 {
			t.Errorf("dead store, fail closed: %d with Retry-After %q (%+v), want 503 with 2", resp.status, resp.header.Get("Retry-After"), p)
		}
		if hooked.Load() != 1 {
			t.Errorf("error hook called %d times, want 1", hooked.Load())
		}
	})
	t.Run("open", func(t *testing.T) {
		lim, err := ratelimit.New(deadStore(t), algorithms.GCRA(10, time.Second, 10), ratelimit.WithFailurePolicy(ratelimit.FailOpen))
		if err != nil {
			t.Fatal(err)
		}
		var hookErr atomic.Value
		hook := func(r *http.Request, err error) { hookErr.Store(err) }
		srv := serve(t, []httplimit.Rule{{Limiter: lim}}, ok, httplimit.WithErrorHook(hook))
		resp := get(t, srv.Client(), srv.URL)
		if resp.status != http.StatusOK || resp.body != "ok\n" {
			t.Errorf("dead store, fail open: %d %q, want 200 ok", resp.status, resp.body)
		}
		var opErr *net.OpError
		if err, _ := hookErr.Load().(error); !errors.As(err, &opErr) {
			t.Errorf("error hook got %v, want the store's connection error", err)
		}
		if v := resp.header.Get("RateLimit"); v != "" {
			t.Errorf("fail-open answer states RateLimit %q from a store it could not read", v)
		}
	})
}

// TestStoreFailureFallback: while the store is dead, the limiter's local
// fallback decides, and its decisions are answered as decisions: 200, then
// 429 with the fields, never 503.
func TestStoreFailureFallback(t *testing.T) {
	lim, err := ratelimit.New(deadStore(t), algorithms.SlidingLog(2, time.Hour),
		ratelimit.WithFallback(memory.MustNew(), 1))
	if err != nil {
		t.Fatal(err)
	}
	var hooked atomic.Int32
	srv := serve(t, []httplimit.Rule{{Limiter: lim, Name: "api"}}, ok,
		httplimit.WithErrorHook(func(*http.Request, error) { hooked.Add(1) }))
	if got := statuses(t, srv, 3); got != "[200 200 429]" {
		t.Errorf("three requests on a dead store with a fallback = %s, want [200 200 429]", got)
	}
	resp := get(t, srv.Client(), srv.URL)
	if rl := parseField(t, resp.header, "RateLimit"); rl[0].name != "api" || rl[0].params["r"] != 0 {
		t.Errorf("fallback denial: RateLimit %+v, want \"api\";r=0", rl)
	}
	if ra := resp.header.Get("Retry-After"); ra == "" || ra == "0" || ra == "5" {
		t.Errorf("fallback denial: Retry-After %q, want the decision's wait (about an hour)", ra)
	}
	if hooked.Load() != 4 {
		t.Errorf("error hook called %d times, want 4 (every request met the dead store)", hooked.Load())
	}
}

// TestRedisStore runs the middleware on a real Redis server.
func TestRedisStore(t *testing.T) {
	lim := redisLimiter(t, algorithms.SlidingLog(2, time.Minute))
	srv := serve(t, []httplimit.Rule{{Limiter: lim}}, ok)
	if got := statuses(t, srv, 3); got != "[200 200 429]" {
		t.Errorf("three requests on Redis = %v, want [200 200 429]", got)
	}
}

// redisLimiter returns a limiter of alg on the test Redis server, under a
// name of its own.
func redisLimiter(t *testing.T, alg algorithms.Algorithm) *ratelimit.Limiter {
	t.Helper()
	c := goredis.NewClient(&goredis.Options{Addr: testserver.RedisAddr(t)})
	t.Cleanup(func() { c.Close() })
	s, err := redis.New(c)
	if err != nil {
		t.Fatal(err)
	}
	name := fmt.Sprintf("httplimit-test-%d", time.Now().UnixNano())
	lim, err := ratelimit.New(s, alg, ratelimit.WithName(name))
	if err != nil {
		t.Fatal(err)
	}
	return lim
}

// TestSeveralLimiters: every rule is consulted; the headers describe the
// most restrictive one.
func TestSeveralLimiters(t *testing.T) {
	c := clock.NewFake(epoch)
	perIP := newLimiter(t, algorithms.FixedWindow(5, time.Minute), ratelimit.WithClock(c), ratelimit.WithName("ip"))
	perUser := newLimiter(t, algorithms.GCRA(2, time.Minute, 2), ratelimit.WithClock(c), ratelimit.WithName("user"))
	srv := serve(t, []httplimit.Rule{
		{Limiter: perIP},
		{Limiter: perUser, Key: httplimit.Header("X-User"), Match: func(r *http.Request) bool { return r.Header.Get("X-User") != "" }},
	}, ok)

	// With a user: both rules apply; the user's is the tighter.
	resp := get(t, srv.Client(), srv.URL, "X-User", "ann")
	pol := parseField(t, resp.header, "RateLimit-Policy")
	if len(pol) != 2 || pol[0].name != "ip" || pol[1].name != "user" {
		t.Errorf("RateLimit-Policy = %+v, want ip and user", pol)
	}
	rl := parseField(t, resp.header, "RateLimit")
	if len(rl) != 1 || rl[0].name != "user" || rl[0].params["r"] != 1 {
		t.Errorf("RateLimit = %+v, want \"user\";r=1 (the most restrictive)", rl)
	}
	get(t, srv.Client(), srv.URL, "X-User", "ann")
	resp = get(t, srv.Client(), srv.URL, "X-User", "ann")
	if rl := parseField(t, resp.header, "RateLimit"); resp.status != http.StatusTooManyRequests || rl[0].name != "user" {
		t.Errorf("third request for ann = %d %+v, want 429 by \"user\"", resp.status, rl)
	}
	// Without a user only the IP rule applies (it has counted 3 so far).
	resp = get(t, srv.Client(), srv.URL)
	pol = parseField(t, resp.header, "RateLimit-Policy")
	rl = parseField(t, resp.header, "RateLimit")
	if resp.status != http.StatusOK || len(pol) != 1 || pol[0].name != "ip" || rl[0].name != "ip" || rl[0].params["r"] != 1 {
		t.Errorf("anonymous request = %d, policy %+v, ratelimit %+v; want 200 by \"ip\" with r=1", resp.status, pol, rl)
	}
	// Another user still has a quota, but the IP has none left.
	get(t, srv.Client(), srv.URL, "X-User", "bob")
	resp = get(t, srv.Client(), srv.URL, "X-User", "bob")
	if rl := parseField(t, resp.header, "RateLimit"); resp.status != http.StatusTooManyRequests || rl[0].name != "ip" {
		t.Errorf("bob after the IP's quota = %d %+v, want 429 by \"ip\"", resp.status, rl)
	}
}

// TestConcurrency: many clients at once on one key; exactly the limit is
// admitted.
func TestConcurrency(t *testing.T) {
	const limit, clients, each = 20, 16, 5
	lim := newLimiter(t, algorithms.SlidingLog(limit, time.Hour))
	srv := serve(t, []httplimit.Rule{{Limiter: lim}}, ok)
	var admitted, denied atomic.Int32
	var wg sync.WaitGroup
	for range clients {
		wg.Go(func() {
			for range each {
				resp, err := srv.Client().Get(srv.URL)
				if err != nil {
					t.Error(err)
					return
				}
				io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
				switch resp.StatusCode {
				case http.StatusOK:
					admitted.Add(1)
				case http.StatusTooManyRequests:
					denied.Add(1)
				}
			}
		})
	}
	wg.Wait()
	if admitted.Load() != limit || denied.Load() != clients*each-limit {
		t.Errorf("%d concurrent requests: %d admitted, %d denied; want %d and %d",
			clients*each, admitted.Load(), denied.Load(), limit, clients*each-limit)
	}
}

// TestLeakyBucketDelay: an admitted request waits its turn before the
// handler runs, unless WithoutDelay.
func TestLeakyBucketDelay(t *testing.T) {
	type arrivalKey struct{}
	for _, wait := range []bool{true, false} {
		lim := newLimiter(t, algorithms.LeakyBucket(5, time.Second, 3)) // one request every 200ms
		var opts []httplimit.Option
		if !wait {
			opts = append(opts, httplimit.WithoutDelay())
		}
		mw, err := httplimit.New([]httplimit.Rule{{Limiter: lim}}, opts...)
		if err != nil {
			t.Fatal(err)
		}
		// The handler measures how long the middleware held the request.
		var mu sync.Mutex
		var held []time.Duration
		inner := mw.Handler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			mu.Lock()
			held = append(held, time.Since(r.Context().Value(arrivalKey{}).(time.Time)))
			mu.Unlock()
		}))
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			inner.ServeHTTP(w, r.WithContext(context.WithValue(r.Context(), arrivalKey{}, time.Now())))
		}))
		for range 2 {
			if resp := get(t, srv.Client(), srv.URL); resp.status != http.StatusOK {
				t.Fatalf("status %d, want 200", resp.status)
			}
		}
		srv.Close()
		// The second request waits for the first's interval, less the
		// moment between them.
		if second := held[1]; wait != (second >= 100*time.Millisecond) {
			t.Errorf("wait=%v: the middleware held the second queued request %v (one interval is 200ms)", wait, second)
		}
	}
}

// TestMatch: a rule per method.
func TestMatch(t *testing.T) {
	lim := newLimiter(t, algorithms.FixedWindow(1, time.Hour))
	srv := serve(t, []httplimit.Rule{{Limiter: lim, Match: func(r *http.Request) bool { return r.Method == http.MethodPost }}}, ok)
	for range 3 {
		if resp := get(t, srv.Client(), srv.URL); resp.status != http.StatusOK || resp.header.Get("RateLimit") != "" {
			t.Fatalf("GET, which no rule matches: %d with RateLimit %q, want 200 and no field", resp.status, resp.header.Get("RateLimit"))
		}
	}
	var got []int
	for range 2 {
		resp, err := srv.Client().Post(srv.URL, "text/plain", nil)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		got = append(got, resp.StatusCode)
	}
	if fmt.Sprint(got) != "[200 429]" {
		t.Errorf("two POSTs = %v, want [200 429]", got)
	}
}

// TestCost: a rule's cost function; an out-of-range cost is a 500 and
// reaches the hook.
func TestCost(t *testing.T) {
	lim := newLimiter(t, algorithms.FixedWindow(10, time.Hour))
	var hooked atomic.Int32
	srv := serve(t, []httplimit.Rule{{Limiter: lim, Cost: func(r *http.Request) int {
		n, _ := strconv.Atoi(r.URL.Query().Get("cost"))
		return n
	}}}, ok, httplimit.WithErrorHook(func(*http.Request, error) { hooked.Add(1) }))
	if rl := parseField(t, get(t, srv.Client(), srv.URL+"?cost=4").header, "RateLimit"); rl[0].params["r"] != 6 {
		t.Errorf("after cost 4 of 10: %+v, want r=6", rl)
	}
	resp := get(t, srv.Client(), srv.URL+"?cost=11")
	parseProblem(t, resp)
	if resp.status != http.StatusInternalServerError || hooked.Load() != 1 {
		t.Errorf("cost 11 of 10 = %d (hook called %d times), want 500 and one call", resp.status, hooked.Load())
	}
}

// TestKeyErrors: a request without a usable key gets the key-error answer.
func TestKeyErrors(t *testing.T) {
	lim := newLimiter(t, algorithms.FixedWindow(10, time.Hour))
	var hooked atomic.Int32
	hook := httplimit.WithErrorHook(func(_ *http.Request, err error) {
		if errors.Is(err, httplimit.ErrNoKey) || errors.Is(err, ratelimit.ErrInvalidKey) {
			hooked.Add(1)
		}
	})
	srv := serve(t, []httplimit.Rule{{Limiter: lim, Key: httplimit.Header("X-Api-Key")}}, ok, hook)
	resp := get(t, srv.Client(), srv.URL)
	parseProblem(t, resp)
	if resp.status != http.StatusBadRequest {
		t.Errorf("no key header: %d, want 400", resp.status)
	}
	resp = get(t, srv.Client(), srv.URL, "X-Api-Key", strings.Repeat("k", store.MaxKeyLen+1))
	if resp.status != http.StatusBadRequest {
		t.Errorf("oversized key: %d, want 400", resp.status)
	}
	if resp := get(t, srv.Client(), srv.URL, "X-Api-Key", "k1"); resp.status != http.StatusOK {
		t.Errorf("with a key: %d, want 200", resp.status)
	}
	if hooked.Load() != 2 {
		t.Errorf("hook saw %d key errors, want 2", hooked.Load())
	}

	// Replaced: let such requests through.
	srv = serve(t, []httplimit.Rule{{Limiter: lim, Key: httplimit.Header("X-Api-Key")}}, ok, httplimit.WithKeyErrorHandler(ok))
	if resp := get(t, srv.Client(), srv.URL); resp.status != http.StatusOK {
		t.Errorf("key error handler = ok: %d, want 200", resp.status)
	}
}

// TestContextKey keys by a value an authentication middleware stored.
func TestContextKey(t *testing.T) {
	type userKey struct{}
	lim := newLimiter(t, algorithms.FixedWindow(1, time.Hour))
	mw, err := httplimit.New([]httplimit.Rule{{Limiter: lim, Key: httplimit.ContextValue(userKey{})}})
	if err != nil {
		t.Fatal(err)
	}
	auth := func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if u := r.Header.Get("X-User"); u != "" {
				r = r.WithContext(context.WithValue(r.Context(), userKey{}, u))
			}
			next.ServeHTTP(w, r)
		})
	}
	srv := httptest.NewServer(auth(mw.Handler(ok)))
	defer srv.Close()
	got := []int{
		get(t, srv.Client(), srv.URL, "X-User", "ann").status,
		get(t, srv.Client(), srv.URL, "X-User", "ann").status,
		get(t, srv.Client(), srv.URL, "X-User", "bob").status,
		get(t, srv.Client(), srv.URL).status,
	}
	if fmt.Sprint(got) != "[200 429 200 400]" {
		t.Errorf("ann, ann, bob, nobody = %v, want [200 429 200 400]", got)
	}
}

func TestNewErrors(t *testing.T) {
	lim := newLimiter(t, algorithms.GCRA(1, time.Second, 1))
	tests := []struct {
		rules []httplimit.Rule
		opts  []httplimit.Option
		want  string
	}{
		{nil, nil, "no rules"},
		{[]httplimit.Rule{{}}, nil, "rule 0 has no limiter"},
		{[]httplimit.Rule{{Limiter: lim}, {Limiter: lim}}, nil, `two rules named "gcra"`},
		{[]httplimit.Rule{{Limiter: lim, Name: "tab\there"}}, nil, "printable ASCII"},
		{[]httplimit.Rule{{Limiter: lim}}, []httplimit.Option{httplimit.WithFailureRetryAfter(0)}, "must be positive"},
		{[]httplimit.Rule{{Limiter: lim}}, []httplimit.Option{httplimit.WithDenyHandler(nil)}, "nil deny handler"},
	}
	for _, tt := range tests {
		_, err := httplimit.New(tt.rules, tt.opts...)
		if !errors.Is(err, httplimit.ErrInvalidConfig) || !strings.Contains(fmt.Sprint(err), tt.want) {
			t.Errorf("New(%v) = %v, want ErrInvalidConfig saying %q", tt.rules, err, tt.want)
		}
	}
}

package httplimit_test

import (
	"fmt"
	"io"
	"log"
	"net/http"
	"net/http/httptest"
	"time"

	"github.com/ratelimitkit/ratelimit"
	"github.com/ratelimitkit/ratelimit/algorithms"
	"github.com/ratelimitkit/ratelimit/clock"
	"github.com/ratelimitkit/ratelimit/httplimit"
	"github.com/ratelimitkit/ratelimit/store/memory"
)

func Example() {
	// A fake clock keeps the output the same on every run; leave it out
	// in a real service.
	c := clock.NewFake(time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC))
	lim, err := ratelimit.New(memory.MustNew(), algorithms.FixedWindow(2, time.Minute),
		ratelimit.WithName("api"), ratelimit.WithClock(c))
	if err != nil {
		log.Fatal(err)
	}
	mw, err := httplimit.New([]httplimit.Rule{{Limiter: lim}})
	if err != nil {
		log.Fatal(err)
	}
	hello := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "hello\n") })
	srv := httptest.NewServer(mw.Handler(hello))
	defer srv.Close()

	for range 3 {
		resp, err := http.Get(srv.URL)
		if err != nil {
			log.Fatal(err)
		}
		resp.Body.Close()
		fmt.Printf("%s | %s | %s | Retry-After: %q\n", resp.Status,
			resp.Header.Get("RateLimit-Policy"), resp.Header.Get("RateLimit"), resp.Header.Get("Retry-After"))
	}
	// Output:
	// 200 OK | "api";q=2;w=60 | "api";r=1;t=60 | Retry-After: ""
	// 200 OK | "api";q=2;w=60 | "api";r=0;t=60 | Retry-After: ""
	// 429 Too Many Requests | "api";q=2;w=60 | "api";r=0;t=60 | Retry-After: "60"
}

func ExampleClientIP() {
	// Behind a load balancer in 10.0.0.0/8: believe what it appends to
	// X-Forwarded-For, and nothing the client wrote before it.
	key, err := httplimit.ClientIP(httplimit.TrustProxies("10.0.0.0/8"))
	if err != nil {
		log.Fatal(err)
	}
	r := httptest.NewRequest(http.MethodGet, "/", nil)
	r.RemoteAddr = "10.1.2.3:51234"
	r.Header.Set("X-Forwarded-For", "6.6.6.6, 2001:db8:1:2::77, 10.9.8.7")
	fmt.Println(key(r))
	// Output: 2001:db8:1:2::/64 <nil>
}

// A deny handler of your own: the headers are set before it runs, and
// ResultFrom says which rule refused.
func ExampleWithDenyHandler() {
	lim, err := ratelimit.New(memory.MustNew(), algorithms.SlidingLog(1, time.Hour), ratelimit.WithName("uploads"))
	if err != nil {
		log.Fatal(err)
	}
	deny := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		res, _ := httplimit.ResultFrom(r.Context())
		w.WriteHeader(http.StatusTooManyRequests)
		fmt.Fprintf(w, "%s: no more this hour (Retry-After %s)\n", res.Rule, w.Header().Get("Retry-After"))
	})
	mw, err := httplimit.New([]httplimit.Rule{{Limiter: lim}}, httplimit.WithDenyHandler(deny))
	if err != nil {
		log.Fatal(err)
	}
	srv := httptest.NewServer(mw.Handler(http.NotFoundHandler()))
	defer srv.Close()
	for range 2 {
		resp, err := http.Get(srv.URL)
		if err != nil {
			log.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		fmt.Printf("%d %s", resp.StatusCode, body)
	}
	// Output:
	// 404 404 page not found
	// 429 uploads: no more this hour (Retry-After 3600)
}

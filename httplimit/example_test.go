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

package httplimit_test

import (
	"net/http"
	"testing"
	"time"

	"github.com/ratelimitkit/ratelimit"
	"github.com/ratelimitkit/ratelimit/algorithms"
	"github.com/ratelimitkit/ratelimit/clock"
	"github.com/ratelimitkit/ratelimit/httplimit"
)

// TestCompositeFields: a rule whose limiter is a composite states one
// policy per limit in RateLimit-Policy and one member per limit, with that
// limit's own figures, in RateLimit; a denial's Retry-After is the longest
// wait.
func TestCompositeFields(t *testing.T) {
	clk := clock.NewFake(epoch)
	lim := newLimiter(t, algorithms.All(algorithms.GCRA(2, time.Second, 2), algorithms.FixedWindow(3, time.Minute)),
		ratelimit.WithClock(clk))
	srv := serve(t, []httplimit.Rule{{Name: "api", Limiter: lim}}, ok)
	c := srv.Client()
	const policy = `"api-gcra";q=2;w=1, "api-fixed_window";q=3;w=60`
	for i, want := range []struct {
		status     int
		rateLimit  string
		retryAfter string
	}{
		{http.StatusOK, `"api-gcra";r=1;t=1, "api-fixed_window";r=2;t=60`, ""},
		{http.StatusOK, `"api-gcra";r=0;t=1, "api-fixed_window";r=1;t=60`, ""},
		{http.StatusTooManyRequests, `"api-gcra";r=0;t=1, "api-fixed_window";r=1;t=60`, "1"},
	} {
		r := get(t, c, srv.URL)
		if r.status != want.status || r.header.Get("RateLimit-Policy") != policy ||
			r.header.Get("RateLimit") != want.rateLimit || r.header.Get("Retry-After") != want.retryAfter {
			t.Errorf("request %d: %d, RateLimit-Policy %q, RateLimit %q, Retry-After %q; want %d, %q, %q, %q",
				i+1, r.status, r.header.Get("RateLimit-Policy"), r.header.Get("RateLimit"), r.header.Get("Retry-After"),
				want.status, policy, want.rateLimit, want.retryAfter)
		}
	}
	clk.Advance(time.Second)
	r := get(t, c, srv.URL)
	// The window's last unit: the denial above consumed none of it.
	if r.status != http.StatusOK || r.header.Get("RateLimit") != `"api-gcra";r=1;t=1, "api-fixed_window";r=0;t=59` {
		t.Errorf("after a second: %d, RateLimit %q; want 200 with the window's last unit spent", r.status, r.header.Get("RateLimit"))
	}
	r = get(t, c, srv.URL)
	if r.status != http.StatusTooManyRequests || r.header.Get("Retry-After") != "59" {
		t.Errorf("with the window spent: %d, Retry-After %q; want 429, 59", r.status, r.header.Get("Retry-After"))
	}
}

// TestCompositeSameAlgorithm: two limits of one algorithm are told apart
// by their part names, which do not change when parts are reordered.
func TestCompositeSameAlgorithm(t *testing.T) {
	lim := newLimiter(t, algorithms.All(algorithms.FixedWindow(10, time.Second), algorithms.FixedWindow(100, time.Hour)))
	srv := serve(t, []httplimit.Rule{{Name: "api", Limiter: lim}}, ok)
	r := get(t, srv.Client(), srv.URL)
	if got, want := r.header.Get("RateLimit-Policy"), `"api-fixed_window-1s";q=10;w=1, "api-fixed_window-1h";q=100;w=3600`; got != want {
		t.Errorf("RateLimit-Policy %q, want %q", got, want)
	}
}

// TestCompositeTier: a tier of a composite limiter states each limit at the
// tier's numbers.
func TestCompositeTier(t *testing.T) {
	lim := newLimiter(t, algorithms.All(algorithms.GCRA(2, time.Second, 2), algorithms.FixedWindow(3, time.Minute)),
		ratelimit.WithClock(clock.NewFake(epoch)))
	pro, err := lim.Tier(algorithms.All(algorithms.GCRA(20, time.Second, 20), algorithms.FixedWindow(30, time.Minute)))
	if err != nil {
		t.Fatal(err)
	}
	srv := serve(t, []httplimit.Rule{{Name: "api", Limiter: lim, Tier: func(*http.Request) *ratelimit.Tier { return pro }}}, ok)
	r := get(t, srv.Client(), srv.URL)
	if got, want := r.header.Get("RateLimit-Policy"), `"api-gcra";q=20;w=1, "api-fixed_window";q=30;w=60`; got != want {
		t.Errorf("RateLimit-Policy %q, want %q", got, want)
	}
	if got, want := r.header.Get("RateLimit"), `"api-gcra";r=19;t=1, "api-fixed_window";r=29;t=60`; got != want {
		t.Errorf("RateLimit %q, want %q", got, want)
	}
}

package httplimit_test

import (
	"errors"
	"fmt"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/ratelimitkit/ratelimit"
	"github.com/ratelimitkit/ratelimit/algorithms"
	"github.com/ratelimitkit/ratelimit/httplimit"
)

// TestTiers: a rule whose numbers follow the caller's plan, on Redis,
// through a real client. The plan comes from a header here; in an
// application it comes from whatever authenticated the caller.
func TestTiers(t *testing.T) {
	lim := redisLimiter(t, algorithms.SlidingLog(3, time.Hour))
	pro, err := lim.Tier(algorithms.SlidingLog(10, time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	other := newLimiter(t, algorithms.SlidingLog(10, time.Hour))
	foreign, err := other.Tier(algorithms.SlidingLog(20, time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	perIP := newLimiter(t, algorithms.FixedWindow(100, 24*time.Hour), ratelimit.WithName("ip"))
	var mu sync.Mutex
	var hooked []error
	srv := serve(t, []httplimit.Rule{
		{Limiter: perIP},
		{
			Limiter: lim, Name: "plan", Key: httplimit.Header("X-User"),
			Tier: func(r *http.Request) *ratelimit.Tier {
				switch r.Header.Get("X-Plan") {
				case "pro":
					return pro
				case "forged":
					return foreign
				}
				return nil // free: the limiter's own numbers
			},
		},
	}, ok, httplimit.WithLegacyHeaders(), httplimit.WithErrorHook(func(_ *http.Request, err error) {
		mu.Lock()
		hooked = append(hooked, err)
		mu.Unlock()
	}))

	check := func(step string, plan string, status int, q, w, r int64) {
		t.Helper()
		resp := get(t, srv.Client(), srv.URL, "X-User", "ann", "X-Plan", plan)
		if resp.status != status {
			t.Fatalf("%s: status %d, want %d (%s)", step, resp.status, status, resp.body)
		}
		pol := parseField(t, resp.header, "RateLimit-Policy")
		if len(pol) != 2 || pol[0].name != "ip" || pol[1].name != "plan" || pol[1].params["q"] != q || pol[1].params["w"] != w {
			t.Errorf("%s: RateLimit-Policy = %+v, want ip and \"plan\";q=%d;w=%d", step, pol, q, w)
		}
		rl := parseField(t, resp.header, "RateLimit")
		if len(rl) != 1 || rl[0].name != "plan" || rl[0].params["r"] != r {
			t.Errorf("%s: RateLimit = %+v, want \"plan\";r=%d", step, rl, r)
		}
		if got := resp.header.Get("X-RateLimit-Limit"); got != fmt.Sprint(q) {
			t.Errorf("%s: X-RateLimit-Limit = %q, want %d", step, got, q)
		}
	}
	check("free 1", "free", http.StatusOK, 3, 3600, 2)
	check("free 2", "free", http.StatusOK, 3, 3600, 1)
	check("free 3", "free", http.StatusOK, 3, 3600, 0)
	check("free 4", "free", http.StatusTooManyRequests, 3, 3600, 0)
	// Upgraded: the three requests spent on the free plan still count.
	check("pro 1", "pro", http.StatusOK, 10, 3600, 6)
	check("pro 2", "pro", http.StatusOK, 10, 3600, 5)
	// Downgraded again: five spent, three allowed.
	check("free again", "free", http.StatusTooManyRequests, 3, 3600, 0)

	resp := get(t, srv.Client(), srv.URL, "X-User", "ann", "X-Plan", "forged")
	mu.Lock()
	defer mu.Unlock()
	if resp.status != http.StatusInternalServerError || len(hooked) != 1 || !errors.Is(hooked[0], httplimit.ErrInvalidConfig) {
		t.Errorf("a tier of another limiter: status %d, hook saw %v; want 500 and an error wrapping ErrInvalidConfig", resp.status, hooked)
	}
}

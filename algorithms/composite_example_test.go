package algorithms_test

import (
	"context"
	"fmt"
	"time"

	"github.com/ratelimitkit/ratelimit"
	"github.com/ratelimitkit/ratelimit/algorithms"
	"github.com/ratelimitkit/ratelimit/clock"
	"github.com/ratelimitkit/ratelimit/store/memory"
)

// Two limits on one key, decided together: 2 a second (bursts of 2) and 3 a
// minute. A request is admitted only when both admit, and a denied one
// consumes from neither; Limits holds each limit's own figures.
func ExampleAll() {
	clk := clock.NewFake(time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC))
	alg := algorithms.All(algorithms.GCRA(2, time.Second, 2), algorithms.FixedWindow(3, time.Minute))
	lim, err := ratelimit.New(memory.MustNew(), alg, ratelimit.WithClock(clk))
	if err != nil {
		panic(err)
	}
	ctx := context.Background()
	for _, wait := range []time.Duration{0, 0, 0, time.Second, 0} {
		clk.Advance(wait)
		d, err := lim.Allow(ctx, "alice")
		if err != nil {
			panic(err)
		}
		fmt.Printf("allowed=%-5v remaining=%d retry=%-4v per second: %d left, per minute: %d left\n",
			d.Allowed, d.Remaining, d.RetryAfter, d.Limits[0].Remaining, d.Limits[1].Remaining)
	}
	// Output:
	// allowed=true  remaining=1 retry=0s   per second: 1 left, per minute: 2 left
	// allowed=true  remaining=0 retry=0s   per second: 0 left, per minute: 1 left
	// allowed=false remaining=0 retry=500ms per second: 0 left, per minute: 1 left
	// allowed=true  remaining=0 retry=0s   per second: 1 left, per minute: 0 left
	// allowed=false remaining=0 retry=59s  per second: 1 left, per minute: 0 left
}

// A plan gains a monthly limit. Under the limiter's name the composite's
// namespace is "<name>:all" whatever its parts, and each part's state is
// kept under the part's name, so the customer's counts carry over: the
// per-second and per-day limits keep theirs, the monthly one starts
// fresh, and the order the parts are listed in does not matter.
func ExampleAll_addAPart() {
	clk := clock.NewFake(time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC))
	st := memory.MustNew()
	perSecond, daily := algorithms.GCRA(10, time.Second, 10), algorithms.FixedWindow(1000, 24*time.Hour)
	before, err := ratelimit.New(st, algorithms.All(perSecond, daily), ratelimit.WithName("plan"), ratelimit.WithClock(clk))
	if err != nil {
		panic(err)
	}
	ctx := context.Background()
	for range 4 {
		before.Allow(ctx, "alice")
	}
	monthly := algorithms.FixedWindow(20000, 30*24*time.Hour)
	after, err := ratelimit.New(st, algorithms.All(monthly, perSecond, daily), ratelimit.WithName("plan"), ratelimit.WithClock(clk))
	if err != nil {
		panic(err)
	}
	d, err := after.Allow(ctx, "alice")
	if err != nil {
		panic(err)
	}
	fmt.Println(before.Namespace(), after.Namespace(), after.Algorithm().(algorithms.Composite).PartNames())
	fmt.Printf("monthly: %d left, per second: %d left, daily: %d left\n",
		d.Limits[0].Remaining, d.Limits[1].Remaining, d.Limits[2].Remaining)
	// Output:
	// plan:all plan:all [fixed_window-30d gcra-1s fixed_window-1d]
	// monthly: 19999 left, per second: 5 left, daily: 995 left
}

package ratelimit_test

import (
	"context"
	"fmt"
	"time"

	"github.com/ratelimitkit/ratelimit"
	"github.com/ratelimitkit/ratelimit/algorithms"
	"github.com/ratelimitkit/ratelimit/clock"
	"github.com/ratelimitkit/ratelimit/store/memory"
)

// A limiter of 3 requests per second per user, with a burst of 3, on the
// in-process store. The fake clock makes the output repeatable; in
// production leave WithClock out.
func Example() {
	fake := clock.NewFake(time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC))
	lim, err := ratelimit.New(memory.MustNew(), algorithms.GCRA(3, time.Second, 3),
		ratelimit.WithName("api"), ratelimit.WithClock(fake))
	if err != nil {
		panic(err)
	}
	ctx := context.Background()
	for i := 0; i < 4; i++ {
		d, err := lim.Allow(ctx, "user-42")
		if err != nil {
			panic(err)
		}
		fmt.Printf("allowed=%v remaining=%d retry-after=%v\n", d.Allowed, d.Remaining, d.RetryAfter)
	}
	fake.Advance(334 * time.Millisecond)
	d, _ := lim.Allow(ctx, "user-42")
	fmt.Printf("after 334ms: allowed=%v\n", d.Allowed)
	// Output:
	// allowed=true remaining=2 retry-after=0s
	// allowed=true remaining=1 retry-after=0s
	// allowed=true remaining=0 retry-after=0s
	// allowed=false remaining=0 retry-after=333.334ms
	// after 334ms: allowed=true
}

// AllowN takes a cost: here an upload of 4 units against a budget of 10 per
// minute.
func ExampleLimiter_AllowN() {
	fake := clock.NewFake(time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC))
	lim, _ := ratelimit.New(memory.MustNew(), algorithms.SlidingLog(10, time.Minute), ratelimit.WithClock(fake))
	for _, cost := range []int{4, 4, 4} {
		d, _ := lim.AllowN(context.Background(), "tenant-7", cost)
		fmt.Printf("cost %d: allowed=%v remaining=%d\n", cost, d.Allowed, d.Remaining)
	}
	// Output:
	// cost 4: allowed=true remaining=6
	// cost 4: allowed=true remaining=2
	// cost 4: allowed=false remaining=2
}

// Peek reads a key's standing without consuming anything, for example to
// fill in rate-limit headers on a response that costs nothing.
func ExampleLimiter_Peek() {
	fake := clock.NewFake(time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC))
	lim, _ := ratelimit.New(memory.MustNew(), algorithms.FixedWindow(100, time.Hour), ratelimit.WithClock(fake))
	ctx := context.Background()
	lim.AllowN(ctx, "ip:192.0.2.1", 30)
	d, _ := lim.Peek(ctx, "ip:192.0.2.1")
	fmt.Printf("limit=%d remaining=%d reset-after=%v\n", d.Limit, d.Remaining, d.ResetAfter)
	// Output:
	// limit=100 remaining=70 reset-after=1h0m0s
}

// The leaky bucket shapes traffic: it admits a burst into its queue and
// tells each request how long to wait for its turn. Wait sleeps that delay.
func ExampleLimiter_Wait() {
	fake := clock.NewFake(time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC))
	lim, _ := ratelimit.New(memory.MustNew(), algorithms.LeakyBucket(2, time.Second, 5), ratelimit.WithClock(fake))
	ctx := context.Background()
	for i := 0; i < 3; i++ {
		d, _ := lim.Allow(ctx, "worker")
		fmt.Printf("request %d: allowed=%v delay=%v\n", i, d.Allowed, d.Delay)
	}
	// Output:
	// request 0: allowed=true delay=0s
	// request 1: allowed=true delay=500ms
	// request 2: allowed=true delay=1s
}

// Reserve takes the cost now and says when to act; Cancel gives it back
// when the caller will not act after all.
func ExampleLimiter_Reserve() {
	ctx := context.Background()
	store, _ := memory.New()
	clk := clock.NewFake(time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC))
	// 10 a second, bursts of 2: one unit every 100ms.
	lim, _ := ratelimit.New(store, algorithms.GCRA(10, time.Second, 2), ratelimit.WithClock(clk))

	lim.AllowN(ctx, "user:42", 2) // the burst is spent
	r, _ := lim.Reserve(ctx, "user:42", 2, time.Second)
	fmt.Println("ok:", r.OK(), "act in:", r.Delay())
	clk.Advance(50 * time.Millisecond)
	fmt.Println("50ms later, act in:", r.Delay())

	// Not within 100ms: not admitted, nothing taken.
	late, _ := lim.Reserve(ctx, "user:42", 1, 100*time.Millisecond)
	fmt.Println("second ok:", late.OK())

	// The caller will not act: give the two units back.
	if err := r.Cancel(ctx); err != nil {
		fmt.Println(err)
	}
	again, _ := lim.Reserve(ctx, "user:42", 1, 100*time.Millisecond)
	fmt.Println("after cancel, ok:", again.OK(), "act in:", again.Delay())
	// Output:
	// ok: true act in: 200ms
	// 50ms later, act in: 150ms
	// second ok: false
	// after cancel, ok: true act in: 50ms
}

package ratelimit_test

import (
	"context"
	"fmt"
	"time"

	"github.com/ratelimitkit/ratelimit"
	"github.com/ratelimitkit/ratelimit/algorithms"
	"github.com/ratelimitkit/ratelimit/clock"
	"github.com/ratelimitkit/ratelimit/store"
	"github.com/ratelimitkit/ratelimit/store/memory"
)

// A limiter that survives its store's outages: each store call gets 50ms
// at most, five failures in a row open the circuit breaker for ten seconds,
// and meanwhile a local limiter decides with a third of the limit (three
// replicas share it). Decision.Source says who decided. Here the store
// works, so it decides.
func ExampleWithFallback() {
	var store store.Store = memory.MustNew() // in production: Redis, PostgreSQL, ...
	lim, err := ratelimit.New(store, algorithms.GCRA(300, time.Minute, 30),
		ratelimit.WithName("api"),
		ratelimit.WithStoreTimeout(50*time.Millisecond),
		ratelimit.WithCircuitBreaker(5, 10*time.Second),
		ratelimit.WithFallback(memory.MustNew(memory.WithMaxKeys(100_000)), 3))
	if err != nil {
		panic(err)
	}
	d, err := lim.Allow(context.Background(), "user-42")
	fmt.Println(d.Allowed, d.Source, err)
	// Output: true store <nil>
}

// Shadow mode rolls out a new limit without enforcing it: the third request
// is over the limit, and is admitted anyway, marked as shadowed.
func ExampleWithShadow() {
	fake := clock.NewFake(time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC))
	lim, _ := ratelimit.New(memory.MustNew(), algorithms.FixedWindow(2, time.Minute),
		ratelimit.WithClock(fake), ratelimit.WithShadow())
	for range 3 {
		d, _ := lim.Allow(context.Background(), "user-42")
		fmt.Printf("allowed=%v shadowed=%v retry-after=%v\n", d.Allowed, d.Shadowed, d.RetryAfter)
	}
	// Output:
	// allowed=true shadowed=false retry-after=0s
	// allowed=true shadowed=false retry-after=0s
	// allowed=true shadowed=true retry-after=1m0s
}

// The deny cache answers for a key the store has denied, until the store's
// retry time, without asking the store again.
func ExampleWithDenyCache() {
	fake := clock.NewFake(time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC))
	lim, _ := ratelimit.New(memory.MustNew(), algorithms.GCRA(1, time.Second, 1),
		ratelimit.WithClock(fake), ratelimit.WithDenyCache(10_000))
	ctx := context.Background()
	for range 3 {
		d, _ := lim.Allow(ctx, "attacker")
		fmt.Printf("allowed=%v from %v\n", d.Allowed, d.Source)
	}
	fake.Advance(time.Second)
	d, _ := lim.Allow(ctx, "attacker")
	fmt.Printf("a second later: allowed=%v from %v\n", d.Allowed, d.Source)
	// Output:
	// allowed=true from store
	// allowed=false from store
	// allowed=false from deny_cache
	// a second later: allowed=true from store
}

// counter is an Observer that counts decisions by limiter, answer and
// source.
type counter map[string]int

func (c counter) ObserveDecision(_ context.Context, e ratelimit.Event) {
	c[fmt.Sprintf("%s allowed=%v from %v", e.Limiter, e.Allowed, e.Decision.Source)]++
}

// An observer sees every decision. The otellimit module turns them into
// OpenTelemetry metrics.
func ExampleWithObserver() {
	count := counter{}
	obs := count
	fake := clock.NewFake(time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC))
	lim, _ := ratelimit.New(memory.MustNew(), algorithms.FixedWindow(2, time.Minute),
		ratelimit.WithName("login"), ratelimit.WithClock(fake), ratelimit.WithObserver(obs))
	for range 3 {
		lim.Allow(context.Background(), "user-42")
	}
	fmt.Println(count)
	// Output: map[login allowed=false from store:1 login allowed=true from store:2]
}

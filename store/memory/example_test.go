package memory_test

import (
	"context"
	"fmt"
	"time"

	"github.com/ratelimitkit/ratelimit"
	"github.com/ratelimitkit/ratelimit/algorithms"
	"github.com/ratelimitkit/ratelimit/clock"
	"github.com/ratelimitkit/ratelimit/store/memory"
)

// The memory store is the default for one process: no server, no
// goroutines, bounded memory. Time is the limiter's, here a fake clock.
func ExampleNew() {
	store, err := memory.New(memory.WithMaxKeys(100_000))
	if err != nil {
		panic(err)
	}
	c := clock.NewFake(time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC))
	lim, err := ratelimit.New(store, algorithms.FixedWindow(2, time.Second), ratelimit.WithClock(c))
	if err != nil {
		panic(err)
	}
	ctx := context.Background()
	for range 3 {
		d, _ := lim.Allow(ctx, "user-42")
		fmt.Println(d.Allowed, d.Remaining, d.RetryAfter)
	}
	c.Advance(time.Second)
	d, _ := lim.Allow(ctx, "user-42")
	fmt.Println(d.Allowed, d.Remaining, d.RetryAfter)
	fmt.Println("keys held:", store.Len())
	// Output:
	// true 1 0s
	// true 0 0s
	// false 0 1s
	// true 1 0s
	// keys held: 1
}

// The cap is split between 64 shards, so it has a floor.
func ExampleWithMaxKeys() {
	_, err := memory.New(memory.WithMaxKeys(10))
	fmt.Println(err)
	// Output: ratelimit: invalid parameters: memory store max keys 10 below 64
}

// Sweep reclaims expired state at once, for a process whose traffic has
// stopped; otherwise new keys reclaim it as they arrive.
func ExampleStore_Sweep() {
	store := memory.MustNew()
	c := clock.NewFake(time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC))
	lim, _ := ratelimit.New(store, algorithms.GCRA(10, time.Second, 10), ratelimit.WithClock(c))
	for _, user := range []string{"ann", "bob", "cy"} {
		lim.Allow(context.Background(), user)
	}
	c.Advance(time.Minute)
	lim.Allow(context.Background(), "ann") // the store sees time pass
	fmt.Println("held:", store.Len(), "swept:", store.Sweep(), "held:", store.Len())
	// Output: held: 3 swept: 2 held: 1
}

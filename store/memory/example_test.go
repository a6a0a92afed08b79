package memory_test

import (
	"bytes"

	"context"
	"fmt"
	"time"

	"github.com/ratelimitkit/ratelimit"
	"github.com/ratelimitkit/ratelimit/algorithms"
	"github.com/ratelimitkit/ratelimit/clock"
	"github.com/ratelimitkit/ratelimit/store/memory"
)

// A memory store keeps its users' quotas across a restart: Snapshot at
// shutdown, Restore at start. A bytes.Buffer stands in for the file.
func ExampleStore_Snapshot() {
	ctx := context.Background()
	fake := clock.NewFake(time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC))
	alg := algorithms.FixedWindow(3, time.Minute)

	before := memory.MustNew()
	lim, _ := ratelimit.New(before, alg, ratelimit.WithName("api"), ratelimit.WithClock(fake))
	lim.Allow(ctx, "user-42")
	lim.Allow(ctx, "user-42")

	var file bytes.Buffer
	n, err := before.Snapshot(ctx, &file, fake.Now())
	fmt.Println("snapshot:", n, "keys", err)

	// The process restarts ten seconds later.
	fake.Advance(10 * time.Second)
	after := memory.MustNew()
	n, err = after.Restore(ctx, &file, fake.Now())
	fmt.Println("restored:", n, "keys", err)

	lim, _ = ratelimit.New(after, alg, ratelimit.WithName("api"), ratelimit.WithClock(fake))
	d, _ := lim.Allow(ctx, "user-42")
	fmt.Printf("allowed=%v remaining=%d\n", d.Allowed, d.Remaining)
	d, _ = lim.Allow(ctx, "user-42")
	fmt.Printf("allowed=%v remaining=%d\n", d.Allowed, d.Remaining)
	// Output:
	// snapshot: 1 keys <nil>
	// restored: 1 keys <nil>
	// allowed=true remaining=0
	// allowed=false remaining=0
}

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

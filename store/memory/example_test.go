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

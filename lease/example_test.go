package lease_test

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/ratelimitkit/ratelimit/lease"
	"github.com/ratelimitkit/ratelimit/store/memory"
)

func Example() {
	ctx := context.Background()
	locker, err := lease.New(memory.MustNew(), 30*time.Second, lease.WithName("chat-session"))
	if err != nil {
		panic(err)
	}

	first, err := locker.TryAcquire(ctx, "session-42")
	if err != nil {
		panic(err)
	}
	_, err = locker.TryAcquire(ctx, "session-42")
	fmt.Println("second worker:", errors.Is(err, lease.ErrHeld))

	if err := first.Release(ctx); err != nil {
		panic(err)
	}
	next, err := locker.TryAcquire(ctx, "session-42")
	if err != nil {
		panic(err)
	}
	fmt.Println("next fence is greater:", next.Fence() > first.Fence())
	fmt.Println("the old holder cannot extend:", errors.Is(first.Extend(ctx), lease.ErrLost))
	// Output:
	// second worker: true
	// next fence is greater: true
	// the old holder cannot extend: true
}

func ExampleLocker_Do() {
	locker, err := lease.New(memory.MustNew(), 30*time.Second, lease.WithName("chat-session"))
	if err != nil {
		panic(err)
	}
	err = locker.Do(context.Background(), "session-42", func(ctx context.Context, l *lease.Lease) error {
		// The lease is renewed while this runs; ctx ends before it could
		// run out. Pass l.Fence() to every write it protects.
		fmt.Println("processing session", l.Key())
		return nil
	})
	fmt.Println("done:", err)
	// Output:
	// processing session session-42
	// done: <nil>
}

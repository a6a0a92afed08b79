package ratelimit_test

import (
	"context"
	"fmt"
	"time"

	"github.com/ratelimitkit/ratelimit"
	"github.com/ratelimitkit/ratelimit/algorithms"
	"github.com/ratelimitkit/ratelimit/store/memory"
)

// A limiter with local quota takes shares of a key's budget from its store
// and decides from them in memory: here 100 decisions cost the store a
// handful of calls, and the limit of 100 a minute still holds.
func ExampleWithLocalQuota() {
	store := &countingStore{Store: memory.MustNew()}
	lim, err := ratelimit.New(store, algorithms.FixedWindow(100, time.Minute),
		ratelimit.WithLocalQuota(16, time.Second))
	if err != nil {
		fmt.Println(err)
		return
	}
	defer lim.Close(context.Background())
	admitted := 0
	for range 150 {
		if d, _ := lim.Allow(context.Background(), "user-1"); d.Allowed {
			admitted++
		}
	}
	fmt.Println("admitted:", admitted)
	fmt.Println("fewer store calls than decisions:", store.calls.Load() < 150)
	// Output:
	// admitted: 100
	// fewer store calls than decisions: true
}

// Under local quota a reservation with a max delay is booked by the store,
// as without it, and its Cancel gives the units back.
func ExampleWithLocalQuota_reservations() {
	ctx := context.Background()
	lim, err := ratelimit.New(memory.MustNew(), algorithms.FixedWindow(10, time.Minute),
		ratelimit.WithLocalQuota(4, time.Second))
	if err != nil {
		fmt.Println(err)
		return
	}
	defer lim.Close(ctx)
	r, err := lim.Reserve(ctx, "user-1", 3, time.Second)
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println("reserved:", r.OK())
	if err := r.Cancel(ctx); err != nil {
		fmt.Println(err)
		return
	}
	d, _ := lim.Peek(ctx, "user-1")
	fmt.Println("remaining after Cancel:", d.Remaining)
	// Output:
	// reserved: true
	// remaining after Cancel: 10
}

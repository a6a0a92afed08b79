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

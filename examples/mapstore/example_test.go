package mapstore_test

import (
	"context"
	"fmt"
	"time"

	"github.com/ratelimitkit/ratelimit"
	"github.com/ratelimitkit/ratelimit/algorithms"
	"github.com/ratelimitkit/ratelimit/examples/mapstore"
)

// A limiter on the store: three requests a minute per key.
func Example() {
	lim, err := ratelimit.New(mapstore.New(), algorithms.FixedWindow(3, time.Minute))
	if err != nil {
		panic(err)
	}
	for range 4 {
		d, err := lim.Allow(context.Background(), "user-1")
		if err != nil {
			panic(err)
		}
		fmt.Println(d.Allowed, d.Remaining)
	}
	// Output:
	// true 2
	// true 1
	// true 0
	// false 0
}

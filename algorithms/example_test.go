package algorithms_test

import (
	"fmt"
	"time"

	"github.com/ratelimitkit/ratelimit/algorithms"
)

// An algorithm is a pure state transition: (state, now, cost) → (next
// state, decision). A store only keeps the bytes between calls; here a
// variable does. nil is a key with no state. Times are microseconds since
// the epoch.
func ExampleGCRA() {
	alg := algorithms.GCRA(10, time.Second, 2) // 10 a second, bursts of 2
	var state []byte                           // no state: a new key
	for _, now := range []int64{0, 0, 0, 100_000} {
		step, err := alg.Decide(state, algorithms.Request{Now: now, Cost: 1})
		if err != nil {
			panic(err)
		}
		d := step.Decision
		fmt.Printf("t=%3dms allowed=%-5v remaining=%d retry after %dms; state kept %dms\n",
			now/1000, d.Allowed, d.Remaining, d.RetryAfter/1000, step.TTL/1000)
		if step.Next != nil { // nil: nothing to store (a denial changes nothing)
			state = step.Next
		}
	}
	// Output:
	// t=  0ms allowed=true  remaining=1 retry after 0ms; state kept 100ms
	// t=  0ms allowed=true  remaining=0 retry after 0ms; state kept 200ms
	// t=  0ms allowed=false remaining=0 retry after 100ms; state kept 0ms
	// t=100ms allowed=true  remaining=0 retry after 0ms; state kept 200ms
}

// A Peek decides without consuming: the step carries no next state.
func ExampleFixedWindow() {
	alg := algorithms.FixedWindow(3, time.Minute)
	step, _ := alg.Decide(nil, algorithms.Request{Now: 30_000_000, Cost: 2})
	peek, _ := alg.Decide(step.Next, algorithms.Request{Now: 30_000_000, Cost: 2, Peek: true})
	fmt.Println(peek.Decision.Allowed, peek.Decision.Remaining, peek.Decision.RetryAfter/1_000_000, peek.Next == nil)
	// Output: false 1 30 true
}

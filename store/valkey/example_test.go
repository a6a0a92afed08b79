package valkey_test

import (
	"context"
	"fmt"
	"time"

	vk "github.com/valkey-io/valkey-go"

	"github.com/ratelimitkit/ratelimit"
	"github.com/ratelimitkit/ratelimit/algorithms"
	"github.com/ratelimitkit/ratelimit/store"
	"github.com/ratelimitkit/ratelimit/store/valkey"
)

// Valkey and Redis stores name keys alike, so both can share a server and
// even one limiter's keys. Every key of a decision sits in one cluster hash
// slot: the limiter's namespace and the user's key are the hash tag, with
// braces in the key escaped.
func ExampleStateKey() {
	key := store.Key{Namespace: "login:sliding_log", ID: "{admin}"}
	fmt.Println(valkey.StateKey("rl", key))
	// Output: rl:{login:sliding_log:%7Badmin%7D}
}

// A store needs a client, and valkey-go's connects when it is made.
func ExampleNew() {
	_, err := valkey.New(nil)
	fmt.Println(err)
	// Output: valkey: nil client: ratelimit: invalid parameters
}

// A decision, with a server (go test skips examples without Output).
func Example() {
	ctx := context.Background()
	client, err := vk.NewClient(vk.ClientOption{InitAddress: []string{"localhost:6379"}})
	if err != nil {
		panic(err)
	}
	defer client.Close()
	store, err := valkey.New(client, valkey.WithPrefix("shop"))
	if err != nil {
		panic(err)
	}
	lim, err := ratelimit.New(store, algorithms.SlidingWindow(600, time.Minute), ratelimit.WithName("checkout"))
	if err != nil {
		panic(err)
	}
	if d, err := lim.Allow(ctx, "user-42"); err == nil && !d.Allowed {
		fmt.Println("retry after", d.RetryAfter)
	}
}

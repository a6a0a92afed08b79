package redis_test

import (
	"context"
	"errors"
	"fmt"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/ratelimitkit/ratelimit"
	"github.com/ratelimitkit/ratelimit/algorithms"
	"github.com/ratelimitkit/ratelimit/clock"
	"github.com/ratelimitkit/ratelimit/store"
	"github.com/ratelimitkit/ratelimit/store/redis"
)

// A store is built on any go-redis client. New sends nothing to the server
// (scripts load on first use), so this runs without one. By default the
// store decides by the server's clock, so a limiter on it takes no clock of
// its own: ratelimit.New refuses one rather than ignore it.
func ExampleNew() {
	client := goredis.NewClient(&goredis.Options{Addr: "localhost:6379"})
	defer client.Close()
	store, err := redis.New(client, redis.WithPrefix("shop"))
	if err != nil {
		panic(err)
	}
	fmt.Println("prefix:", store.Prefix(), "server clock:", store.ServerClock())

	alg := algorithms.GCRA(100, time.Minute, 20)
	_, err = ratelimit.New(store, alg, ratelimit.WithClock(clock.NewFake(time.Unix(0, 0))))
	fmt.Println("fake clock refused:", errors.Is(err, ratelimit.ErrInvalidParams))

	// Tests turn the server clock off to drive the scripts with a fake clock.
	testStore, _ := redis.New(client, redis.WithPrefix("test"), redis.WithServerClock(false))
	lim, err := ratelimit.New(testStore, alg, ratelimit.WithClock(clock.NewFake(time.Unix(0, 0))))
	fmt.Println("fake clock taken:", err == nil, lim != nil)

	_, err = redis.New(client, redis.WithPrefix("{shop}"))
	fmt.Println(err)
	// Output:
	// prefix: shop server clock: true
	// fake clock refused: true
	// fake clock taken: true true
	// ratelimit: invalid parameters: redis: key prefix "{shop}" must not contain braces
}

// Every key of a decision sits in one Redis Cluster hash slot: the limiter's
// namespace and the user's key are the hash tag, with braces in the key
// escaped.
func ExampleStateKey() {
	key := store.Key{Namespace: "api:gcra", ID: "user {42}"}
	fmt.Println(redis.StateKey("rl", key))
	// Output: rl:{api:gcra:user %7B42%7D}
}

// A decision, with a server (go test skips examples without Output). The
// client's options are the ones the package's doc recommends: calls end at
// their context's deadline, and a refused connection is reported at once.
func Example() {
	ctx := context.Background()
	client := goredis.NewClient(&goredis.Options{
		Addr:                  "localhost:6379",
		ContextTimeoutEnabled: true,
		DialerRetries:         1,
		MaxRetries:            -1,
	})
	store, err := redis.New(client)
	if err != nil {
		panic(err)
	}
	lim, err := ratelimit.New(store, algorithms.GCRA(100, time.Minute, 20), ratelimit.WithName("api"))
	if err != nil {
		panic(err)
	}
	d, err := lim.Allow(ctx, "user-42")
	if err != nil {
		fmt.Println("store failed; the failure policy decided:", d.Allowed, err)
	}
	if !d.Allowed {
		fmt.Println("retry after", d.RetryAfter)
	}
}

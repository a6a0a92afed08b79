package ratelimit_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/ratelimitkit/ratelimit"
	"github.com/ratelimitkit/ratelimit/algorithms"
	"github.com/ratelimitkit/ratelimit/store/memory"
)

// TestOptionAfterNew checks that an option called on a limiter New has
// built is refused and changes nothing: the path a decision takes is
// built once, in New. (An option used to be half-applied to a live
// limiter: WithShadow then let its denials through.)
func TestOptionAfterNew(t *testing.T) {
	ctx := context.Background()
	for name, opt := range map[string]ratelimit.Option{
		"WithShadow":         ratelimit.WithShadow(),
		"WithDenyCache":      ratelimit.WithDenyCache(10),
		"WithObserver":       ratelimit.WithObserver(observerFunc(func(context.Context, ratelimit.Event) {})),
		"WithFallback":       ratelimit.WithFallback(memory.MustNew(), 2),
		"WithCircuitBreaker": ratelimit.WithCircuitBreaker(3, time.Second),
		"WithStoreTimeout":   ratelimit.WithStoreTimeout(time.Second),
	} {
		lim, err := ratelimit.New(memory.MustNew(), algorithms.GCRA(1, time.Hour, 1))
		if err != nil {
			t.Fatal(err)
		}
		lim.Allow(ctx, "key")
		if err := opt(lim); !errors.Is(err, ratelimit.ErrInvalidParams) {
			t.Errorf("%s(lim) on a limiter New returned: error %v, want one wrapping ErrInvalidParams", name, err)
		}
		if d, err := lim.Allow(ctx, "key"); d.Allowed || d.Shadowed || d.Source != ratelimit.SourceStore || err != nil {
			t.Errorf("after %s(lim): lim.Allow(key) over its limit = %+v, %v; want denied by the store, as before", name, d, err)
		}
	}
}

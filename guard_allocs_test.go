//go:build !race

package ratelimit_test

import (
	"context"
	"testing"

	"github.com/ratelimitkit/ratelimit"
	"github.com/ratelimitkit/ratelimit/store/memory"
)

// TestGuardDoesNotAllocate checks, outside benchmarks, that an observer
// and a decision made with the circuit breaker open allocate nothing on
// the memory store. (The race detector allocates, so this file is built
// without it.) A limiter with no option at all is TestAllowDoesNotAllocate's,
// in store/memory.
func TestGuardDoesNotAllocate(t *testing.T) {
	nop := observerFunc(func(context.Context, ratelimit.Event) {})
	observed, err := ratelimit.New(memory.MustNew(), admitAll, ratelimit.WithObserver(nop), ratelimit.WithShadow())
	if err != nil {
		t.Fatal(err)
	}
	_, outage := outageLimiters(t)
	ctx := context.Background()
	for name, lim := range map[string]*ratelimit.Limiter{"observer and shadow mode": observed, "breaker open": outage} {
		lim.Allow(ctx, "key")
		if n := testing.AllocsPerRun(1000, func() { lim.Allow(ctx, "key") }); n != 0 {
			t.Errorf("%s: lim.Allow allocates %v times per call, want 0", name, n)
		}
	}
}

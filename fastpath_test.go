package ratelimit_test

import (
	"reflect"
	"testing"
	"time"

	"github.com/ratelimitkit/ratelimit"
	"github.com/ratelimitkit/ratelimit/algorithms"
	"github.com/ratelimitkit/ratelimit/store"
	"github.com/ratelimitkit/ratelimit/store/memory"
)

// wrapped is a user's store around the memory store: it has the memory
// store's methods but not its type.
type wrapped struct{ store.Store }

// TestFastPath holds the memory store's in-process path, which the
// limiter finds by the store's type (internal/fastpath) rather than by an
// exported method that exists for it alone: a limiter on the memory store
// takes it for every built-in algorithm, the sliding log included, not for
// a user's algorithm, and not through a user's wrapper; and the memory
// store exports no DecideTo.
func TestFastPath(t *testing.T) {
	for _, c := range []struct {
		name  string
		store store.Store
		alg   algorithms.Algorithm
		want  bool
	}{
		{"memory, GCRA", memory.MustNew(), algorithms.GCRA(10, time.Second, 10), true},
		{"memory, fixed window", memory.MustNew(), algorithms.FixedWindow(10, time.Second), true},
		{"memory, sliding log", memory.MustNew(), algorithms.SlidingLog(10, time.Second), true},
		{"memory, a user's algorithm", memory.MustNew(), opaqueAlg{algorithms.FixedWindow(10, time.Second)}, false},
		{"wrapped memory, GCRA", wrapped{memory.MustNew()}, algorithms.GCRA(10, time.Second, 10), false},
	} {
		l, err := ratelimit.New(c.store, c.alg)
		if err != nil {
			t.Fatal(err)
		}
		if got := ratelimit.UsesFastPath(l); got != c.want {
			t.Errorf("%s: limiter uses the in-process path = %v, want %v", c.name, got, c.want)
		}
		if d, err := l.Allow(t.Context(), "k"); err != nil || !d.Allowed {
			t.Errorf("%s: first Allow = %+v, %v, want allowed", c.name, d, err)
		}
	}
	if _, ok := reflect.TypeOf(memory.MustNew()).MethodByName("DecideTo"); ok {
		t.Error("memory.Store exports DecideTo, a method only the limiter calls")
	}
}

// Package ctxaware records which store types are known to give up when
// their context ends, so that the limiter and the locker can call them
// directly, and run every other store's calls on a goroutine of their own
// that they stop waiting for at the call's bound.
//
// A store's context is its contract (ratelimit.Store's doc comment, and the
// conformance suite's Context groups), but a store written by a user may
// still wrap a client that ignores it; the SDK's bounds must hold all the
// same. The built-in stores declare themselves here (their tests run the
// suite's Context and FaultHungStore groups, on a frozen server where the
// harness can freeze one), and so pay for no goroutine.
package ctxaware

import (
	"reflect"
	"sync"
)

var known sync.Map // reflect.Type → struct{}

// Declare records that stores of v's dynamic type give up when their
// context ends. Call it from the store package's init with a nil pointer
// of the type: ctxaware.Declare((*Store)(nil)).
func Declare(v any) { known.Store(reflect.TypeOf(v), struct{}{}) }

// Honours reports whether v's dynamic type was declared.
func Honours(v any) bool {
	_, ok := known.Load(reflect.TypeOf(v))
	return ok
}

// Package ctxaware records which store types are known to give up when
// their context ends, so that the limiter and the locker can call them
// directly, and run every other store's calls on a goroutine of their own
// that they stop waiting for at the call's bound.
//
// A store's context is its contract (store.Store's doc comment, and the
// conformance suite's Context groups), but a store written by a user may
// still wrap a client that ignores it; the SDK's bounds must hold all the
// same. The built-in stores declare themselves here (their tests run the
// suite's Context and FaultHungStore groups, on a frozen server where the
// harness can freeze one), and so pay for no goroutine.
package ctxaware

import (
	"context"
	"fmt"
	"reflect"
	"sync"
	"time"
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

// Grace is how long Detached waits, once the call's context has ended, for
// the store's own answer before it stops waiting: a store that honours its
// context answers at once then, with an error that says more than ctx's.
const Grace = 100 * time.Millisecond

// Detached runs call(ctx) on a goroutine of its own (see Go) and returns its
// result, or an error (prefix, then what happened) wrapping ctx's cause
// once ctx has ended and the store has not answered within Grace: a store that ignores its context
// then holds only that goroutine, until its client gives up. A panic in
// the store is returned as an error, since no caller is left to recover it.
func Detached[T any](ctx context.Context, prefix string, call func(context.Context) (T, error)) (T, error) {
	type reply struct {
		v   T
		err error
	}
	done := make(chan reply, 1)
	Go(func() {
		var r reply
		defer func() {
			if p := recover(); p != nil {
				r.err = fmt.Errorf("%sthe store panicked: %v", prefix, p)
			}
			done <- r
		}()
		r.v, r.err = call(ctx)
	})
	select {
	case r := <-done:
		return r.v, r.err
	case <-ctx.Done():
	}
	grace := time.NewTimer(Grace)
	defer grace.Stop()
	select {
	case r := <-done:
		return r.v, r.err
	case <-grace.C:
		var zero T
		return zero, fmt.Errorf("%sthe store did not give up within %v of the call's context ending: %w", prefix, Grace, context.Cause(ctx))
	}
}

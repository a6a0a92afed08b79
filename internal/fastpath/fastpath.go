// Package fastpath lets a store of this repository offer the limiter a
// faster way to decide than its exported methods, without exporting a
// method that only the limiter calls: the store registers, in its
// package's init, how to get its in-process decision function for a
// store of its type, and the limiter looks it up by the store's dynamic
// type when it is built (the pattern of internal/ctxaware). A store
// written by a user, or one of ours wrapped by a user, has none, and the
// limiter calls its Decider or Update, which make the same decisions.
//
// The memory store registers its decision for a forms.ToDecider, whose
// fields return in registers: the limiter's default path on it (see
// ratelimit's toDecider).
package fastpath

import (
	"reflect"
	"sync"
)

var decideTo sync.Map // reflect.Type → func(store any) any

// RegisterDecideTo records that stores of v's dynamic type decide in
// process through f(store), a function whose type package ratelimit names
// (toDecider there); a registered function of another type is never used.
// Call it from the store package's init with a nil pointer of the type.
func RegisterDecideTo(v any, f func(store any) any) { decideTo.Store(reflect.TypeOf(v), f) }

// DecideTo returns the decision function registered for store's dynamic
// type, bound to store, or nil when none is.
func DecideTo(store any) any {
	f, ok := decideTo.Load(reflect.TypeOf(store))
	if !ok {
		return nil
	}
	return f.(func(any) any)(store)
}

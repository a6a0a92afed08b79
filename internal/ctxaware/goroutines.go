package ctxaware

import (
	"context"
	"slices"
	"sync"
	"time"
)

// Go runs f on a goroutine apart from its caller, as the go statement
// does, but on one kept from an earlier call when one is idle: a call
// handed off per request (Detached's, and the stores' for a client that
// ignores deadlines) then costs a hand-over instead of a new goroutine
// whose stack grows, copy by copy, to the depth of a client's call, which
// on a lone Redis decision cost about twice the client's CPU of the call
// itself. A goroutine idle for idleFor ends, so none outlives the calls
// by more than that, and one whose f never returns holds only itself.
//
// f must not panic: a panic ends the process, as in a goroutine of its
// own (Detached recovers its call's).
func Go(f func()) {
	idle.mu.Lock()
	if n := len(idle.ready); n > 0 {
		w := idle.ready[n-1] // the last to finish: its stack is the warmest
		idle.ready = idle.ready[:n-1]
		idle.mu.Unlock()
		w <- f
		return
	}
	idle.mu.Unlock()
	w := make(chan func(), 1)
	w <- f
	go work(w)
}

// idleFor is how long a goroutine of Go's waits for its next call before
// it ends.
const idleFor = 500 * time.Millisecond

// idle holds the goroutines of Go waiting for a call, each by the channel
// it takes its next call from (buffered, so that a hand-over never
// blocks).
var idle struct {
	mu    sync.Mutex
	ready []chan func()
}

// work runs the calls handed to w until it has waited idleFor for one.
func work(w chan func()) {
	f := <-w
	var t *time.Timer
	for {
		f()
		f = nil
		idle.mu.Lock()
		idle.ready = append(idle.ready, w)
		idle.mu.Unlock()
		if t == nil {
			t = time.NewTimer(idleFor)
		} else {
			t.Reset(idleFor)
		}
		select {
		case f = <-w:
			continue
		case <-t.C:
		}
		idle.mu.Lock()
		i := slices.Index(idle.ready, w)
		if i >= 0 {
			idle.ready = slices.Delete(idle.ready, i, i+1)
		}
		idle.mu.Unlock()
		if i >= 0 {
			return
		}
		f = <-w // taken from ready as the timer fired: its call is on its way
	}
}

// Until runs call(ctx) on a goroutine of Go's and returns its outcome, or
// ctx's error as soon as ctx ends first: for a client that may hold a call
// past its context, as the stores' clients may (go-redis's without
// ContextTimeoutEnabled; valkey-go's while a call waits for a connection
// another call is opening). The abandoned call runs on until its client
// gives up, so call must own everything it reads and writes. For a context
// that cannot end, it is call(ctx), on the caller's goroutine.
func Until[T any](ctx context.Context, call func(context.Context) (T, error)) (T, error) {
	if ctx.Done() == nil {
		return call(ctx)
	}
	type outcome struct {
		v   T
		err error
	}
	done := make(chan outcome, 1)
	Go(func() {
		v, err := call(ctx)
		done <- outcome{v, err}
	})
	select {
	case o := <-done:
		return o.v, o.err
	case <-ctx.Done():
		var zero T
		return zero, ctx.Err()
	}
}

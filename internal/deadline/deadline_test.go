package deadline

import (
	"context"
	"errors"
	"testing"
	"time"
)

// TestSharedDeadline holds the shared deadline (Shared.Within for a
// context that cannot be canceled) to a deadline's promises: it ends
// no sooner than its end and at most a step later, calls that start
// together share it, it closes Done and sets Err when it passes, and the
// caller's values pass through. A context that can be canceled gets its
// own deadline and still ends when its caller cancels it.
func TestSharedDeadline(t *testing.T) {
	const timeout = 50 * time.Millisecond
	step := min(timeout/100, time.Millisecond)
	s := New(timeout)
	type key struct{}
	parent := context.WithValue(context.Background(), key{}, "v")

	start := time.Now()
	end := start.Add(timeout)
	ctx1, end1, cancel1 := s.Within(parent, end)
	defer cancel1()
	ctx2, end2, cancel2 := s.Within(parent, time.Now().Add(timeout))
	defer cancel2()
	dl, ok := ctx1.Deadline()
	if !ok || !dl.Equal(end1) || dl.Before(end) || dl.After(end.Add(step)) {
		t.Fatalf("deadline %v (ok %v), end %v: want between %v and a step (%v) later", dl, ok, end1, end, step)
	}
	if ctx1.Done() != ctx2.Done() || !end1.Equal(end2) {
		t.Errorf("two calls a moment apart got deadlines %v and %v and their own Done channels: want one shared", end1, end2)
	}
	if v := ctx1.Value(key{}); v != "v" {
		t.Errorf("Value = %v, want the caller's", v)
	}
	if err := ctx1.Err(); err != nil {
		t.Fatalf("Err before the deadline = %v", err)
	}
	select {
	case <-ctx1.Done():
		if waited := time.Since(start); waited < timeout {
			t.Errorf("Done after %v, before the end, %v", waited, timeout)
		}
	case <-time.After(10 * timeout):
		t.Fatalf("Done not closed %v after the deadline", 9*timeout)
	}
	if err := ctx1.Err(); !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("Err after the deadline = %v, want context.DeadlineExceeded", err)
	}
	ctx3, end3, cancel3 := s.Within(parent, time.Now().Add(timeout))
	defer cancel3()
	if ctx3.Done() == ctx1.Done() || ctx3.Err() != nil || !end3.After(end1) {
		t.Errorf("a call after the shared deadline passed got it again (end %v, Err %v)", end3, ctx3.Err())
	}

	// A caller's context that can be canceled ends the call when canceled.
	cctx, cancel := context.WithCancel(parent)
	ctx4, _, cancel4 := s.Within(cctx, time.Now().Add(time.Hour))
	defer cancel4()
	cancel()
	select {
	case <-ctx4.Done():
		if !errors.Is(ctx4.Err(), context.Canceled) {
			t.Errorf("Err after the caller canceled = %v, want context.Canceled", ctx4.Err())
		}
	case <-time.After(time.Second):
		t.Fatal("the caller canceled its context and the deadline's did not end")
	}
}

// TestSharedDeadlineDerived checks that contexts derived from a
// shared deadline end with it: a child of context.WithCancel, and a
// function of context.AfterFunc, which the shared deadline runs instead
// of a goroutine per derived context.
func TestSharedDeadlineDerived(t *testing.T) {
	const timeout = 30 * time.Millisecond
	s := New(timeout)
	ctx, _, cancel := s.Within(context.Background(), time.Now().Add(timeout))
	defer cancel()
	child, cancelChild := context.WithCancel(ctx)
	defer cancelChild()
	ran := make(chan struct{})
	context.AfterFunc(ctx, func() { close(ran) })
	stopped := context.AfterFunc(ctx, func() { t.Error("a stopped AfterFunc ran") })
	if !stopped() {
		t.Fatal("stop of a pending AfterFunc reported false")
	}
	for _, c := range []struct {
		name string
		done <-chan struct{}
	}{{"a child of WithCancel", child.Done()}, {"an AfterFunc", ran}} {
		select {
		case <-c.done:
		case <-time.After(time.Second):
			t.Fatalf("%s did not end within a second of a %v deadline", c.name, timeout)
		}
	}
	if child.Err() == nil || !errors.Is(ctx.Err(), context.DeadlineExceeded) {
		t.Errorf("after the deadline: child's Err %v, shared Err %v", child.Err(), ctx.Err())
	}
}

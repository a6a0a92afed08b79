package ctxaware

import (
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// waitGoroutines waits up to d for at most n goroutines, and reports the
// count it saw last.
func waitGoroutines(n int, d time.Duration) int {
	end := time.Now().Add(d)
	for {
		g := runtime.NumGoroutine()
		if g <= n || time.Now().After(end) {
			return g
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// TestGoReuses runs calls one after another on one kept goroutine, and
// ends it once idle for idleFor.
func TestGoReuses(t *testing.T) {
	before := waitGoroutines(runtime.NumGoroutine(), 0)
	var ran atomic.Int64
	peak := 0
	for range 1000 {
		done := make(chan struct{})
		Go(func() { ran.Add(1); close(done) })
		<-done
		peak = max(peak, runtime.NumGoroutine())
	}
	if ran.Load() != 1000 {
		t.Fatalf("ran %d calls, want 1000", ran.Load())
	}
	if peak > before+2 {
		t.Errorf("up to %d goroutines for calls one after another, %d before: want at most 2 more", peak, before)
	}
	if g := waitGoroutines(before, 20*idleFor); g > before {
		t.Errorf("%d goroutines %v after the last call, %d before", g, 20*idleFor, before)
	}
}

// TestGoConcurrent runs many calls at once, each on a goroutine of its own
// (none waits for another), and every one of them exactly once.
func TestGoConcurrent(t *testing.T) {
	before := runtime.NumGoroutine()
	const n = 64
	var started, ran sync.WaitGroup
	release := make(chan struct{})
	var count atomic.Int64
	started.Add(n)
	ran.Add(n)
	for range n {
		Go(func() {
			started.Done()
			<-release // every call holds its goroutine until all have started
			count.Add(1)
			ran.Done()
		})
	}
	started.Wait()
	close(release)
	ran.Wait()
	if count.Load() != n {
		t.Fatalf("ran %d calls, want %d", count.Load(), n)
	}
	if g := waitGoroutines(before, 20*idleFor); g > before {
		t.Errorf("%d goroutines %v after the last call, %d before", g, 20*idleFor, before)
	}
}

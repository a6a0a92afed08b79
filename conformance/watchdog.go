package conformance

import (
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"
)

// DefaultTimeout is how long the suite lets a subtest run without progress
// (no subtest starting or ending) when Harness.Timeout is zero.
const DefaultTimeout = 2 * time.Minute

// A watchdog ends a run of the suite that has stopped making progress, as
// x/net/nettest's does for a hung connection: a store that deadlocks would
// otherwise hang until go test's -timeout (ten minutes by default), and the
// report would not say where. Progress is a subtest starting or ending;
// when none happens within the time limit, the watchdog panics with the
// names of the subtests still running, the one that started last (the
// hung one) first. A panic is the only way to end the run: the hung
// subtest's goroutine cannot be stopped from outside.
type watchdog struct {
	mu      sync.Mutex
	limit   time.Duration
	timer   *time.Timer
	running map[string]time.Time // subtest name → when it started
	done    bool
}

// watchdogs are the runs in progress, by the name of the test that called
// Run, so that a subtest finds its run's watchdog by its name.
var watchdogs = struct {
	sync.Mutex
	m map[string]*watchdog
}{m: map[string]*watchdog{}}

// startWatchdog arms a watchdog for the run of the suite in t, and disarms
// it when t ends.
func startWatchdog(t *testing.T) *watchdog {
	w := &watchdog{limit: DefaultTimeout, running: map[string]time.Time{}}
	w.timer = time.AfterFunc(w.limit, w.fire)
	watchdogs.Lock()
	watchdogs.m[t.Name()] = w
	watchdogs.Unlock()
	t.Cleanup(func() {
		watchdogs.Lock()
		delete(watchdogs.m, t.Name())
		watchdogs.Unlock()
		w.mu.Lock()
		w.done = true
		w.timer.Stop()
		w.mu.Unlock()
	})
	return w
}

// watch records that subtest t is running, as progress, and that it has
// ended when it does. limit, when not zero, sets the time limit: negative
// turns the watchdog off. It does nothing outside a run of the suite.
func watch(t *testing.T, limit time.Duration) {
	name := t.Name()
	watchdogs.Lock()
	var w *watchdog
	best := ""
	for root, rw := range watchdogs.m {
		if strings.HasPrefix(name, root+"/") && len(root) >= len(best) {
			w, best = rw, root
		}
	}
	watchdogs.Unlock()
	if w == nil {
		return
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	if limit != 0 {
		w.limit = limit
	}
	if _, ok := w.running[name]; ok {
		return
	}
	w.running[name] = time.Now()
	w.progress()
	t.Cleanup(func() {
		w.mu.Lock()
		defer w.mu.Unlock()
		delete(w.running, name)
		w.progress()
	})
}

// progress restarts the time limit. The caller holds w.mu.
func (w *watchdog) progress() {
	if w.done {
		return
	}
	if w.limit < 0 {
		w.timer.Stop()
		return
	}
	w.timer.Reset(w.limit)
}

func (w *watchdog) fire() {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.done || w.limit < 0 {
		return
	}
	names := make([]string, 0, len(w.running))
	for name := range w.running {
		names = append(names, name)
	}
	// The subtest that started last is the innermost one still running.
	slices.SortFunc(names, func(a, b string) int { return w.running[b].Compare(w.running[a]) })
	var b strings.Builder
	for _, name := range names {
		fmt.Fprintf(&b, "\n\t%s (running for %v)", name, time.Since(w.running[name]).Round(time.Millisecond))
	}
	if len(names) == 0 {
		panic(fmt.Sprintf("conformance: no progress for %v between subtests", w.limit))
	}
	panic(fmt.Sprintf("conformance: subtest %s made no progress for %v: the store may be deadlocked, or ignore its context. Still running:%s",
		names[0], w.limit, b.String()))
}

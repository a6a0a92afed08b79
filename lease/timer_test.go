package lease_test

import (
	"os"
	"runtime"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ratelimitkit/ratelimit/lease"
	"github.com/ratelimitkit/ratelimit/store/memory"
)

// TestTimerLateness measures how late time.After fires on a loaded
// machine, the figure Do's default margin (a second) is sized
// by. It runs only when RATELIMIT_TIMER_PROBE names a duration, since it
// loads every core for that long:
//
//	RATELIMIT_TIMER_PROBE=30s go test -run TestTimerLateness -v ./lease
//
// While it measures, GOMAXPROCS goroutines spin and one more allocates
// garbage as fast as it can (keeping 64 MiB live, so the collector runs
// often and marks a real heap); a timer of 1 to 50 ms is set again and
// again by each of 16 goroutines, and its lateness recorded. It fails when
// a timer fired the default margin (a second) late or later: the default margin would no
// longer cover this machine.
func TestTimerLateness(t *testing.T) {
	run, err := time.ParseDuration(os.Getenv("RATELIMIT_TIMER_PROBE"))
	if err != nil || run <= 0 {
		t.Skip("set RATELIMIT_TIMER_PROBE=30s to measure timer lateness under load")
	}
	var stop atomic.Bool
	var wg sync.WaitGroup
	for range runtime.GOMAXPROCS(0) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			x := 0
			for !stop.Load() {
				for i := 0; i < 1000; i++ {
					x += i * i
				}
			}
			_ = x
		}()
	}
	wg.Add(1)
	go func() {
		defer wg.Done()
		live := make([][]byte, 1024) // 1024 × 64 KiB = 64 MiB live
		for i := 0; !stop.Load(); i++ {
			live[i%len(live)] = make([]byte, 64<<10)
		}
	}()
	// Several goroutines wait on timers at once, as Do's renewals of
	// many leases would.
	const timers = 16
	var mu sync.Mutex
	var late []time.Duration
	var tw sync.WaitGroup
	end := time.Now().Add(run)
	for g := range timers {
		tw.Add(1)
		go func() {
			defer tw.Done()
			var mine []time.Duration
			for i := g; time.Now().Before(end); i++ {
				d := time.Duration(1+i%50) * time.Millisecond
				start := time.Now()
				<-time.After(d)
				mine = append(mine, time.Since(start)-d)
			}
			mu.Lock()
			late = append(late, mine...)
			mu.Unlock()
		}()
	}
	tw.Wait()
	stop.Store(true)
	wg.Wait()
	slices.Sort(late)
	q := func(p float64) time.Duration { return late[min(len(late)-1, int(p*float64(len(late))))] }
	t.Logf("GOMAXPROCS %d, %d timers over %v: lateness median %v, p99 %v, p99.9 %v, max %v",
		runtime.GOMAXPROCS(0), len(late), run, q(0.5), q(0.99), q(0.999), late[len(late)-1])
	lk, err := lease.New(memory.MustNew(), 10*time.Second) // a TTL whose default margin is the floor
	if err != nil {
		t.Fatal(err)
	}
	if worst := late[len(late)-1]; worst >= lk.Margin() {
		t.Errorf("a timer fired %v late, not less than the default margin (%v)", worst, lk.Margin())
	}
}

package ratelimit_test

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"os/exec"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/ratelimitkit/ratelimit"
	"github.com/ratelimitkit/ratelimit/algorithms"
	"github.com/ratelimitkit/ratelimit/algorithms/forms"
	"github.com/ratelimitkit/ratelimit/clock"
	"github.com/ratelimitkit/ratelimit/internal/testserver"
	"github.com/ratelimitkit/ratelimit/store"
	"github.com/ratelimitkit/ratelimit/store/memory"
	rlredis "github.com/ratelimitkit/ratelimit/store/redis"
)

// The numbers of the four-process test: each algorithm at quotaLimit per
// quotaPeriod (burst quotaLimit), shares of at most quotaMaxShare living
// quotaLife.
const (
	quotaProcs    = 4
	quotaLimit    = 1000
	quotaPeriod   = 500 * time.Millisecond
	quotaMaxShare = 16
	quotaLife     = 50 * time.Millisecond
	quotaRun      = 1500 * time.Millisecond
	quotaEnv      = "RATELIMIT_LOCALQUOTA_HELPER"
)

// TestLocalQuotaHelper is one process of TestLocalQuotaFourProcesses: it
// decides on one hot key of a Redis store, from one goroutine, until the
// run ends, and prints the time of each admission (µs since the epoch) and
// its store calls. It does nothing in a normal test run.
func TestLocalQuotaHelper(t *testing.T) {
	arg, ok := os.LookupEnv(quotaEnv)
	if !ok {
		t.Skip("runs only as a child process of TestLocalQuotaFourProcesses")
	}
	f := strings.Split(arg, ",") // algorithm, prefix, start (µs)
	start, _ := strconv.ParseInt(f[2], 10, 64)
	c := goredis.NewClient(&goredis.Options{Addr: testserver.RedisAddr(t), ContextTimeoutEnabled: true})
	defer c.Close()
	store, err := rlredis.New(c, rlredis.WithPrefix(f[1]))
	if err != nil {
		t.Fatal(err)
	}
	calls := &countingStore{Store: store}
	opts := []ratelimit.Option{ratelimit.WithName("quota"), ratelimit.WithLocalQuota(quotaMaxShare, quotaLife)}
	if os.Getenv("QUOTA_PLAIN") != "" {
		opts = opts[:1]
	}
	lim, err := ratelimit.New(calls, quotaAlgorithm(f[0]), opts...)
	if err != nil {
		t.Fatal(err)
	}
	w := bufio.NewWriter(os.Stdout)
	defer w.Flush()
	time.Sleep(time.Until(time.UnixMicro(start)))
	end := time.UnixMicro(start).Add(quotaRun)
	ctx := context.Background()
	decisions := 0
	for time.Now().Before(end) {
		before := time.Now()
		d, err := lim.Allow(ctx, "hot")
		after := time.Now()
		if err != nil {
			t.Fatal(err)
		}
		decisions++
		if d.Allowed {
			// The decision was made between before and after (by the
			// server's clock, on this machine); a fixed window's
			// ResetAfter names the window the store counted it in: it
			// ends at the multiple of the period nearest to
			// before + ResetAfter (the call takes far less than a
			// period).
			p := quotaPeriod.Microseconds()
			fmt.Fprintf(w, "A %d %d %d\n", before.UnixMicro(), after.UnixMicro(), (before.UnixMicro()+d.ResetAfter.Microseconds()+p/2)/p-1)
		}
	}
	fmt.Fprintf(w, "S %d %d\n", decisions, calls.calls.Load())
}

// countingStore counts a store's calls.
type countingStore struct {
	store.Store
	calls atomic.Int64
}

func (s *countingStore) Decide(ctx context.Context, k store.Key, alg algorithms.Algorithm, req algorithms.Request) (algorithms.Decision, error) {
	d, ok := s.Store.(store.Decider)
	if !ok {
		return algorithms.Decision{}, store.ErrUnsupported
	}
	s.calls.Add(1)
	return d.Decide(ctx, k, alg, req)
}

func (s *countingStore) Update(ctx context.Context, k store.Key, now int64, fn store.UpdateFunc) error {
	s.calls.Add(1)
	return s.Store.Update(ctx, k, now, fn)
}

func quotaAlgorithm(name string) algorithms.Algorithm {
	for _, b := range forms.Builtins() {
		if b.Name == name {
			return b.New(quotaLimit, quotaPeriod, quotaLimit)
		}
	}
	return nil
}

// TestLocalQuotaFourProcesses runs four OS processes (this test binary,
// re-executed), each with its own limiter with local quota on one hot key
// of the shared Redis, each asking far more than the limit for 1.5s, and
// holds all their admissions together to the bounds docs/scaling.md states:
// none over the limit in any fixed window; for the buckets at most
// min(r·L, N·S) over B + r·T in any span T; for the sliding window and log
// at most N·S over the limit in a window. It reports the over- and
// under-admission it measured.
func TestLocalQuotaFourProcesses(t *testing.T) {
	if testing.Short() {
		t.Skip("runs four processes for 1.5s per algorithm")
	}
	testserver.RedisAddr(t) // skips without a server
	for _, b := range forms.Builtins() {
		t.Run(b.Name, func(t *testing.T) {
			prefix := uniqueName("quota")
			start := time.Now().Add(500 * time.Millisecond).UnixMicro()
			outs := make([][]byte, quotaProcs)
			errs := make([]error, quotaProcs)
			var wg sync.WaitGroup
			for i := range quotaProcs {
				wg.Add(1)
				go func() {
					defer wg.Done()
					cmd := exec.Command(os.Args[0], "-test.run=^TestLocalQuotaHelper$", "-test.count=1")
					cmd.Env = append(os.Environ(), fmt.Sprintf("%s=%s,%s,%d", quotaEnv, b.Name, prefix, start))
					outs[i], errs[i] = cmd.Output()
				}()
			}
			wg.Wait()
			var adm []admission
			decisions, calls := 0, 0
			for i := range quotaProcs {
				if errs[i] != nil {
					t.Fatalf("process %d: %v\n%s", i, errs[i], outs[i])
				}
				for _, line := range strings.Split(string(outs[i]), "\n") {
					switch {
					case strings.HasPrefix(line, "A "):
						var a admission
						fmt.Sscanf(line, "A %d %d %d", &a.before, &a.after, &a.window)
						adm = append(adm, a)
					case strings.HasPrefix(line, "S "):
						var d, c int
						fmt.Sscanf(line, "S %d %d", &d, &c)
						decisions += d
						calls += c
					}
				}
			}
			slices.SortFunc(adm, func(a, b admission) int { return int(a.before - b.before) })
			checkQuotaBounds(t, b.Name, adm)
			t.Logf("%d processes: %d decisions, %d store calls (%.4f per decision), %d admitted", quotaProcs, decisions, calls, float64(calls)/float64(max(decisions, 1)), len(adm))
		})
	}
}

// admission is one admitted decision of TestLocalQuotaFourProcesses: it
// was made between before and after (µs since the epoch), and for a fixed
// window counted in window.
type admission struct{ before, after, window int64 }

// checkQuotaBounds holds admissions (sorted by before) to the bounds of
// algorithm name, and logs what it measured. A decision's time is known
// only within [before, after], so a span from admission i to j is taken
// at its longest, after_j − before_i: the check is implied by the bound.
func checkQuotaBounds(t *testing.T, name string, adm []admission) {
	t.Helper()
	const n, s = quotaProcs, quotaMaxShare // s is below a quarter of the burst
	period := int64(quotaPeriod / time.Microsecond)
	life := int64(quotaLife / time.Microsecond)
	rate := float64(quotaLimit) / float64(period)
	switch name {
	case "fixed_window":
		// Per window the store counted in: at most the limit.
		perWindow := map[int64]int{}
		for _, a := range adm {
			perWindow[a.window]++
		}
		most := 0
		for _, c := range perWindow {
			most = max(most, c)
		}
		t.Logf("most admitted in a window: %d (limit %d, bound: the limit)", most, quotaLimit)
		if most > quotaLimit {
			t.Errorf("%d admitted in one window, limit %d", most, quotaLimit)
		}
	case "sliding_window", "sliding_log":
		// sliding window: per window of the epoch's alignment, at most
		// the limit + N·S (the counter's own promise is per window);
		// sliding log: per any period.
		worst := 0
		for i, j := 0, 0; j < len(adm); j++ {
			// (i < j: one admission whose call straddles a window's
			// edge counts alone.)
			for i < j && (adm[j].after-adm[i].before >= period || name == "sliding_window" && adm[j].after/period != adm[i].before/period) {
				i++
			}
			worst = max(worst, j-i+1)
		}
		t.Logf("most admitted within one period: %d (limit %d, bound limit + N·S = %d)", worst, quotaLimit, quotaLimit+n*s)
		if worst > quotaLimit+n*s {
			t.Errorf("%d admitted within one period, bound %d", worst, quotaLimit+n*s)
		}
	default:
		// max over i ≤ j of (j − i + 1) − r·(after_j − before_i).
		var least, worst float64
		latest := int64(0)
		for j, a := range adm {
			if v := float64(j) - rate*float64(a.before); j == 0 || v < least {
				least = v
			}
			latest = max(latest, a.after)
			worst = max(worst, float64(j)-rate*float64(latest)-least+1)
		}
		extra := min(rate*float64(life), float64(n*s))
		t.Logf("over-admission: most admitted over B + r·T in any span: %.1f (bound min(r·L, N·S) = %.0f, +1 rounding)", worst-quotaLimit, extra)
		if worst > quotaLimit+extra+1 {
			t.Errorf("admitted %.1f over B + r·T in a span, bound min(r·L, N·S) + 1 = %.0f", worst-quotaLimit, extra+1)
		}
		// Under-admission over the whole run: B + r·T is what one
		// limiter without shares admits to callers that never stop.
		if len(adm) > 0 {
			// The run's span taken at its longest: an upper estimate.
			ideal := quotaLimit + rate*float64(adm[len(adm)-1].after-adm[0].before)
			t.Logf("under-admission over the run: at most %.0f of an ideal %.0f (B + r·T)", ideal-float64(len(adm)), ideal)
		}
	}
}

// TestLocalQuotaWindows checks, on the shared Redis and the memory store
// with a fake clock, the fixed window's two bounds exactly: four limiters
// never admit more than the limit in a window, and three that go quiet
// holding shares leave the fourth at least limit − 3·(S−1), which it
// reports as the measured under-admission.
func TestLocalQuotaWindows(t *testing.T) {
	stores := quotaStores()
	for name, open := range stores {
		t.Run(name, func(t *testing.T) {
			store := open(t)
			ctx := context.Background()
			c := clock.NewFake(time.Unix(1_900_000_000, 0))
			const limit, share = 100, 8
			alg := algorithms.FixedWindow(limit, time.Second)
			var lims []*ratelimit.Limiter
			for range 4 {
				lim, err := ratelimit.New(store, alg, ratelimit.WithClock(c), ratelimit.WithName("w"), ratelimit.WithLocalQuota(share, time.Minute))
				if err != nil {
					t.Fatal(err)
				}
				t.Cleanup(func() { lim.Close(ctx) })
				lims = append(lims, lim)
			}
			// Window 1: all four warm up to full shares, then three go
			// quiet holding what is left of theirs; the fourth asks for
			// everything.
			admitted := 0
			for _, lim := range lims {
				for range 2*share + 1 {
					if d, _ := lim.Allow(ctx, "k"); d.Allowed {
						admitted++
					}
				}
			}
			for range 2 * limit {
				if d, _ := lims[3].Allow(ctx, "k"); d.Allowed {
					admitted++
				}
			}
			peek, err := lims[3].Peek(ctx, "k")
			if err != nil || peek.Allowed || peek.Remaining != 0 {
				t.Errorf("Peek of the exhausted key by the hot limiter = %v, %v; want denied, remaining 0", peek, err)
			}
			held := limit - admitted
			t.Logf("window with three quiet holders: %d admitted of %d, %d units held by the quiet ones (bound 3·(S−1) = %d)", admitted, limit, held, 3*(share-1))
			if admitted > limit || held > 3*(share-1) {
				t.Errorf("admitted %d of %d: want at most the limit, and at least limit − 3·(S−1) = %d", admitted, limit, limit-3*(share-1))
			}
			// Window 2: the shares held are dead; everyone asks at once,
			// 10ms apart, for the whole window.
			c.Advance(time.Second)
			admitted = 0
			for range 100 {
				for _, lim := range lims {
					for range 2 {
						if d, _ := lim.Allow(ctx, "k"); d.Allowed {
							admitted++
						}
					}
				}
				c.Advance(10 * time.Millisecond)
			}
			t.Logf("window with four busy holders: %d admitted of %d", admitted, limit)
			if admitted > limit || admitted < limit-4*(share-1) {
				t.Errorf("admitted %d in a window: want at most %d and at least %d", admitted, limit, limit-4*(share-1))
			}
		})
	}
}

// TestLocalQuotaConcurrent has 32 goroutines on each of four limiters
// with local quota share one key of one memory store, on a clock that
// stands still: exactly the limit is admitted, however shares are taken.
func TestLocalQuotaConcurrent(t *testing.T) {
	store := memory.MustNew()
	c := clock.NewFake(time.Unix(1_900_000_000, 0))
	const limit = 1000
	var admitted atomic.Int64
	var wg sync.WaitGroup
	for range 4 {
		lim, err := ratelimit.New(store, algorithms.GCRA(limit, time.Hour, limit), ratelimit.WithClock(c), ratelimit.WithLocalQuota(64, time.Second))
		t.Cleanup(func() { lim.Close(context.Background()) })
		if err != nil {
			t.Fatal(err)
		}
		for range 32 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for range limit / 16 {
					if d, err := lim.Allow(context.Background(), "k"); err == nil && d.Allowed {
						admitted.Add(1)
					}
				}
			}()
		}
	}
	wg.Wait()
	if got := admitted.Load(); got > limit || got < limit-4*63 {
		t.Errorf("admitted %d, want at most %d and at least %d", got, limit, limit-4*63)
	}
}

// TestLocalQuotaOptions checks what WithLocalQuota refuses, and that a
// limiter closed stops taking shares.
func TestLocalQuotaOptions(t *testing.T) {
	store := memory.MustNew()
	for _, c := range []struct {
		name string
		alg  algorithms.Algorithm
		opt  ratelimit.Option
	}{
		{"share 0", algorithms.GCRA(10, time.Second, 10), ratelimit.WithLocalQuota(0, time.Second)},
		{"lifetime 0", algorithms.GCRA(10, time.Second, 10), ratelimit.WithLocalQuota(8, 0)},
		{"lifetime in ns", algorithms.GCRA(10, time.Second, 10), ratelimit.WithLocalQuota(8, time.Nanosecond)},
		{"user's algorithm", stepAlgorithm{"none", 5}, ratelimit.WithLocalQuota(8, time.Second)},
		{"leaky part", algorithms.All(algorithms.GCRA(10, time.Second, 10), algorithms.LeakyBucket(10, time.Second, 10)), ratelimit.WithLocalQuota(8, time.Second)},
	} {
		if _, err := ratelimit.New(store, c.alg, c.opt); err == nil || !strings.Contains(err.Error(), "invalid parameters") {
			t.Errorf("%s: New = %v, want an error wrapping ErrInvalidParams", c.name, err)
		}
	}
	fc := clock.NewFake(time.Unix(1_900_000_000, 0))
	calls := &countingStore{Store: store}
	lim, err := ratelimit.New(calls, algorithms.All(algorithms.FixedWindow(100, time.Second), algorithms.GCRA(100, time.Second, 100)),
		ratelimit.WithClock(fc), ratelimit.WithLocalQuota(8, time.Second))
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	for range 100 {
		lim.Allow(ctx, "k")
	}
	before := calls.calls.Load()
	if before > 25 {
		t.Errorf("100 decisions of a composite made %d store calls, want shares", before)
	}
	if err := lim.Close(ctx); err != nil {
		t.Fatal(err)
	}
	d, _ := lim.Allow(ctx, "k")
	if d.Allowed {
		t.Errorf("after 100 requests and Close, Allow = allowed; want the store's denial")
	}
	lim.Allow(ctx, "k")
	if n := calls.calls.Load() - before; n != 2 {
		t.Errorf("after Close, two decisions made %d store calls, want 2", n)
	}
}

// BenchmarkLocalQuotaRedis decides on one hot key of the shared Redis from
// 32 goroutines, with and without local quota, and reports decisions per
// second and store calls per decision.
//
//	go test -run '^$' -bench BenchmarkLocalQuotaRedis -benchtime 3s .
func BenchmarkLocalQuotaRedis(b *testing.B) {
	for _, c := range []struct {
		name string
		opts []ratelimit.Option
	}{
		{"plain", nil},
		{"localquota", []ratelimit.Option{ratelimit.WithLocalQuota(1000, 100*time.Millisecond)}},
	} {
		b.Run(c.name, func(b *testing.B) {
			rc := goredis.NewClient(&goredis.Options{Addr: testserver.RedisAddr(b), ContextTimeoutEnabled: true, PoolSize: 64})
			defer rc.Close()
			s, err := rlredis.New(rc, rlredis.WithPrefix(uniqueName("quotabench")))
			if err != nil {
				b.Fatal(err)
			}
			calls := &countingStore{Store: s}
			lim, err := ratelimit.New(calls, algorithms.GCRA(1e9, time.Second, 1e9), c.opts...)
			if err != nil {
				b.Fatal(err)
			}
			ctx := context.Background()
			b.SetParallelism(32 / max(1, runtime.GOMAXPROCS(0)))
			start := time.Now()
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					if d, err := lim.Allow(ctx, "hot"); err != nil || !d.Allowed {
						b.Errorf("Allow = %v, %v", d.Allowed, err)
						return
					}
				}
			})
			b.ReportMetric(float64(b.N)/time.Since(start).Seconds(), "decisions/s")
			b.ReportMetric(float64(calls.calls.Load())/float64(b.N), "calls/decision")
		})
	}
}

// TestLocalQuotaGivesBack holds the give-back to its promise, on the memory
// store and Redis, for each algorithm at 100 an hour (so that the seconds
// the test moves the clock refill nothing): a limiter with local quota
// takes shares 1, 2 and 4 for four requests, which leaves 3 units unspent
// that the store has counted; Close gives them back (a plain limiter on
// the same key then sees 96 remaining, not 93), except the sliding log's,
// which stay until they leave its period; and a share no request spends
// from for half a lifetime goes back without Close.
func TestLocalQuotaGivesBack(t *testing.T) {
	stores := quotaStores()
	algs := []algorithms.Algorithm{
		algorithms.GCRA(100, time.Hour, 100),
		algorithms.TokenBucket(100, time.Hour, 100),
		algorithms.LeakyBucket(100, time.Hour, 100),
		algorithms.FixedWindow(100, time.Hour),
		algorithms.SlidingWindow(100, time.Hour),
		algorithms.SlidingLog(100, time.Hour),
		algorithms.All(algorithms.FixedWindow(100, time.Hour), algorithms.SlidingWindow(1000, 24*time.Hour)),
	}
	const lifetime = time.Second
	for sname, open := range stores {
		for _, alg := range algs {
			t.Run(sname+"/"+alg.Name(), func(t *testing.T) {
				st := open(t)
				ctx := context.Background()
				c := clock.NewFake(time.Unix(1_900_000_000, 0))
				keepsAll := alg.Name() == algorithms.SlidingLog(1, time.Second).Name()
				plain, err := ratelimit.New(st, alg, ratelimit.WithClock(c), ratelimit.WithName("back"))
				if err != nil {
					t.Fatal(err)
				}
				remaining := func(key string) int {
					t.Helper()
					d, err := plain.Peek(ctx, key)
					if err != nil {
						t.Fatal(err)
					}
					return d.Remaining
				}
				take := func(key string) *ratelimit.Limiter {
					t.Helper()
					lim, err := ratelimit.New(st, alg, ratelimit.WithClock(c), ratelimit.WithName("back"), ratelimit.WithLocalQuota(8, lifetime))
					if err != nil {
						t.Fatal(err)
					}
					t.Cleanup(func() { lim.Close(ctx) })
					for i := range 4 {
						if d, err := lim.Allow(ctx, key); err != nil || !d.Allowed {
							t.Fatalf("request %d: %+v, %v; want allowed", i+1, d, err)
						}
					}
					if got := remaining(key); got != 93 {
						t.Fatalf("remaining with 3 units held in a share = %d, want 93 (shares of 1, 2 and 4 counted)", got)
					}
					return lim
				}
				want := 96
				if keepsAll {
					want = 93
				}

				lim := take("closed")
				if err := lim.Close(ctx); err != nil {
					t.Fatal(err)
				}
				if got := remaining("closed"); got != want {
					t.Errorf("remaining after Close = %d, want %d", got, want)
				}
				if d, err := lim.Allow(ctx, "closed"); err != nil || !d.Allowed || remaining("closed") != want-1 {
					t.Errorf("a decision after Close: %+v, %v, remaining %d; want one admitted by the store, %d remaining", d, err, remaining("closed"), want-1)
				}

				take("idle")
				// The idle check runs every half lifetime, on the
				// limiter's clock: move it on until the share is back.
				deadline := time.Now().Add(5 * time.Second)
				for remaining("idle") != want && time.Now().Before(deadline) {
					c.Advance(lifetime / 4)
					time.Sleep(5 * time.Millisecond)
				}
				if got := remaining("idle"); got != want {
					t.Errorf("remaining after the share sat idle = %d, want %d", got, want)
				}
			})
		}
	}
}

// quotaStores opens, per test, the stores the local-quota tests run on
// with the limiter's clock: the memory store and a Redis of the test
// servers, each with a key prefix of its own.
func quotaStores() map[string]func(t *testing.T) store.Store {
	return map[string]func(t *testing.T) store.Store{
		"memory": func(t *testing.T) store.Store { return memory.MustNew() },
		"redis": func(t *testing.T) store.Store {
			c := goredis.NewClient(&goredis.Options{Addr: testserver.RedisAddr(t), ContextTimeoutEnabled: true})
			t.Cleanup(func() { c.Close() })
			s, err := rlredis.New(c, rlredis.WithPrefix(uniqueName("quota")), rlredis.WithServerClock(false))
			if err != nil {
				t.Fatal(err)
			}
			return s
		},
	}
}

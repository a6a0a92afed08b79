package ratelimit_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/ratelimitkit/ratelimit"
	"github.com/ratelimitkit/ratelimit/algorithms"
	"github.com/ratelimitkit/ratelimit/clock"
	"github.com/ratelimitkit/ratelimit/internal/testserver"
	"github.com/ratelimitkit/ratelimit/store"
	"github.com/ratelimitkit/ratelimit/store/memory"
	rlredis "github.com/ratelimitkit/ratelimit/store/redis"
)

// The reservation tests of golang.org/x/time/rate (rate_test.go, v0.16.0),
// replayed as data on our limiters: their facts (times in multiples of
// d = 100ms, costs, the time to act and verdict each reservation gets,
// cancellations, the tokens an AllowN sees), our code. x/time/rate's
// Limiter(r, b) is GCRA(r, time.Second, b) or TokenBucket(r, time.Second,
// b) here; its SetLimitAt and SetBurstAt are a Tier with the new numbers.

// xop is one step of an x/time/rate test.
type xop struct {
	op  byte // 'r' ReserveN, 'a' AllowN, 'c' CancelAt, 'l' SetLimitAt, 'b' SetBurstAt
	at  int  // the step's time, in multiples of xd
	n   int  // the cost; for 'l' and 'b' the new limit or burst
	max int  // 'r': the max delay in multiples of xd, or -1 for InfDuration
	ok  bool // 'r', 'a': the verdict wanted
	act int  // 'r': the time to act wanted, in multiples of xd
	ref int  // 'r': the name the reservation gets (1..); 'c': the one to cancel
	// 'a': the tokens x/time/rate's TokensAt reports before the AllowN
	// (our Peek's Remaining: the same when not negative, 0 otherwise)
	toks float64
}

const xd = 100 * time.Millisecond

type xcase struct {
	name         string
	limit, burst int64
	ops          []xop
}

var inf = -1

var xcases = []xcase{
	{"TestSimpleReserve", 10, 2, []xop{
		{op: 'r', at: 0, n: 2, max: inf, ok: true, act: 0},
		{op: 'r', at: 0, n: 2, max: inf, ok: true, act: 2},
		{op: 'r', at: 3, n: 2, max: inf, ok: true, act: 4},
	}},
	{"TestMix", 10, 2, []xop{
		{op: 'r', at: 0, n: 3, max: inf, ok: false}, // n > burst
		{op: 'r', at: 0, n: 2, max: inf, ok: true, act: 0},
		{op: 'a', at: 1, n: 2, ok: false, toks: 1},
		{op: 'r', at: 1, n: 2, max: inf, ok: true, act: 2},
		{op: 'a', at: 1, n: 1, ok: false, toks: -1},
		{op: 'a', at: 3, n: 1, ok: true, toks: 1},
	}},
	{"TestCancelInvalid", 10, 2, []xop{
		{op: 'r', at: 0, n: 2, max: inf, ok: true, act: 0},
		{op: 'r', at: 0, n: 3, max: inf, ok: false, ref: 1},
		{op: 'c', at: 0, ref: 1}, // no effect
		{op: 'r', at: 0, n: 2, max: inf, ok: true, act: 2},
	}},
	{"TestCancelLast", 10, 2, []xop{
		{op: 'r', at: 0, n: 2, max: inf, ok: true, act: 0},
		{op: 'r', at: 0, n: 2, max: inf, ok: true, act: 2, ref: 1},
		{op: 'c', at: 1, ref: 1}, // 2 tokens back
		{op: 'r', at: 1, n: 2, max: inf, ok: true, act: 2},
	}},
	{"TestCancelTooLate", 10, 2, []xop{
		{op: 'r', at: 0, n: 2, max: inf, ok: true, act: 0},
		{op: 'r', at: 0, n: 2, max: inf, ok: true, act: 2, ref: 1},
		{op: 'c', at: 3, ref: 1}, // too late: no effect
		{op: 'r', at: 3, n: 2, max: inf, ok: true, act: 4},
	}},
	{"TestCancel0Tokens", 10, 2, []xop{
		{op: 'r', at: 0, n: 2, max: inf, ok: true, act: 0},
		{op: 'r', at: 0, n: 1, max: inf, ok: true, act: 1, ref: 1},
		{op: 'r', at: 0, n: 1, max: inf, ok: true, act: 2},
		{op: 'c', at: 0, ref: 1}, // 0 tokens back
		{op: 'r', at: 0, n: 1, max: inf, ok: true, act: 3},
	}},
	{"TestCancel1Token", 10, 2, []xop{
		{op: 'r', at: 0, n: 2, max: inf, ok: true, act: 0},
		{op: 'r', at: 0, n: 2, max: inf, ok: true, act: 2, ref: 1},
		{op: 'r', at: 0, n: 1, max: inf, ok: true, act: 3},
		{op: 'c', at: 2, ref: 1}, // 1 token back
		{op: 'r', at: 2, n: 2, max: inf, ok: true, act: 4},
	}},
	{"TestCancelMulti", 10, 4, []xop{
		{op: 'r', at: 0, n: 4, max: inf, ok: true, act: 0},
		{op: 'r', at: 0, n: 3, max: inf, ok: true, act: 3, ref: 1},
		{op: 'r', at: 0, n: 1, max: inf, ok: true, act: 4},
		{op: 'r', at: 0, n: 1, max: inf, ok: true, act: 5, ref: 2},
		{op: 'c', at: 1, ref: 2}, // 1 token back
		{op: 'c', at: 1, ref: 1}, // 2 tokens back, as if C was never reserved
		{op: 'r', at: 1, n: 3, max: inf, ok: true, act: 5},
	}},
	{"TestReserveJumpBack", 10, 2, []xop{
		{op: 'r', at: 1, n: 2, max: inf, ok: true, act: 1},
		{op: 'r', at: 0, n: 1, max: inf, ok: true, act: 1},
		{op: 'r', at: 2, n: 2, max: inf, ok: true, act: 3},
		{op: 'r', at: 0, n: 3, max: inf, ok: false},
		{op: 'r', at: 2, n: 1, max: inf, ok: true, act: 4},
		{op: 'r', at: 0, n: 2, max: 1, ok: false},
		{op: 'r', at: 2, n: 1, max: inf, ok: true, act: 5},
	}},
	{"TestReserveJumpBackCancel", 10, 2, []xop{
		{op: 'r', at: 1, n: 2, max: inf, ok: true, act: 1},
		{op: 'r', at: 1, n: 2, max: inf, ok: true, act: 3, ref: 1},
		{op: 'r', at: 1, n: 1, max: inf, ok: true, act: 4},
		{op: 'c', at: 0, ref: 1}, // 1 token back
		{op: 'r', at: 1, n: 2, max: inf, ok: true, act: 4},
	}},
	{"TestReserveSetLimit", 5, 2, []xop{
		{op: 'r', at: 0, n: 2, max: inf, ok: true, act: 0},
		{op: 'r', at: 0, n: 2, max: inf, ok: true, act: 4},
		{op: 'l', at: 2, n: 10},
		{op: 'r', at: 2, n: 1, max: inf, ok: true, act: 4},
	}},
	{"TestReserveSetBurst", 5, 2, []xop{
		{op: 'r', at: 0, n: 2, max: inf, ok: true, act: 0},
		{op: 'r', at: 0, n: 2, max: inf, ok: true, act: 4},
		{op: 'b', at: 3, n: 4},
		{op: 'r', at: 0, n: 4, max: inf, ok: true, act: 9},
	}},
	{"TestReserveSetLimitCancel", 5, 2, []xop{
		{op: 'r', at: 0, n: 2, max: inf, ok: true, act: 0},
		{op: 'r', at: 0, n: 2, max: inf, ok: true, act: 4, ref: 1},
		{op: 'l', at: 2, n: 10},
		{op: 'c', at: 2, ref: 1}, // 2 tokens back
		{op: 'r', at: 2, n: 2, max: inf, ok: true, act: 3},
	}},
	{"TestReserveMax", 10, 2, []xop{
		{op: 'r', at: 0, n: 2, max: 1, ok: true, act: 0},
		{op: 'r', at: 0, n: 1, max: 1, ok: true, act: 1},
		{op: 'r', at: 0, n: 1, max: 1, ok: false},
	}},
}

// Why cases differ by design.
const (
	whyJumpBack = "a clock that steps back: x/time/rate moves its last update back to the earlier " +
		"time and so counts the refill between the two times twice; our algorithms never gain " +
		"from a clock behind the last update (a backward step drains nothing, and GCRA measures " +
		"its TAT from the earlier now)"
	whySetLimit = "numbers changed: x/time/rate drains the old rate up to SetLimitAt and keeps the " +
		"token debt; a Tier's numbers apply to the state as stored (GCRA keeps its TAT in time, the " +
		"token bucket rescales its debt and drains at the new rate from its last update)"
	whySetBurst = "numbers changed: x/time/rate turns back the clock after SetBurstAt(t3) and " +
		"counts the debt in tokens under the new burst; a Tier's numbers apply to the state as stored"
)

// xknown are, by algorithm, the cases whose difference is by design, with
// the reason: the replay expects them to differ, and fails if one starts
// to pass (the reason would then be wrong).
var xknown = map[string]map[string]string{
	"gcra": {
		"TestReserveJumpBack":       whyJumpBack,
		"TestReserveJumpBackCancel": whyJumpBack,
		"TestReserveSetLimit":       whySetLimit,
		"TestReserveSetBurst":       whySetBurst,
		"TestReserveSetLimitCancel": whySetLimit,
	},
	"token_bucket": {
		"TestReserveJumpBack":       whyJumpBack,
		"TestReserveJumpBackCancel": whyJumpBack,
		"TestReserveSetLimit":       whySetLimit,
		"TestReserveSetBurst":       whySetBurst,
	},
}

// TestXTimeRateReplay replays x/time/rate's reservation tests on GCRA and
// the token bucket, on the memory store and on Redis.
func TestXTimeRateReplay(t *testing.T) {
	stores := map[string]func(t *testing.T) store.Store{
		"memory": func(t *testing.T) store.Store {
			s, err := memory.New()
			if err != nil {
				t.Fatal(err)
			}
			return s
		},
		"redis": func(t *testing.T) store.Store {
			c := goredis.NewClient(&goredis.Options{Addr: testserver.RedisAddr(t), ContextTimeoutEnabled: true})
			t.Cleanup(func() { c.Close() })
			s, err := rlredis.New(c, rlredis.WithPrefix(uniqueName("xreplay")), rlredis.WithServerClock(false))
			if err != nil {
				t.Fatal(err)
			}
			return s
		},
	}
	algs := map[string]func(limit, burst int64) algorithms.Algorithm{
		"gcra":         func(l, b int64) algorithms.Algorithm { return algorithms.GCRA(l, time.Second, b) },
		"token_bucket": func(l, b int64) algorithms.Algorithm { return algorithms.TokenBucket(l, time.Second, b) },
	}
	for storeName, newStore := range stores {
		for algName, newAlg := range algs {
			t.Run(storeName+"/"+algName, func(t *testing.T) {
				store := newStore(t)
				passed, differ := 0, 0
				for _, c := range xcases {
					failures := replay(t, store, c, newAlg)
					why, known := xknown[algName][c.name]
					switch {
					case len(failures) == 0 && !known:
						passed++
					case len(failures) > 0 && known:
						differ++
						t.Logf("%s differs, as expected (%s): %v", c.name, why, failures)
					case len(failures) == 0:
						t.Errorf("%s passes, but it is listed as differing (%s): update xknown", c.name, why)
					default:
						for _, f := range failures {
							t.Errorf("%s: %s", c.name, f)
						}
					}
				}
				t.Logf("x/time/rate reservation tests on %s: %d cases, %d pass, %d differ by design", algName, len(xcases), passed, differ)
			})
		}
	}
}

// replay runs one case on a fresh key and returns its mismatches.
func replay(t *testing.T, store store.Store, c xcase, newAlg func(limit, burst int64) algorithms.Algorithm) []string {
	t.Helper()
	ctx := context.Background()
	t0 := time.Unix(1_800_000_000, 0)
	clk := clock.NewFake(t0)
	lim, err := ratelimit.New(store, newAlg(c.limit, c.burst), ratelimit.WithClock(clk), ratelimit.WithName("xreplay"))
	if err != nil {
		t.Fatal(err)
	}
	key := c.name
	tier := (*ratelimit.Tier)(nil)
	limit, burst := c.limit, c.burst
	res := map[int]*ratelimit.Reservation{}
	var failures []string
	at := func(i int) time.Time { return t0.Add(time.Duration(i) * xd) }
	for i, op := range c.ops {
		clk.Set(at(op.at))
		switch op.op {
		case 'r':
			maxDelay := time.Duration(op.max) * xd
			if op.max == inf {
				maxDelay = algorithms.MaxPeriod
			}
			var r *ratelimit.Reservation
			if tier != nil {
				r, err = tier.Reserve(ctx, key, op.n, maxDelay)
			} else {
				r, err = lim.Reserve(ctx, key, op.n, maxDelay)
			}
			if err != nil && !errors.Is(err, ratelimit.ErrInvalidCost) {
				t.Fatalf("%s step %d: Reserve: %v", c.name, i, err)
			}
			// A cost above the burst is an error here, where x/time/rate
			// answers a reservation that is not OK.
			switch {
			case r.OK() != op.ok:
				failures = append(failures, fmt.Sprintf("step %d: Reserve(t%d, %d, %v).OK() = %v, want %v", i, op.at, op.n, maxDelay, r.OK(), op.ok))
			case op.ok && !r.TimeToAct().Equal(at(op.act)):
				failures = append(failures, fmt.Sprintf("step %d: Reserve(t%d, %d).TimeToAct() = t0+%v, want t%d", i, op.at, op.n, r.TimeToAct().Sub(t0), op.act))
			}
			if op.ref != 0 {
				res[op.ref] = r
			}
		case 'a':
			var peek, d ratelimit.Decision
			if tier != nil {
				peek, err = tier.Peek(ctx, key)
			} else {
				peek, err = lim.Peek(ctx, key)
			}
			if err != nil {
				t.Fatal(err)
			}
			if want := int(max(op.toks, 0)); peek.Remaining != want {
				failures = append(failures, fmt.Sprintf("step %d: tokens at t%d: Peek remaining %d, want %d (x/time/rate %v)", i, op.at, peek.Remaining, want, op.toks))
			}
			if tier != nil {
				d, err = tier.AllowN(ctx, key, op.n)
			} else {
				d, err = lim.AllowN(ctx, key, op.n)
			}
			if err != nil {
				t.Fatal(err)
			}
			if d.Allowed != op.ok {
				failures = append(failures, fmt.Sprintf("step %d: AllowN(t%d, %d) = %v, want %v", i, op.at, op.n, d.Allowed, op.ok))
			}
		case 'c':
			if err := res[op.ref].Cancel(ctx); err != nil {
				t.Fatalf("%s step %d: Cancel: %v", c.name, i, err)
			}
		case 'l', 'b':
			if op.op == 'l' {
				limit = int64(op.n)
			} else {
				burst = int64(op.n)
			}
			if tier, err = lim.Tier(newAlg(limit, burst)); err != nil {
				t.Fatal(err)
			}
		}
	}
	return failures
}

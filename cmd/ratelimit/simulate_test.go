package main

import (
	"fmt"
	"strings"
	"testing"
	"time"
)

// mustSimulate parses args as compare's flags and simulates them.
func mustSimulate(t *testing.T, args ...string) *result {
	t.Helper()
	cfg, err := parseCompareFlags(args)
	if err != nil {
		t.Fatalf("parseCompareFlags(%q): %v", args, err)
	}
	res, err := simulate(cfg)
	if err != nil {
		t.Fatalf("simulate(%q): %v", args, err)
	}
	return res
}

// laneNamed returns the lane of the named algorithm.
func laneNamed(t *testing.T, r *result, name string) *lane {
	t.Helper()
	for i := range r.lanes {
		if r.lanes[i].name == name {
			return &r.lanes[i]
		}
	}
	t.Fatalf("no lane %q", name)
	return nil
}

var laneOrder = []string{"fixed_window", "sliding_log", "sliding_window", "token_bucket", "gcra", "leaky_bucket"}

// TestSimulateCounts checks, for each pattern, how many requests each
// algorithm admits and the most that went ahead within one period. The
// comments derive the numbers from the algorithms' definitions.
func TestSimulateCounts(t *testing.T) {
	type counts struct{ admitted, peak int }
	cases := []struct {
		name string
		args []string
		want map[string]counts
		// delayed is how many requests the leaky bucket admitted with a
		// delay.
		delayed int
	}{
		{
			// 10 requests at 750ms..975ms and 10 at 1s..1.225s, 25ms apart.
			name: "boundary-burst: the fixed window passes 2×limit, the log never more than limit",
			args: []string{"-pattern", "boundary-burst"},
			want: map[string]counts{
				"fixed_window": {20, 20}, // a fresh window at 1s: all 20 within 475ms
				"sliding_log":  {10, 10}, // every later request is within 1s of the first ten
				// Previous window's 10, weighted by the time left in the
				// window, leaves room only at 1.025s, 1.125s and 1.225s.
				"sliding_window": {13, 13},
				// A full bucket of 10 plus 0.25 token per request: 2.25 left
				// after the first ten, then admitted at 1s, 1.025s, 1.05s and
				// 1.15s.
				"token_bucket": {14, 14},
				"gcra":         {14, 14},
				// Admits what the token bucket admits, but they proceed
				// 100ms apart: at most 10 in any second.
				"leaky_bucket": {14, 10},
			},
			delayed: 13,
		},
		{
			name: "steady at twice the rate: windows admit limit per period, buckets burst then refill",
			args: []string{"-pattern", "steady"}, // 60 requests, 50ms apart, from 0s
			want: map[string]counts{
				"fixed_window":   {30, 10}, // the first 10 of each window
				"sliding_log":    {30, 10},
				"sliding_window": {30, 10},
				// 10 from the full bucket, then 1 per 100ms of refill over
				// the 2.95s the traffic lasts: 29.
				"token_bucket": {39, 19},
				"gcra":         {39, 19},
				"leaky_bucket": {39, 10},
			},
			delayed: 38,
		},
		{
			name: "steady at exactly the rate: everything passes, but for the sliding window's estimate",
			args: []string{"-pattern", "steady", "-spacing", "100ms", "-n", "40"},
			want: map[string]counts{
				"fixed_window": {40, 10},
				"sliding_log":  {40, 10},
				// At the first instant of a window the previous window's
				// full count weighs in whole: floor(10 × (1s−0)/1s) = 10, so
				// the first request of the second and fourth window is
				// denied (the third follows a window of 9).
				"sliding_window": {38, 10},
				"token_bucket":   {40, 10},
				"gcra":           {40, 10},
				"leaky_bucket":   {40, 10},
			},
			delayed: 0,
		},
		{
			name: "burst: clumps of 2×limit, one per period",
			args: []string{"-pattern", "burst"}, // 3 clumps of 20, 10ms apart, at 0s, 1s, 2s
			want: map[string]counts{
				"fixed_window": {30, 10},
				"sliding_log":  {30, 10},
				// The second clump meets the first clump's 10 at nearly
				// full weight (floor(10 × 0.99) = 9, then 8) and gets 2; the
				// third follows a window of 2 and gets 9.
				"sliding_window": {21, 10},
				// 11 from the first clump (10 at once, one refilled in its
				// 190ms); the later ones find about 9 tokens and get 10.
				"token_bucket": {31, 11},
				"gcra":         {31, 11},
				"leaky_bucket": {31, 10},
			},
			delayed: 30,
		},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			r := mustSimulate(t, c.args...)
			for _, name := range laneOrder {
				l := laneNamed(t, r, name)
				got := counts{l.admitted, l.peak}
				if got != c.want[name] {
					t.Errorf("compare %s: %s admitted %d, max %d per period; want %d, %d",
						strings.Join(c.args, " "), name, l.admitted, l.peak, c.want[name].admitted, c.want[name].peak)
				}
			}
			if l := laneNamed(t, r, "leaky_bucket"); l.delayed != c.delayed {
				t.Errorf("compare %s: leaky_bucket delayed %d requests, want %d", strings.Join(c.args, " "), l.delayed, c.delayed)
			}
		})
	}
}

// TestSimulateProperties checks what must hold for any traffic: the
// sliding log never passes more than limit per period, the fixed window
// never more than twice that, GCRA decides as the token bucket does, the
// leaky bucket admits the same requests and releases them at most limit
// per period, one interval apart.
func TestSimulateProperties(t *testing.T) {
	var runs [][]string
	for _, pattern := range patterns {
		for _, limit := range []string{"1", "3", "10"} {
			for _, burst := range []string{"1", "5", "20"} {
				for seed := range 3 {
					runs = append(runs, []string{"-pattern", pattern, "-limit", limit, "-burst", burst,
						"-period", "700ms", "-n", "150", "-seed", fmt.Sprint(seed), "-start", fmt.Sprintf("%dms", 100*seed)})
				}
			}
		}
	}
	for _, args := range runs {
		r := mustSimulate(t, args...)
		desc := "compare " + strings.Join(args, " ")
		limit, burst := int(r.cfg.limit), int(r.cfg.burst)
		for _, l := range r.lanes {
			if l.admitted+l.denied != len(r.times) {
				t.Errorf("%s: %s admitted %d + denied %d != %d requests", desc, l.name, l.admitted, l.denied, len(r.times))
			}
		}
		if l := laneNamed(t, r, "sliding_log"); l.peak > limit {
			t.Errorf("%s: sliding_log passed %d within one period, above the limit %d", desc, l.peak, limit)
		}
		if l := laneNamed(t, r, "fixed_window"); l.peak > 2*limit {
			t.Errorf("%s: fixed_window passed %d within one period, above 2×limit %d", desc, l.peak, 2*limit)
		}
		token := laneNamed(t, r, "token_bucket")
		if token.peak > burst+limit {
			t.Errorf("%s: token_bucket passed %d within one period, above burst+limit %d", desc, token.peak, burst+limit)
		}
		if j := firstDifference(token, laneNamed(t, r, "gcra")); j >= 0 {
			t.Errorf("%s: request %d at +%v: gcra allowed=%v, token_bucket allowed=%v",
				desc, j+1, r.times[j], !token.outcomes[j].allowed, token.outcomes[j].allowed)
		}
		leaky := laneNamed(t, r, "leaky_bucket")
		if j := firstDifference(token, leaky); j >= 0 {
			t.Errorf("%s: request %d at +%v: leaky_bucket allowed=%v, token_bucket allowed=%v",
				desc, j+1, r.times[j], !token.outcomes[j].allowed, token.outcomes[j].allowed)
		}
		interval := r.cfg.period / time.Duration(limit)
		prev := time.Duration(-1)
		for j, o := range leaky.outcomes {
			if !o.allowed {
				if o.delay != 0 {
					t.Errorf("%s: request %d denied with delay %v", desc, j+1, o.delay)
				}
				continue
			}
			at := leaky.proceedAt(r.times, j)
			if prev >= 0 && at-prev < interval-time.Microsecond {
				t.Errorf("%s: leaky_bucket request %d proceeds at +%v, %v after the one before; want at least %v",
					desc, j+1, at, at-prev, interval)
			}
			prev = at
		}
	}
}

// TestSimulateDeterministic runs the same comparison twice.
func TestSimulateDeterministic(t *testing.T) {
	args := []string{"-pattern", "random", "-seed", "42", "-n", "200"}
	a, b := mustSimulate(t, args...), mustSimulate(t, args...)
	for i := range a.lanes {
		if j := firstDifference(&a.lanes[i], &b.lanes[i]); j >= 0 {
			t.Errorf("%s: request %d decided differently on a second run", a.lanes[i].name, j+1)
		}
	}
	if fmt.Sprint(a.times) != fmt.Sprint(b.times) {
		t.Errorf("random traffic with seed 42 differs between runs")
	}
}

// TestTraffic checks the request times each pattern generates.
func TestTraffic(t *testing.T) {
	ms := time.Millisecond
	cases := []struct {
		args []string
		want []time.Duration
	}{
		{[]string{"-pattern", "steady", "-n", "4", "-spacing", "300ms", "-start", "50ms"}, []time.Duration{50 * ms, 350 * ms, 650 * ms, 950 * ms}},
		{[]string{"-pattern", "burst", "-limit", "2", "-n", "6", "-spacing", "10ms"}, []time.Duration{0, 10 * ms, 20 * ms, 30 * ms, 1000 * ms, 1010 * ms}},
		// Half before the boundary at +1s, half from it on.
		{[]string{"-pattern", "boundary-burst", "-limit", "2", "-spacing", "100ms"}, []time.Duration{800 * ms, 900 * ms, 1000 * ms, 1100 * ms}},
		// More requests than fit before the first boundary: the timeline
		// starts a window earlier.
		{[]string{"-pattern", "boundary-burst", "-limit", "2", "-n", "6", "-spacing", "400ms"}, []time.Duration{800 * ms, 1200 * ms, 1600 * ms, 2000 * ms, 2400 * ms, 2800 * ms}},
		// Clumps that outlast the period overlap; requests stay in order.
		{[]string{"-pattern", "burst", "-limit", "1", "-n", "4", "-spacing", "700ms"}, []time.Duration{0, 700 * ms, 1000 * ms, 1700 * ms}},
		{[]string{"-pattern", "boundary-burst", "-limit", "2", "-spacing", "100ms", "-start", "10ms"}, []time.Duration{10 * ms, 110 * ms, 210 * ms, 310 * ms}},
	}
	for _, c := range cases {
		r := mustSimulate(t, c.args...)
		if fmt.Sprint(r.times) != fmt.Sprint(c.want) {
			t.Errorf("compare %s: requests at %v, want %v", strings.Join(c.args, " "), r.times, c.want)
		}
		if got := r.origin.UnixMicro() % r.cfg.period.Microseconds(); got != 0 {
			t.Errorf("compare %s: timeline origin %v is %dµs past a window boundary", strings.Join(c.args, " "), r.origin, got)
		}
	}
	r := mustSimulate(t, "-pattern", "random", "-n", "500", "-spacing", "20ms", "-seed", "3")
	span := r.times[len(r.times)-1] - r.times[0]
	if mean := span / time.Duration(len(r.times)-1); mean < 15*ms || mean > 25*ms {
		t.Errorf("random traffic with -spacing 20ms has a mean gap of %v", mean)
	}
}

func TestDensest(t *testing.T) {
	ms := time.Millisecond
	cases := []struct {
		times     []time.Duration
		most      int
		startsAt  time.Duration
		whatCheck string
	}{
		{nil, 0, 0, "no requests"},
		{[]time.Duration{0, 999 * ms, 1000 * ms}, 2, 0, "an interval is half-open: 0 and 1s are a period apart"},
		{[]time.Duration{0, 500 * ms, 1200 * ms, 1300 * ms, 1400 * ms}, 4, 500 * ms, "the densest interval starts at a request"},
	}
	for _, c := range cases {
		most, start := densest(append([]time.Duration(nil), c.times...), time.Second)
		if most != c.most || start != c.startsAt {
			t.Errorf("%s: densest(%v, 1s) = %d from %v, want %d from %v", c.whatCheck, c.times, most, start, c.most, c.startsAt)
		}
	}
}

package main

import (
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"time"

	"github.com/ratelimitkit/ratelimit"
	"github.com/ratelimitkit/ratelimit/algorithms"
	"github.com/ratelimitkit/ratelimit/algorithms/forms"
	"github.com/ratelimitkit/ratelimit/clock"
	"github.com/ratelimitkit/ratelimit/store/memory"
)

// epochBase is where simulated time begins: the first window boundary at
// or after it is the timeline's origin. Any fixed instant would do; a
// fixed one keeps the output the same on every run.
var epochBase = time.Date(2026, time.January, 1, 0, 0, 0, 0, time.UTC)

// simKey is the one user key every simulated request is made for.
const simKey = "client-1"

// outcome is what one algorithm decided for one request.
type outcome struct {
	allowed bool
	delay   time.Duration // leaky bucket: how long the admitted request waits
}

// lane is one algorithm's run through the traffic.
type lane struct {
	name     string // the algorithm's name, e.g. "fixed_window"
	spec     string // its parameters, e.g. "FixedWindow(limit=10, period=1s)"
	outcomes []outcome

	admitted, denied, delayed int
	// peak is the most requests that went ahead within any interval of one
	// period, [peakStart, peakStart+period). A request goes ahead when it
	// is admitted, or for the leaky bucket once its delay has passed.
	peak      int
	peakStart time.Duration
	meanDelay time.Duration // over admitted requests
	maxDelay  time.Duration
	note      string
}

// proceedAt is when request i of the traffic goes ahead in this lane.
func (l *lane) proceedAt(times []time.Duration, i int) time.Duration {
	return times[i] + l.outcomes[i].delay
}

// result is a whole comparison: the traffic and each algorithm's lane.
type result struct {
	cfg      config          // with the pattern's defaults filled in
	origin   time.Time       // a window boundary; times are offsets from it
	times    []time.Duration // when each request arrives, ascending
	traffic  string          // one line describing the traffic
	lanes    []lane
	boundary time.Duration // boundary-burst: the boundary the burst straddles
}

// newAlgorithms returns every built-in algorithm (forms.Builtins) with
// cfg's parameters, in the registry's order, which is the order they are
// shown: the window algorithms, then the token bucket with GCRA (its twin)
// beside it, then the leaky bucket, which shapes.
func newAlgorithms(cfg config) []algorithms.Algorithm {
	var algs []algorithms.Algorithm
	for _, b := range forms.Builtins() {
		algs = append(algs, b.New(cfg.limit, cfg.period, cfg.burst))
	}
	return algs
}

// simulate runs cfg's traffic through every algorithm. Errors are the
// limiter's own (invalid parameters) or describe traffic that cannot be
// simulated.
func simulate(cfg config) (*result, error) {
	algs := newAlgorithms(cfg)
	// Validate through the limiter first: the pattern's defaults divide
	// by the limit and the period.
	clocks := make([]*clock.Fake, len(algs))
	lims := make([]*ratelimit.Limiter, len(algs))
	for i, alg := range algs {
		clocks[i] = clock.NewFake(epochBase)
		lim, err := ratelimit.New(memory.MustNew(), alg, ratelimit.WithClock(clocks[i]), ratelimit.WithName("compare"))
		if err != nil {
			return nil, err
		}
		lims[i] = lim
	}

	res := &result{cfg: cfg}
	if err := res.makeTraffic(); err != nil {
		return nil, err
	}
	ctx := context.Background()
	for i, alg := range algs {
		l := lane{name: alg.Name(), spec: fmt.Sprint(alg), outcomes: make([]outcome, len(res.times))}
		for j, t := range res.times {
			clocks[i].Set(res.origin.Add(t))
			d, err := lims[i].Allow(ctx, simKey)
			if err != nil {
				return nil, fmt.Errorf("ratelimit compare: %s, request %d at +%v: %w", l.name, j+1, t, err)
			}
			l.outcomes[j] = outcome{allowed: d.Allowed, delay: d.Delay}
		}
		l.tally(res.times, cfg.period)
		res.lanes = append(res.lanes, l)
	}
	res.writeNotes()
	return res, nil
}

// makeTraffic fills in the pattern's defaults and computes when each
// request arrives.
func (r *result) makeTraffic() error {
	cfg := &r.cfg
	limit, period := cfg.limit, cfg.period.Microseconds()
	defN := func(k int64) {
		if !cfg.nSet {
			cfg.n = int(min(k*limit, maxRequests))
		}
	}
	defSpacing := func(perLimit int64) {
		if !cfg.spacingSet {
			cfg.spacing = max(time.Duration(period/(perLimit*limit)), 1) * time.Microsecond
		}
	}
	n, micro := 0, func(d time.Duration) int64 { return d.Microseconds() }
	us := []int64{}
	switch cfg.pattern {
	case "steady":
		defN(6)
		defSpacing(2)
		n = cfg.n
		for i := range int64(n) {
			us = append(us, micro(cfg.start)+i*micro(cfg.spacing))
		}
		r.traffic = fmt.Sprintf("steady: %s, one every %s", plural(n, "request"), fmtDur(cfg.spacing))
		if cfg.spacing == 0 {
			r.traffic = fmt.Sprintf("steady: %s, all at once", plural(n, "request"))
		}
	case "burst":
		defN(6)
		defSpacing(10)
		n = cfg.n
		clump := 2 * limit
		for i := range int64(n) {
			us = append(us, micro(cfg.start)+i/clump*period+i%clump*micro(cfg.spacing))
		}
		r.traffic = fmt.Sprintf("burst: %s in clumps of %d, %s apart, one clump per period", plural(n, "request"), clump, fmtDur(cfg.spacing))
	case "boundary-burst":
		defN(2)
		defSpacing(4)
		n = cfg.n
		half := int64(n / 2)
		first := period - half*micro(cfg.spacing) // half the requests before the boundary at +period
		if cfg.startSet {
			first = micro(cfg.start)
		}
		for i := range int64(n) {
			us = append(us, first+i*micro(cfg.spacing))
		}
		r.traffic = fmt.Sprintf("boundary-burst: %s, %s apart", plural(n, "request"), fmtDur(cfg.spacing))
	case "random":
		defN(6)
		defSpacing(2)
		n = cfg.n
		rng := rand.New(rand.NewPCG(cfg.seed, cfg.seed))
		t := micro(cfg.start)
		for range n {
			us = append(us, t)
			t += int64(rng.ExpFloat64() * float64(micro(cfg.spacing)))
		}
		r.traffic = fmt.Sprintf("random: %s, %s apart on average (seed %d)", plural(n, "request"), fmtDur(cfg.spacing), cfg.seed)
	default:
		return fmt.Errorf("ratelimit compare: unknown pattern %q", cfg.pattern)
	}

	// Clumps longer than a period overlap the next clump.
	slices.Sort(us)

	// Start the timeline at a window boundary: the first at or after
	// epochBase, moved back by whole periods if a request comes earlier.
	base := epochBase.UnixMicro()
	origin := base + (period-base%period)%period
	shift := int64(0)
	if us[0] < 0 {
		shift = (-us[0] + period - 1) / period * period
		for i := range us {
			us[i] += shift
		}
	}
	if cfg.pattern == "boundary-burst" && !cfg.startSet {
		r.boundary = time.Duration(period+shift) * time.Microsecond
		half := len(us) / 2
		r.traffic += fmt.Sprintf(", %d just before the window boundary at +%s and %d just after", half, fmtDur(r.boundary), len(us)-half)
	}
	if last := us[len(us)-1]; last > algorithms.MaxExact/2-origin {
		return fmt.Errorf("ratelimit compare: %d requests %v apart run past what the clock can hold; use a shorter -spacing or a smaller -n", n, cfg.spacing)
	}
	r.origin = time.UnixMicro(origin).UTC()
	r.times = make([]time.Duration, len(us))
	for i, u := range us {
		r.times[i] = time.Duration(u) * time.Microsecond
	}
	return nil
}

// tally counts l's outcomes and finds its densest period.
func (l *lane) tally(times []time.Duration, period time.Duration) {
	var ahead []time.Duration
	var totalDelay time.Duration
	for i, o := range l.outcomes {
		if !o.allowed {
			l.denied++
			continue
		}
		l.admitted++
		if o.delay > 0 {
			l.delayed++
		}
		totalDelay += o.delay
		l.maxDelay = max(l.maxDelay, o.delay)
		ahead = append(ahead, l.proceedAt(times, i))
	}
	if l.admitted > 0 {
		l.meanDelay = totalDelay / time.Duration(l.admitted)
	}
	l.peak, l.peakStart = densest(ahead, period)
}

// densest returns the most instants of ts within any interval of length
// period, and the start of the first such interval, [start, start+period),
// which begins at one of the instants. It sorts ts.
func densest(ts []time.Duration, period time.Duration) (most int, start time.Duration) {
	slices.Sort(ts)
	i := 0
	for j, t := range ts {
		for ts[i] <= t-period {
			i++
		}
		if j-i+1 > most {
			most, start = j-i+1, ts[i]
		}
	}
	return most, start
}

// writeNotes gives each lane a one-line note on what it showed.
func (r *result) writeNotes() {
	limit := int(r.cfg.limit)
	var token *lane
	for i := range r.lanes {
		l := &r.lanes[i]
		switch l.name {
		case "fixed_window":
			if l.peak > limit {
				l.note = fmt.Sprintf("%d went ahead within one period: the boundary burst", l.peak)
			} else {
				l.note = "counts per aligned window; can pass 2×limit across a boundary"
			}
		case "sliding_log":
			if l.peak > limit {
				l.note = fmt.Sprintf("UNEXPECTED: %d within one period, above the limit", l.peak)
			} else {
				l.note = "exact: never more than limit in any period; keeps every request"
			}
		case "sliding_window":
			if l.peak > limit {
				l.note = fmt.Sprintf("estimate let %d through within one period", l.peak)
			} else {
				l.note = "weighted two-window estimate of the log; 3 integers of state"
			}
		case "token_bucket":
			token = l
			l.note = fmt.Sprintf("a full bucket of %d at once, then %d refilled per %s: up to %d within one period",
				r.cfg.burst, limit, fmtDur(r.cfg.period), r.cfg.burst+r.cfg.limit)
		case "gcra":
			l.note = "same decisions as token_bucket, kept as one timestamp"
			if j := firstDifference(token, l); j >= 0 {
				l.note = fmt.Sprintf("UNEXPECTED: differs from token_bucket at request %d", j+1)
			}
		case "leaky_bucket":
			interval := time.Duration(int64(r.cfg.period) / r.cfg.limit)
			l.note = fmt.Sprintf("shapes: queues up to %d, releases one every %s; %d waited", r.cfg.burst, fmtDur(interval), l.delayed)
		}
	}
}

// firstDifference returns the index of the first request a and b decided
// differently, or -1 when they agree on all (or a is nil).
func firstDifference(a, b *lane) int {
	if a == nil {
		return -1
	}
	for j := range b.outcomes {
		if a.outcomes[j].allowed != b.outcomes[j].allowed {
			return j
		}
	}
	return -1
}

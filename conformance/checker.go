package conformance

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"pgregory.net/rapid"

	"github.com/ratelimitkit/ratelimit"
	"github.com/ratelimitkit/ratelimit/algorithms"
	"github.com/ratelimitkit/ratelimit/algorithms/forms"
	"github.com/ratelimitkit/ratelimit/clock"
	"github.com/ratelimitkit/ratelimit/store"
	"github.com/ratelimitkit/ratelimit/store/memory"
)

// Call is a kind of call a trace makes.
type Call int

// The calls of a trace.
const (
	CallAllow      Call = iota // Limiter.AllowN
	CallReserve                // Limiter.Reserve with the step's MaxDelay
	CallCancel                 // Reservation.Cancel of an earlier Reserve
	CallWait                   // Limiter.WaitN, the fake clocks moved until it returns
	CallPeek                   // Limiter.Peek
	CallReset                  // Limiter.Reset
	CallConcurrent             // Step.Callers goroutines' AllowN at once
	// CallRebuild builds every instance's limiter again, with Step.Alg
	// (same name, store and options), as a deployment that changes the
	// algorithm, adding a part to a multi-limit, say: the model is then
	// Step.Alg's (ModelOf), over everything admitted before too. Check
	// does not draw it; regression traces use it.
	CallRebuild
)

var callNames = [...]string{"Allow", "Reserve", "Cancel", "Wait", "Peek", "Reset", "Concurrent", "Rebuild"}

func (c Call) String() string {
	if c >= 0 && int(c) < len(callNames) {
		return callNames[c]
	}
	return "Call(" + strconv.Itoa(int(c)) + ")"
}

// ClockMode is how the instances' clocks read in a trace.
type ClockMode int

// The clock modes of a trace.
const (
	// ClockMonotonic: every instance reads the same clock, which only
	// moves forward.
	ClockMonotonic ClockMode = iota
	// ClockSkewed: the second instance's clock is Trace.Skew off the
	// first's, as two machines' clocks disagree.
	ClockSkewed
	// ClockOutOfOrder: a step's reading may be Step.Back older than the
	// clock, as a reading taken before a wait on a lock or a queue and
	// delivered after newer ones.
	ClockOutOfOrder
)

// Trace is one sequence of calls on one key, the unit Check draws, checks
// against the algorithm's Model, and shrinks when it fails. A failing
// trace is reported as a Go literal, which CheckTrace replays: keep it as
// a regression case.
type Trace struct {
	// Alg is the algorithm of every instance's limiter.
	Alg algorithms.Algorithm
	// Model is Alg's promise; nil means ModelOf(Alg).
	Model Model
	// Options names the OptionSet (in CheckConfig.Options, or
	// DefaultOptionSets) every instance's limiter is built with.
	Options string
	// Instances is how many limiters (processes) share the key: 1, or 2
	// on the harness's Store and Twin.
	Instances int
	// Skew is the second instance's clock minus the first's.
	Skew time.Duration
	// Steps are the calls, in order.
	Steps []Step
}

// Step is one call of a trace.
type Step struct {
	// Advance moves the clocks forward before the call.
	Advance time.Duration
	// Call is what is called, on Instance's limiter (or its tier).
	Call     Call
	Instance int
	// Cost is the call's n (Allow, Reserve, Wait, Concurrent).
	Cost int
	// MaxDelay is Reserve's.
	MaxDelay time.Duration
	// Back makes this call's clock reading older than the clock by Back.
	Back time.Duration
	// Reservation is which earlier admitted reservation Cancel cancels
	// (counted from 0, modulo how many there are).
	Reservation int
	// Callers is how many goroutines CallConcurrent runs (each one AllowN
	// of Cost, spread over the instances).
	Callers int
	// Tick is how far the clocks move at a time while a Wait waits, or
	// while Concurrent's goroutines run.
	Tick time.Duration
	// Alg is Rebuild's new algorithm.
	Alg algorithms.Algorithm
}

// OptionSet is a named set of ratelimit options that Check builds each
// instance's limiter with, and what the model must know about them.
type OptionSet struct {
	Name string
	// Options returns the options for one instance's limiter of alg (it
	// is called once per instance). Nil means none.
	Options func(alg algorithms.Algorithm) []ratelimit.Option
	// LocalQuota is the WithLocalQuota the options include, if any: the
	// model then allows its documented slack (WithLocalQuota's doc).
	LocalQuota *LocalQuota
	// Tier, when set, returns the numbers the calls are made at (through
	// Limiter.Tier), and false for an algorithm it has no tier for.
	Tier func(alg algorithms.Algorithm) (algorithms.Algorithm, bool)
	// DenyCache says the options include WithDenyCache: a process's
	// cached denial stands until its RetryAfter whatever another process
	// gives back (WithDenyCache's doc), so the model does not count on
	// another instance's Cancel.
	DenyCache bool
}

// LocalQuota is the numbers of a WithLocalQuota option.
type LocalQuota struct {
	MaxShare int
	Lifetime time.Duration
}

// DefaultOptionSets returns the option sets Check draws from by default:
// none, local quota (small and large shares), the deny cache, the
// fallback, a tier at other numbers, shadow mode, and the pairs the issue
// that added the checker found defects between.
func DefaultOptionSets() []OptionSet {
	small := &LocalQuota{4, 50 * time.Millisecond}
	large := &LocalQuota{1000, 100 * time.Millisecond}
	lq := func(q *LocalQuota, more ...ratelimit.Option) func(algorithms.Algorithm) []ratelimit.Option {
		return func(algorithms.Algorithm) []ratelimit.Option {
			return append([]ratelimit.Option{ratelimit.WithLocalQuota(q.MaxShare, q.Lifetime)}, more...)
		}
	}
	fallback := func(algorithms.Algorithm) []ratelimit.Option {
		st, err := memory.New()
		if err != nil {
			panic(err)
		}
		return []ratelimit.Option{ratelimit.WithFallback(st, 2)}
	}
	return []OptionSet{
		{Name: "none"},
		{Name: "local-quota", Options: lq(small), LocalQuota: small},
		{Name: "local-quota-large", Options: lq(large), LocalQuota: large},
		{Name: "deny-cache", DenyCache: true, Options: func(algorithms.Algorithm) []ratelimit.Option {
			return []ratelimit.Option{ratelimit.WithDenyCache(100)}
		}},
		{Name: "fallback", Options: fallback},
		{Name: "tier", Tier: otherNumbers},
		{Name: "shadow", Options: func(algorithms.Algorithm) []ratelimit.Option {
			return []ratelimit.Option{ratelimit.WithShadow()}
		}},
		{Name: "tier+deny-cache", Tier: otherNumbers, DenyCache: true, Options: func(algorithms.Algorithm) []ratelimit.Option {
			return []ratelimit.Option{ratelimit.WithDenyCache(100)}
		}},
		{Name: "local-quota+deny-cache", Options: lq(small, ratelimit.WithDenyCache(100)), LocalQuota: small, DenyCache: true},
	}
}

// otherNumbers is a built-in algorithm with twice its limit and burst, the
// tier the "tier" option sets decide at.
func otherNumbers(alg algorithms.Algorithm) (algorithms.Algorithm, bool) {
	b := forms.BuiltinOf(alg)
	ps, ok := alg.(algorithms.PolicyStater)
	if b == nil || !ok {
		return nil, false
	}
	p := ps.Policy()
	return b.New(2*p.Limit, p.Period, 2*p.Burst), true
}

// CheckAlgorithm is a user's algorithm for Check, with its promise.
type CheckAlgorithm struct {
	Alg   algorithms.Algorithm
	Model Model
}

// CheckConfig says what Check draws traces from. Its zero value draws from
// everything: the six built-in algorithms with random numbers, composites
// of two of them, DefaultOptionSets, every Call and ClockMode, one or two
// instances (two when the harness has a Twin), one caller or 32.
type CheckConfig struct {
	// Options are the option sets to draw from; nil means
	// DefaultOptionSets.
	Options []OptionSet
	// Algorithms are users' algorithms to draw from besides the
	// built-ins (only with option sets whose options accept them).
	Algorithms []CheckAlgorithm
	// NoBuiltins leaves the built-in algorithms and composites out.
	NoBuiltins bool
	// Calls and Clocks are the calls and clock modes to draw from; nil
	// means all.
	Calls  []Call
	Clocks []ClockMode
	// Traces is how many traces to check; 0 means CheckTraces().
	Traces int
	// MaxSteps bounds a trace's length (default 30).
	MaxSteps int
}

// CheckTraces is how many traces Check checks by default: the value of the
// environment variable RATELIMIT_CHECKS, or else 100 (one to three seconds
// on a server store; docs/checker.md has the figures). -rapid.checks,
// when given, wins.
func CheckTraces() int {
	if n, err := strconv.Atoi(os.Getenv("RATELIMIT_CHECKS")); err == nil && n > 0 {
		return n
	}
	return 100
}

// Check draws traces over algorithms × option sets × calls × instances ×
// callers × clocks, runs each on a fresh key of stores made by newHarness
// (one harness for the whole check; its Twin, when set, is the second
// instance), and checks every outcome against the algorithm's Model: never
// more than Most over any span, with Cancel never giving back more than it
// took; no denial where Least says the request fits; and Wait and Reserve
// at least as generous as the model. rapid (pgregory.net/rapid) shrinks a
// failing trace to a short one, which the failure prints as readable
// steps and as a Trace literal for CheckTrace.
//
// The number of traces is cfg.Traces, or CheckTraces (RATELIMIT_CHECKS);
// rapid's own flags (-rapid.checks, -rapid.seed, -rapid.shrinktime) apply.
// For a harness that sets RealTimeExpiry, the fake clocks never run slower
// than the real one (each move is at least the real time since the last),
// so that live state never expires on the backend's clock.
//
// Check sets rapid's package-level flags (how many traces, no fail file, a
// 20s shrink) unless the command line gave them: do not run it in
// parallel subtests.
func Check(t *testing.T, newHarness func(t *testing.T) Harness, cfg CheckConfig) {
	t.Helper()
	h := newHarness(t)
	setRapidFlags(cfg.traces())
	var twin store.Store
	if h.Twin != nil {
		twin = h.Twin(t)
	}
	sets := cfg.options()
	var n atomic.Int64
	rapid.Check(t, func(rt *rapid.T) {
		tr := cfg.draw(rt, sets, twin != nil)
		name := fmt.Sprintf("check-%d-%d", time.Now().UnixNano()%1e9, n.Add(1))
		if msg := runTrace(t, h.Store, twin, h.RealTimeExpiry, h.Staleness, sets, tr, name); msg != "" {
			rt.Fatal(msg)
		}
	})
}

// CheckTrace runs one trace, as Check would, and fails t when it breaks
// the model: for regression cases, such as a trace Check reported.
func CheckTrace(t *testing.T, newHarness func(t *testing.T) Harness, cfg CheckConfig, tr Trace) {
	t.Helper()
	h := newHarness(t)
	var twin store.Store
	if h.Twin != nil {
		twin = h.Twin(t)
	}
	if tr.Instances > 1 && twin == nil {
		t.Skip("the trace runs two instances and the harness has no Twin")
	}
	if msg := runTrace(t, h.Store, twin, h.RealTimeExpiry, h.Staleness, cfg.options(), tr, fmt.Sprintf("replay-%d", time.Now().UnixNano()%1e9)); msg != "" {
		t.Fatal(msg)
	}
}

// setRapidFlags makes rapid check n traces, write no fail file (the
// failure prints the trace) and shrink for at most 20s, unless its flags
// were given.
func setRapidFlags(n int) {
	givenOnce.Do(func() {
		flag.Visit(func(f *flag.Flag) { given[f.Name] = true })
	})
	for name, v := range map[string]string{"rapid.checks": strconv.Itoa(n), "rapid.nofailfile": "true", "rapid.shrinktime": "20s"} {
		if !given[name] && flag.Lookup(name) != nil {
			_ = flag.Set(name, v)
		}
	}
}

// given holds the flags set on the command line, read before Check sets
// any (flag.Visit cannot tell the two apart afterwards).
var (
	given     = map[string]bool{}
	givenOnce sync.Once
)

func (cfg CheckConfig) traces() int {
	if cfg.Traces > 0 {
		return cfg.Traces
	}
	return CheckTraces()
}

func (cfg CheckConfig) options() []OptionSet {
	if cfg.Options == nil {
		return DefaultOptionSets()
	}
	return cfg.Options
}

// drawAlgorithm draws a built-in with small numbers.
func drawBuiltin(rt *rapid.T, label string) algorithms.Algorithm {
	bs := forms.Builtins()
	b := bs[rapid.IntRange(0, len(bs)-1).Draw(rt, label+"-kind")]
	period := rapid.SampledFrom([]time.Duration{100 * time.Millisecond, 250 * time.Millisecond, time.Second, 2 * time.Second}).Draw(rt, label+"-period")
	limit := rapid.SampledFrom([]int64{1, 2, 3, 5, 10, 20, 50}).Draw(rt, label+"-limit")
	burst := rapid.SampledFrom([]int64{1, 2, 5, 10, 20, 50}).Draw(rt, label+"-burst")
	return b.New(limit, period, burst)
}

// draw draws a trace.
func (cfg CheckConfig) draw(rt *rapid.T, sets []OptionSet, twin bool) Trace {
	var tr Trace
	nUser := len(cfg.Algorithms)
	choice := 0
	if !cfg.NoBuiltins {
		choice = rapid.IntRange(0, 2+nUser).Draw(rt, "algorithm") // 0,1: built-in, 2: composite
	} else if nUser > 0 {
		choice = 3 + rapid.IntRange(0, nUser-1).Draw(rt, "algorithm")
	} else {
		rt.Fatal("CheckConfig: NoBuiltins and no Algorithms: nothing to check")
	}
	switch {
	case choice < 2:
		tr.Alg = drawBuiltin(rt, "alg")
	case choice == 2:
		tr.Alg = algorithms.All(algorithms.Named("first", drawBuiltin(rt, "part1")), algorithms.Named("second", drawBuiltin(rt, "part2")))
	default:
		a := cfg.Algorithms[choice-3]
		tr.Alg, tr.Model = a.Alg, a.Model
	}
	tr.Options = sets[rapid.IntRange(0, len(sets)-1).Draw(rt, "options")].Name
	tr.Instances = 1
	if twin && rapid.Bool().Draw(rt, "two-instances") {
		tr.Instances = 2
	}
	calls := cfg.Calls
	if calls == nil {
		calls = []Call{CallAllow, CallAllow, CallAllow, CallReserve, CallCancel, CallWait, CallPeek, CallReset, CallConcurrent}
	}
	clocks := cfg.Clocks
	if clocks == nil {
		clocks = []ClockMode{ClockMonotonic, ClockSkewed, ClockOutOfOrder}
	}
	mode := rapid.SampledFrom(clocks).Draw(rt, "clock")
	period, maxCost := periodOf(tr.Alg), tr.Alg.MaxCost()
	if mode == ClockSkewed && tr.Instances == 2 {
		tr.Skew = time.Duration(rapid.Int64Range(-int64(period), int64(period)).Draw(rt, "skew")) / time.Millisecond * time.Millisecond
	}
	steps := cfg.MaxSteps
	if steps <= 0 {
		steps = 30
	}
	tr.Steps = rapid.SliceOfN(rapid.Custom(func(rt *rapid.T) Step {
		st := Step{Call: rapid.SampledFrom(calls).Draw(rt, "call")}
		switch rapid.IntRange(0, 3).Draw(rt, "advance-kind") {
		case 0:
		case 1, 2:
			st.Advance = time.Duration(rapid.Int64Range(0, int64(period)/4).Draw(rt, "advance")) / time.Millisecond * time.Millisecond
		default:
			st.Advance = time.Duration(rapid.Int64Range(0, 2*int64(period)).Draw(rt, "advance")) / time.Millisecond * time.Millisecond
		}
		if tr.Instances == 2 {
			st.Instance = rapid.IntRange(0, 1).Draw(rt, "instance")
		}
		st.Cost = int(rapid.Int64Range(1, min(maxCost, 3)).Draw(rt, "cost"))
		if mode == ClockOutOfOrder && st.Call != CallConcurrent && st.Call != CallWait && rapid.IntRange(0, 2).Draw(rt, "late") == 0 {
			st.Back = time.Duration(rapid.Int64Range(1, int64(2*period)).Draw(rt, "back")) / time.Millisecond * time.Millisecond
		}
		switch st.Call {
		case CallReserve:
			st.MaxDelay = time.Duration(rapid.Int64Range(0, 4*int64(period)).Draw(rt, "max-delay")) / time.Millisecond * time.Millisecond
		case CallCancel:
			st.Reservation = rapid.IntRange(0, 7).Draw(rt, "reservation")
		case CallWait:
			st.Tick = time.Duration(rapid.Int64Range(max(int64(period)/40, int64(time.Millisecond)), max(int64(period)/4, int64(time.Millisecond))).Draw(rt, "tick")) / time.Millisecond * time.Millisecond
		case CallConcurrent:
			st.Callers = rapid.SampledFrom([]int{32}).Draw(rt, "callers")
			st.Tick = time.Duration(rapid.Int64Range(0, max(int64(period)/100, int64(time.Millisecond))).Draw(rt, "tick")) / time.Millisecond * time.Millisecond
		}
		return st
	}), 1, steps).Draw(rt, "steps")
	return tr
}

// periodOf is alg's period (a composite's longest), or a second.
func periodOf(alg algorithms.Algorithm) time.Duration {
	if c, ok := alg.(algorithms.Composite); ok {
		var p time.Duration
		for _, part := range c.Parts() {
			p = max(p, periodOf(part))
		}
		return p
	}
	if ps, ok := alg.(algorithms.PolicyStater); ok {
		if p := ps.Policy().Period; p > 0 {
			return min(p, time.Hour)
		}
	}
	return time.Second
}

// windowOf is the time alg takes to refill its burst (Policy.Window; a
// composite's longest), or a second.
func windowOf(alg algorithms.Algorithm) time.Duration {
	if c, ok := alg.(algorithms.Composite); ok {
		var w time.Duration
		for _, part := range c.Parts() {
			w = max(w, windowOf(part))
		}
		return w
	}
	if ps, ok := alg.(algorithms.PolicyStater); ok {
		if w := ps.Policy().Window; w > 0 {
			return min(w, time.Hour)
		}
	}
	return time.Second
}

// caller is what a trace calls on an instance: its limiter or its tier.
type caller interface {
	AllowN(ctx context.Context, key string, n int) (ratelimit.Decision, error)
	Peek(ctx context.Context, key string) (ratelimit.Decision, error)
	Reserve(ctx context.Context, key string, n int, maxDelay time.Duration) (*ratelimit.Reservation, error)
	WaitN(ctx context.Context, key string, n int) (ratelimit.Decision, error)
}

// event is an admitted request as the model sees it: the times it was
// admitted at and acts at, each known to lie within an interval (µs on
// the store's clock).
type event struct {
	dlo, dhi  int64 // admitted
	lo, hi    int64 // acts
	cost      int64
	cancelled bool
	// refunded: cancelled where the model guarantees the whole cost back
	// (refundsAll), so the lower bound no longer counts it.
	refunded bool
	step     int
}

// reservation is an admitted Reserve of the trace.
type reservation struct {
	r    *ratelimit.Reservation
	inst int
	ev   int // index in run.events, -1 after a Reset
	step int
}

// run is a trace being run.
type run struct {
	tr      Trace
	set     OptionSet
	m       Model
	key     string
	clocks  []*clock.Fake
	lims    []*ratelimit.Limiter
	callers []caller
	skews   []int64 // µs
	base    int64   // µs: the epoch
	now     atomic.Int64
	eff     int64 // the newest reading delivered so far
	events  []event
	resv    []reservation
	lines   []string
	// waitRun is where the current run of back-to-back Waits began
	// (-1: none), and its largest tick.
	waitFrom, waitTick int64
	waitTickUsed       int64 // the largest tick the current Wait saw
	waitFirstEnd       int64 // when the run's first Wait returned
	waitUnits          int64 // what the run's later Waits were admitted
	waitClean          bool  // nothing admitted before the run acts within it
	stores             []store.Store
	name               string
	// realTime: the store expires keys by the real clock
	// (Harness.RealTimeExpiry), so the fake clocks never run slower
	// than it: each move is at least the real time since the last.
	realTime bool
	lastReal time.Time
	lq       *LocalQuota
	share    int64 // the largest share local quota takes
	// stale is Harness.Staleness in µs, and gave the times (on r.now) and
	// instances of the trace's Resets and Cancels.
	stale int64
	gave  []gift
}

// gift is a Reset or Cancel: what another instance may see late.
type gift struct {
	inst int
	at   int64
}

// late reports whether a denial by inst at now (on r.now, less the
// reading's age) may stand on what inst saw before another instance's
// Reset or Cancel (Harness.Staleness).
func (r *run) late(inst int, now int64) bool {
	for _, g := range r.gave {
		if g.inst != inst && now-g.at < r.stale {
			return true
		}
	}
	return false
}

const ctxTimeout = 30 * time.Second

// runTrace runs tr on st (and twin) under names unique to it, and returns
// the first breach of the model, with the trace, or "".
func runTrace(t *testing.T, st, twin store.Store, realTime bool, stale time.Duration, sets []OptionSet, tr Trace, name string) string {
	r := &run{tr: tr, key: "k", base: epoch.UnixMicro(), waitFrom: -1, realTime: realTime, lastReal: time.Now(), stale: int64(stale / time.Microsecond)}
	for _, s := range sets {
		if s.Name == tr.Options {
			r.set = s
		}
	}
	if r.set.Name == "" {
		return fmt.Sprintf("trace names option set %q, which the config does not have", tr.Options)
	}
	r.m = tr.Model
	if r.m == nil {
		m, ok := ModelOf(tr.Alg)
		if !ok {
			return fmt.Sprintf("no model for %v: pass it in CheckAlgorithm", tr.Alg)
		}
		r.m = m
	}
	alg := tr.Alg
	var tierAlg algorithms.Algorithm
	if r.set.Tier != nil {
		var ok bool
		if tierAlg, ok = r.set.Tier(alg); !ok {
			return "" // no tier for this algorithm: nothing to check
		}
		m, ok := ModelOf(tierAlg)
		if !ok {
			return ""
		}
		r.m = m
	}
	n := max(tr.Instances, 1)
	r.lq = r.set.LocalQuota
	if r.lq != nil {
		a := alg
		if tierAlg != nil {
			a = tierAlg
		}
		r.share = max(min(int64(r.lq.MaxShare), a.MaxCost()/4), 1)
		for _, s := range tr.Steps {
			r.share = max(r.share, int64(s.Cost))
		}
	}
	r.stores, r.name = []store.Store{st, twin}[:n], name
	for i := 0; i < n; i++ {
		var skew int64
		if i == 1 {
			skew = int64(tr.Skew / time.Microsecond)
		}
		r.clocks, r.skews = append(r.clocks, clock.NewFake(time.UnixMicro(r.base+skew))), append(r.skews, skew)
	}
	defer func() {
		for _, l := range r.lims {
			l.Close(context.Background())
		}
	}()
	if msg, ok := r.build(alg, tierAlg); !ok {
		return msg
	}
	for i, s := range tr.Steps {
		if msg := r.step(i, s); msg != "" {
			return r.report(msg)
		}
	}
	if msg := r.checkMost(); msg != "" {
		return r.report(msg)
	}
	if os.Getenv("RATELIMIT_CHECKER_TRACE") != "" {
		t.Log(r.report("passed"))
	}
	return ""
}

// build makes every instance's limiter of alg (and its tier of tierAlg),
// closing those it replaces. It returns false, with what went wrong or ""
// for a combination the options refuse, when there is nothing to check.
func (r *run) build(alg, tierAlg algorithms.Algorithm) (string, bool) {
	for _, l := range r.lims {
		l.Close(context.Background())
	}
	r.lims, r.callers = nil, nil
	for i, s := range r.stores {
		opts := []ratelimit.Option{ratelimit.WithClock(r.clocks[i]), ratelimit.WithName(r.name)}
		if r.set.Options != nil {
			opts = append(opts, r.set.Options(alg)...)
		}
		lim, err := ratelimit.New(s, alg, opts...)
		if err != nil {
			if errors.Is(err, ratelimit.ErrInvalidParams) {
				return "", false // a combination the options refuse, as documented
			}
			return fmt.Sprintf("ratelimit.New(%v) with options %s: %v", alg, r.tr.Options, err), false
		}
		r.lims = append(r.lims, lim)
		var cl caller = lim
		if tierAlg != nil {
			tier, err := lim.Tier(tierAlg)
			if err != nil {
				return "", false // no tier at these numbers (a composite's, say)
			}
			cl = tier
		}
		r.callers = append(r.callers, cl)
	}
	return "", true
}

// catchUp returns the real time since it was last called, in µs, for a
// store that expires by the real clock, and 0 for any other.
func (r *run) catchUp() int64 {
	if !r.realTime {
		return 0
	}
	now := time.Now()
	d := now.Sub(r.lastReal)
	r.lastReal = now
	return int64(d / time.Microsecond)
}

// report is msg with the trace.
func (r *run) report(msg string) string {
	var b strings.Builder
	fmt.Fprintf(&b, "%s\n\ntrace: %v, options %s, %d instance(s)", msg, r.tr.Alg, r.tr.Options, max(r.tr.Instances, 1))
	if r.tr.Skew != 0 {
		fmt.Fprintf(&b, ", instance 1's clock %v off", r.tr.Skew)
	}
	b.WriteString(", every call on one key:\n")
	for _, l := range r.lines {
		b.WriteString("  " + l + "\n")
	}
	fmt.Fprintf(&b, "as a regression case: conformance.CheckTrace(t, newHarness, cfg, %s)", r.tr.GoString())
	return b.String()
}

// GoString returns tr as a Go literal (its algorithm by its String).
func (tr Trace) GoString() string {
	var b strings.Builder
	fmt.Fprintf(&b, "conformance.Trace{Alg: %s, Options: %q, Instances: %d", goAlg(tr.Alg), tr.Options, tr.Instances)
	if tr.Skew != 0 {
		fmt.Fprintf(&b, ", Skew: %s", goDur(tr.Skew))
	}
	b.WriteString(", Steps: []conformance.Step{")
	for i, s := range tr.Steps {
		if i > 0 {
			b.WriteString(", ")
		}
		fmt.Fprintf(&b, "{Call: conformance.Call%s", s.Call)
		for _, f := range []struct {
			name string
			v    int64
			dur  bool
		}{{"Advance", int64(s.Advance), true}, {"Instance", int64(s.Instance), false}, {"Cost", int64(s.Cost), false}, {"MaxDelay", int64(s.MaxDelay), true},
			{"Back", int64(s.Back), true}, {"Reservation", int64(s.Reservation), false}, {"Callers", int64(s.Callers), false}, {"Tick", int64(s.Tick), true}} {
			switch {
			case f.v == 0:
			case f.dur:
				fmt.Fprintf(&b, ", %s: %s", f.name, goDur(time.Duration(f.v)))
			default:
				fmt.Fprintf(&b, ", %s: %d", f.name, f.v)
			}
		}
		if s.Alg != nil {
			fmt.Fprintf(&b, ", Alg: %s", goAlg(s.Alg))
		}
		b.WriteString("}")
	}
	b.WriteString("}}")
	return b.String()
}

// goAlg is alg as Go source, for a built-in or a composite of built-ins.
func goAlg(alg algorithms.Algorithm) string {
	if c, ok := alg.(algorithms.Composite); ok {
		var ps []string
		names := c.PartNames()
		for i, p := range c.Parts() {
			ps = append(ps, fmt.Sprintf("algorithms.Named(%q, %s)", names[i], goAlg(p)))
		}
		return "algorithms.All(" + strings.Join(ps, ", ") + ")"
	}
	b := forms.BuiltinOf(alg)
	ps, ok := alg.(algorithms.PolicyStater)
	if b == nil || !ok {
		return fmt.Sprintf("/* %v */ nil", alg)
	}
	p := ps.Policy()
	ctor := map[string]string{"fixed_window": "FixedWindow", "sliding_log": "SlidingLog", "sliding_window": "SlidingWindow",
		"token_bucket": "TokenBucket", "leaky_bucket": "LeakyBucket", "gcra": "GCRA"}[b.Name]
	if p.Burst == p.Limit && (b.Name == "fixed_window" || b.Name == "sliding_log" || b.Name == "sliding_window") {
		return fmt.Sprintf("algorithms.%s(%d, %s)", ctor, p.Limit, goDur(p.Period))
	}
	return fmt.Sprintf("algorithms.%s(%d, %s, %d)", ctor, p.Limit, goDur(p.Period), p.Burst)
}

// goDur is d as Go source.
func goDur(d time.Duration) string {
	for _, u := range []struct {
		d    time.Duration
		name string
	}{{time.Hour, "time.Hour"}, {time.Second, "time.Second"}, {time.Millisecond, "time.Millisecond"}, {time.Microsecond, "time.Microsecond"}} {
		if d%u.d == 0 {
			if d == u.d {
				return u.name
			}
			return fmt.Sprintf("%d*%s", d/u.d, u.name)
		}
	}
	return strconv.FormatInt(int64(d), 10)
}

// at formats a time on the store's clock as an offset from the epoch.
func (r *run) at(us int64) string {
	if us < r.base {
		return "t−" + (time.Duration(r.base-us) * time.Microsecond).String()
	}
	return "t+" + (time.Duration(us-r.base) * time.Microsecond).String()
}

// set moves every instance's clock to the trace's time now (µs from the
// epoch), instance i's reading back µs older.
func (r *run) setClocks(now int64, inst int, back int64) {
	r.now.Store(now)
	for i, c := range r.clocks {
		b := int64(0)
		if i == inst {
			b = back
		}
		c.Set(time.UnixMicro(r.base + now + r.skews[i] - b))
	}
}

func (r *run) reading(inst int, back int64) int64 {
	return r.base + r.now.Load() + r.skews[inst] - back
}

func (r *run) maxSkew() int64 {
	m := int64(0)
	for _, s := range r.skews {
		m = max(m, s)
	}
	return m
}

// step runs step i and returns what broke the model, or "".
func (r *run) step(i int, s Step) string {
	ctx, cancel := context.WithTimeout(context.Background(), ctxTimeout)
	defer cancel()
	inst := s.Instance % len(r.callers)
	c := r.callers[inst]
	now := r.now.Load() + max(int64(s.Advance/time.Microsecond), r.catchUp())
	back := int64(s.Back / time.Microsecond)
	r.setClocks(now, inst, back)
	defer func() { r.setClocks(r.now.Load(), -1, 0) }() // a Wait or Concurrent moved it on
	read := r.reading(inst, back)
	monotone := read >= r.eff // the store decides at this reading
	who := fmt.Sprintf("lim[%d]", inst)
	if r.set.Tier != nil {
		who = fmt.Sprintf("tier[%d]", inst)
	}
	when := r.at(read)
	if back > 0 {
		when += fmt.Sprintf(" (a reading %v old)", s.Back)
	}
	if s.Call != CallWait || s.Advance > 0 {
		r.waitFrom = -1 // the caller paused: a new run of Waits
	}
	line := func(format string, args ...any) {
		r.lines = append(r.lines, fmt.Sprintf("%s %s", when, fmt.Sprintf(format, args...)))
	}
	admit := func(read int64, delay time.Duration, act int64, cost int64) {
		hi := max(r.eff, read)
		d := int64(delay / time.Microsecond)
		if act == 0 {
			act = read + d
		}
		r.events = append(r.events, event{dlo: read, dhi: hi, lo: act, hi: act + (hi - read), cost: cost, step: i})
	}
	defer func() { r.eff = max(r.eff, read) }()
	switch s.Call {
	case CallAllow:
		d, err := c.AllowN(ctx, r.key, s.Cost)
		if err != nil {
			line("%s.AllowN(key, %d) = error %v", who, s.Cost, err)
			return fmt.Sprintf("%s.AllowN(key, %d) at %s: %v (the store does not fail in these traces)", who, s.Cost, when, err)
		}
		line("%s.AllowN(key, %d) = %s", who, s.Cost, outcome(d))
		if d.Allowed && !d.Shadowed {
			admit(read, d.Delay, 0, int64(s.Cost))
		} else if monotone && !r.late(inst, now-back) {
			if msg := r.checkLeast(read, int64(s.Cost), "", 0); msg != "" {
				return fmt.Sprintf("%s.AllowN(key, %d) at %s = %s, want allowed: %s", who, s.Cost, when, outcome(d), msg)
			}
		}
	case CallReserve:
		res, err := c.Reserve(ctx, r.key, s.Cost, s.MaxDelay)
		if err != nil {
			line("%s.Reserve(key, %d, %v) = error %v", who, s.Cost, s.MaxDelay, err)
			if r.lq != nil && res == nil {
				return "" // refused under local quota, with a clear error
			}
			return fmt.Sprintf("%s.Reserve(key, %d, %v) at %s: %v", who, s.Cost, s.MaxDelay, when, err)
		}
		d := res.Decision()
		if res.OK() && !d.Shadowed {
			act := res.TimeToAct().UnixMicro()
			line("%s.Reserve(key, %d, %v) = r%d, ok, acts at %s", who, s.Cost, s.MaxDelay, len(r.resv), r.at(act))
			admit(read, 0, act, int64(s.Cost))
			r.resv = append(r.resv, reservation{res, inst, len(r.events) - 1, i})
			// (The leaky bucket queues whatever maxDelay says; a
			// composite's Delay is its parts' latest.)
			if md := int64(s.MaxDelay / time.Microsecond); act > read+md && !r.queues() {
				return fmt.Sprintf("%s.Reserve(key, %d, %v) at %s acts at %s, want within its max delay (by %s)", who, s.Cost, s.MaxDelay, when, r.at(act), r.at(read+md))
			}
		} else {
			line("%s.Reserve(key, %d, %v) = not ok (%s)", who, s.Cost, s.MaxDelay, outcome(d))
			if monotone && !r.late(inst, now-back) {
				if msg := r.checkLeast(read, int64(s.Cost), "reserve", int64(s.MaxDelay/time.Microsecond)); msg != "" {
					return fmt.Sprintf("%s.Reserve(key, %d, %v) at %s = not ok (%s), want ok: %s", who, s.Cost, s.MaxDelay, when, outcome(d), msg)
				}
			}
		}
	case CallCancel:
		var live []int
		for j, rv := range r.resv {
			if rv.ev >= 0 && !r.events[rv.ev].cancelled {
				live = append(live, j)
			}
		}
		if len(live) == 0 {
			line("(no reservation to cancel)")
			return ""
		}
		j := live[s.Reservation%len(live)]
		rv := r.resv[j]
		who = fmt.Sprintf("r%d", j)
		read = r.reading(rv.inst, 0)
		err := rv.r.Cancel(ctx)
		line("%s.Cancel() = %v", who, err)
		if err != nil {
			return fmt.Sprintf("%s.Cancel() at %s: %v", who, when, err)
		}
		r.events[rv.ev].cancelled = true
		r.gave = append(r.gave, gift{rv.inst, now})
		r.events[rv.ev].refunded = r.refundsAll(rv.ev, read)
	case CallPeek:
		d, err := c.Peek(ctx, r.key)
		line("%s.Peek(key) = %s", who, outcome(d))
		if err != nil {
			return fmt.Sprintf("%s.Peek(key) at %s: %v", who, when, err)
		}
	case CallReset:
		if len(r.lims) > 1 && r.set.Options != nil {
			line("(Reset left out: another process's local state would not see it)")
			return ""
		}
		err := r.lims[inst].Reset(ctx, r.key)
		line("lim[%d].Reset(key) = %v", inst, err)
		if err != nil {
			return fmt.Sprintf("lim[%d].Reset(key) at %s: %v", inst, when, err)
		}
		r.events = nil
		r.gave = append(r.gave, gift{inst, now})
		for j := range r.resv {
			r.resv[j].ev = -1
		}
		r.waitFrom = -1
	case CallWait:
		return r.wait(i, s, inst, c, who, line)
	case CallConcurrent:
		return r.concurrent(i, s, line)
	case CallRebuild:
		m, ok := ModelOf(s.Alg)
		if s.Alg == nil || !ok || r.set.Tier != nil {
			return fmt.Sprintf("step %d: Rebuild needs a built-in Alg (or a composite of them) and no tier", i)
		}
		if msg, ok := r.build(s.Alg, nil); !ok {
			return msg
		}
		r.m = m
		line("every limiter built again with %v", s.Alg)
	}
	return ""
}

// wait runs a WaitN, moving every clock by s.Tick while it waits.
func (r *run) wait(i int, s Step, inst int, c caller, who string, line func(string, ...any)) string {
	start := r.reading(inst, 0)
	r.waitTickUsed = 0
	// No deadline: Wait holds a deadline to the limiter's (fake) clock.
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	type result struct {
		d   ratelimit.Decision
		err error
	}
	done := make(chan result, 1)
	base := r.clocks[inst].Waiters()
	go func() {
		d, err := c.WaitN(ctx, r.key, s.Cost)
		done <- result{d, err}
	}()
	tick := max(int64(s.Tick/time.Microsecond), 1000)
	limit := r.now.Load() + 4*int64(periodOf(r.tr.Alg)/time.Microsecond) + 2*int64(windowOf(r.tr.Alg)/time.Microsecond) + 4*tick
	var res result
	for k, waiting := 0, true; waiting; k++ {
		if k > 0 && k%50 == 0 {
			tick *= 2 // a long wait (a leaky bucket's queue): move faster
		}
		// Move the clocks only once the Wait waits on its instance's
		// clock (or after 200ms of real time, whatever else waits there):
		// a goroutine slow to run on a loaded machine must not see the
		// clocks run past its turn.
		for idle := time.Now(); r.clocks[inst].Waiters() <= base && time.Since(idle) < 200*time.Millisecond; {
			select {
			case res = <-done:
				waiting = false
			case <-time.After(50 * time.Microsecond):
				continue
			}
			break
		}
		if !waiting {
			break
		}
		select {
		case res = <-done:
			waiting = false
		case <-time.After(50 * time.Microsecond):
			move := max(tick, r.catchUp())
			if now := r.now.Load() + move; now <= limit {
				r.setClocks(now, -1, 0)
				r.waitTickUsed = max(r.waitTickUsed, move)
			} else {
				select {
				case res = <-done:
				case <-time.After(2 * time.Second):
					cancel()
					res = <-done
				}
				waiting = false
			}
		}
	}
	end := r.reading(inst, 0)
	r.lines = append(r.lines, fmt.Sprintf("%s %s.WaitN(key, %d) = %s, returned at %s (clocks moved %v at a time)", r.at(start), who, s.Cost, outcome(res.d), r.at(end), s.Tick))
	if res.err != nil {
		return fmt.Sprintf("%s.WaitN(key, %d) at %s: %v (at %s, moving the clock %v at a time)", who, s.Cost, r.at(start), res.err, r.at(end), s.Tick)
	}
	if res.d.Shadowed {
		r.waitFrom = -1 // shadow mode waits for nothing
		return ""
	}
	hi := end + r.maxSkew() - r.skews[inst]
	r.events = append(r.events, event{dlo: start, dhi: hi, lo: start, hi: hi, cost: int64(s.Cost), step: i})
	r.eff = max(r.eff, hi)
	if r.waitFrom < 0 {
		// A new run of back-to-back Waits: checked only when nothing
		// admitted before it acts after it starts.
		r.waitFrom, r.waitTick, r.waitFirstEnd, r.waitUnits = start, r.waitTickUsed, end, 0
		r.waitClean = true
		for _, e := range r.events[:len(r.events)-1] {
			if e.hi > start && !e.refunded {
				r.waitClean = false
			}
		}
		return ""
	}
	r.waitTick = max(r.waitTick, r.waitTickUsed)
	r.waitUnits += int64(s.Cost)
	// The caller has waited without a pause since the run's first Wait
	// returned, with timers late by at most a tick: a bucket that keeps
	// its rate admits limit per period since then, less a unit in flight
	// and a tick's worth. (Timers late by more than an interval lose
	// slots whatever Wait does, x/time/rate's too at a burst of 1: the
	// check holds only clocks that move by less.)
	m, ok := r.m.(builtinModel)
	if !ok || m.kind != kindBucket || !m.reservesAhead || !r.waitClean || 2*r.waitTick > m.interval() {
		return ""
	}
	span := end - r.waitFirstEnd
	want := mulDiv(m.limit, span, m.period) - mulDiv(m.limit, r.waitTick, m.period) - 2
	if r.waitUnits < want {
		return fmt.Sprintf("%s.WaitN(key, %d) returned at %s: %d units admitted to back-to-back Waits in the %v since %s, want at least %d of %v (the clocks moved %v at a time): Wait runs below the rate",
			who, s.Cost, r.at(end), r.waitUnits, time.Duration(span)*time.Microsecond, r.at(r.waitFirstEnd), want, m, time.Duration(r.waitTick)*time.Microsecond)
	}
	return ""
}

// concurrent runs s.Callers goroutines' AllowN at once, moving the
// clocks by s.Tick at a time while they run.
func (r *run) concurrent(i int, s Step, line func(string, ...any)) string {
	var wg sync.WaitGroup
	var mu sync.Mutex
	var errs []error
	admitted, denied := 0, 0
	stop := make(chan struct{})
	ticked := make(chan struct{})
	go func() {
		defer close(ticked)
		tick := int64(s.Tick / time.Microsecond)
		for k := 0; (tick > 0 || r.realTime) && k < 200; k++ {
			select {
			case <-stop:
				return
			case <-time.After(50 * time.Microsecond):
				r.setClocks(r.now.Load()+max(tick, r.catchUp()), -1, 0)
			}
		}
	}()
	start := make(chan struct{})
	eff := r.eff
	ms := r.maxSkew()
	for g := 0; g < max(s.Callers, 1); g++ {
		inst := g % len(r.callers)
		c := r.callers[inst]
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			ctx, cancel := context.WithTimeout(context.Background(), ctxTimeout)
			defer cancel()
			lo := r.reading(inst, 0)
			d, err := c.AllowN(ctx, r.key, s.Cost)
			hi := max(eff, r.base+r.now.Load()+ms)
			mu.Lock()
			defer mu.Unlock()
			switch {
			case err != nil:
				errs = append(errs, err)
			case d.Allowed && !d.Shadowed:
				admitted++
				dl := int64(d.Delay / time.Microsecond)
				r.events = append(r.events, event{dlo: lo, dhi: hi, lo: lo + dl, hi: hi + dl, cost: int64(s.Cost), step: i})
			default:
				denied++
			}
		}()
	}
	from := r.at(r.reading(0, 0))
	close(start)
	wg.Wait()
	close(stop)
	<-ticked
	r.eff = max(r.eff, r.base+r.now.Load()+ms)
	r.waitFrom = -1
	r.lines = append(r.lines, fmt.Sprintf("%s %d goroutines × AllowN(key, %d) over %d instance(s), clocks moving %v at a time = %d allowed, %d denied, until %s",
		from, s.Callers, s.Cost, len(r.callers), s.Tick, admitted, denied, r.at(r.reading(0, 0))))
	if len(errs) > 0 {
		return fmt.Sprintf("%d goroutines × AllowN(key, %d) at %s: %v", s.Callers, s.Cost, from, errs[0])
	}
	return ""
}

// refundsAll reports whether the model promises the whole cost of event
// ev back to a Cancel at reading read (docs/reservations.md): a window
// algorithm's within the window it was made in; the token bucket's and
// GCRA's before its time to act when no reservation was made after it.
// Otherwise (the sliding log, the leaky bucket, composites, users'
// algorithms, clocks out of order) the lower bound keeps counting it.
func (r *run) refundsAll(ev int, read int64) bool {
	bm, ok := r.m.(builtinModel)
	e := r.events[ev]
	if !ok || read < r.eff || read < e.dhi || (r.set.DenyCache && len(r.callers) > 1) {
		return false
	}
	switch bm.kind {
	case kindFixed, kindSliding:
		return e.dlo/bm.period == read/bm.period && e.dhi/bm.period == read/bm.period
	case kindBucket:
		return bm.reservesAhead && read < e.lo && ev == len(r.events)-1
	}
	return false
}

// queues reports whether some part of the model is decision-timed (the
// leaky bucket), whose Delay is its turn in the queue.
func (r *run) queues() bool {
	for _, p := range parts(r.m) {
		if bm, ok := p.(builtinModel); ok && bm.decisionTimed {
			return true
		}
	}
	return false
}

// outcome is a decision as a failure message shows it.
func outcome(d ratelimit.Decision) string {
	switch {
	case d.Shadowed:
		return fmt.Sprintf("denied in shadow (retry after %v)", d.RetryAfter)
	case d.Allowed && d.Delay > 0:
		return fmt.Sprintf("allowed, delay %v (remaining %d)", d.Delay, d.Remaining)
	case d.Allowed:
		return fmt.Sprintf("allowed (remaining %d)", d.Remaining)
	default:
		return fmt.Sprintf("denied (remaining %d, retry after %v)", d.Remaining, d.RetryAfter)
	}
}

// overSlack is what local quota may admit beyond m's Most over [from, to]
// (WithLocalQuota's doc).
func (r *run) overSlack(m Model, from, to int64) int64 {
	bm, ok := m.(builtinModel)
	if r.lq == nil || !ok {
		return 0
	}
	switch bm.kind {
	case kindBucket:
		return mulDiv(bm.limit, int64(r.lq.Lifetime/time.Microsecond), bm.period) + 1
	case kindFixed:
		return 0
	default:
		return int64(len(r.callers)) * r.share
	}
}

// underSlack is what local quota may leave unadmitted in [from, to]: N·(S−1)
// per window (fixed window) or per lifetime (the others).
func (r *run) underSlack(m Model, from, to int64) int64 {
	bm, ok := m.(builtinModel)
	if r.lq == nil || !ok {
		return 0
	}
	per := int64(len(r.callers)) * (r.share - 1)
	if bm.kind == kindFixed {
		return per * bm.windows(from, to)
	}
	return per * (1 + (to-from)/int64(r.lq.Lifetime/time.Microsecond))
}

// axis is where e lies for part p's promise: the time it was admitted at
// for the window algorithms (which serve only now) and the leaky bucket
// (whose promise is on admissions); the time it acts at for the token
// bucket and GCRA, which book ahead; and, for those as a part of a
// composite (whose Delay is its parts' longest), anywhere from the one to
// the other.
func (r *run) axis(p Model, e event) (lo, hi int64) {
	bm, ok := p.(builtinModel)
	switch {
	case !ok:
		return e.lo, e.hi // a user's model: by the time it acts
	case bm.decisionTimed || bm.kind != kindBucket:
		return e.dlo, e.dhi
	case len(parts(r.m)) > 1:
		return e.dlo, e.hi
	default:
		return e.lo, e.hi
	}
}

// checkMost checks every span of every part's promise and returns the
// breach completed earliest in the trace, or "".
func (r *run) checkMost() string {
	best, bestStep := "", len(r.tr.Steps)
	for _, p := range parts(r.m) {
		type iv struct {
			lo, hi, cost int64
			step         int
		}
		var evs []iv
		for _, e := range r.events {
			if e.cancelled {
				continue
			}
			lo, hi := r.axis(p, e)
			evs = append(evs, iv{lo, hi, e.cost, e.step})
		}
		sort.Slice(evs, func(i, j int) bool { return evs[i].lo < evs[j].lo })
		for i := range evs {
			a := evs[i].lo
			// Events surely within [a, b]: lo ≥ a (evs[i:]) and hi ≤ b.
			in := append([]iv(nil), evs[i:]...)
			sort.Slice(in, func(x, y int) bool { return in[x].hi < in[y].hi })
			sum, last := int64(0), 0
			for k, e := range in {
				sum += e.cost
				last = max(last, e.step)
				if k+1 < len(in) && in[k+1].hi == e.hi {
					continue
				}
				b := e.hi
				most := p.Most(a, b) + r.overSlack(p, a, b)
				if sum > most && last < bestStep {
					bestStep = last
					best = fmt.Sprintf("step %d (%s): want at most %d admitted to act in [%s, %s] (%v), got %d",
						last, r.lines[min(last, len(r.lines)-1)], most, r.at(a), r.at(b), p, sum)
				}
			}
		}
	}
	return best
}

// checkLeast returns why a request of cost n denied at at (or, for a
// reservation the model books ahead, within maxDelay of it) should have
// been admitted, or "" when the denial keeps the promise.
func (r *run) checkLeast(at, n int64, kind string, maxDelay int64) string {
	tau := at
	if kind == "reserve" {
		// The window algorithms and the leaky bucket serve a reservation
		// only now; the token bucket and GCRA book ahead within maxDelay.
		// A composite's parts each do their own: leave it out.
		bm, ok := r.m.(builtinModel)
		if !ok || bm.decisionTimed {
			return ""
		}
		if bm.reservesAhead {
			tau = at + maxDelay
		}
	}
	// The promise's lower bound holds for a request after every other.
	for _, e := range r.events {
		if e.hi > tau || e.dhi > at {
			return ""
		}
	}
	return r.fits(tau, n, false)
}

// fits returns why cost n fits at tau in every part's Least, with what
// the trace admitted (cancelled requests counted as still admitted), or
// "" when some span leaves no room for it.
func (r *run) fits(tau, n int64, wait bool) string {
	room := int64(-1)
	var tight string
	for _, p := range parts(r.m) {
		los, his := []int64{tau}, []int64{tau}
		type iv struct{ lo, hi, cost int64 }
		var evs []iv
		for _, e := range r.events {
			if e.refunded {
				continue
			}
			lo, hi := r.axis(p, e)
			evs = append(evs, iv{lo, hi, e.cost})
			// An event may lie anywhere in [lo, hi]: a span may start or
			// end at either end.
			for _, v := range []int64{lo, hi} {
				if v <= tau {
					los = append(los, v)
				}
				if v >= tau {
					his = append(his, v)
				}
			}
		}
		for _, a := range los {
			for _, b := range his {
				sum := int64(0)
				for _, e := range evs {
					if e.hi >= a && e.lo <= b {
						sum += e.cost
					}
				}
				left := p.Least(a, b) - r.underSlack(p, a, b) - sum
				if left < n {
					return ""
				}
				if room < 0 || left < room {
					room = left
					tight = fmt.Sprintf("%d admitted in [%s, %s], where %v must admit %d", sum, r.at(a), r.at(b), p, p.Least(a, b)-r.underSlack(p, a, b))
				}
			}
		}
	}
	if r.lq != nil {
		tight += fmt.Sprintf(" (local quota's under-admission bound taken off: shares of up to %d over %d instance(s))", r.share, len(r.callers))
	}
	return tight
}

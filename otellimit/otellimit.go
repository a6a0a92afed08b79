// Package otellimit records a ratelimit.Limiter's decisions as OpenTelemetry
// metrics, through the go.opentelemetry.io/otel/metric API: an Observer to
// pass to ratelimit.WithObserver.
//
//	obs, err := otellimit.New(otel.GetMeterProvider())
//	...
//	lim, err := ratelimit.New(store, alg, ratelimit.WithName("api"), ratelimit.WithObserver(obs))
//
// It records three instruments, named after the OpenTelemetry conventions
// (a "ratelimit." namespace, durations in seconds, error.type on failures):
//
//	ratelimit.decisions       counter, {decision}: every decision, by limiter,
//	                          algorithm, outcome, source and shadowed
//	ratelimit.store.duration  histogram, s: each store call's duration, by
//	                          limiter and algorithm, with error.type when it failed
//	ratelimit.store.errors    counter, {error}: decisions returned with an
//	                          error, by limiter, algorithm and error.type
//
// Decisions of a limiter in shadow mode count with their real outcome:
// a denial that shadow mode let through is outcome "denied" with
// ratelimit.shadowed true. Keys are never attributes; their number is
// unbounded.
//
// The package is a module of its own, so that the SDK's go.mod imports no
// metrics API.
package otellimit

import (
	"context"
	"errors"
	"sync"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"

	"github.com/ratelimitkit/ratelimit"
)

// ScopeName is the instrumentation scope of the meter New creates.
const ScopeName = "github.com/ratelimitkit/ratelimit/otellimit"

// The instruments' names.
const (
	MetricDecisions     = "ratelimit.decisions"
	MetricStoreDuration = "ratelimit.store.duration"
	MetricStoreErrors   = "ratelimit.store.errors"
)

// The attributes' keys.
const (
	// AttrLimiter is the limiter's name (ratelimit.Event.Limiter).
	AttrLimiter = attribute.Key("ratelimit.limiter")
	// AttrAlgorithm is the algorithm's name, such as "gcra".
	AttrAlgorithm = attribute.Key("ratelimit.algorithm")
	// AttrOutcome is "allowed" or "denied": the limit's answer, also in
	// shadow mode.
	AttrOutcome = attribute.Key("ratelimit.outcome")
	// AttrSource is where the decision came from: ratelimit.Source's
	// String ("store", "fallback", "deny_cache", "failure_policy").
	AttrSource = attribute.Key("ratelimit.source")
	// AttrShadowed is true for a denial that shadow mode let through.
	AttrShadowed = attribute.Key("ratelimit.shadowed")
	// AttrErrorType classifies an error, as OpenTelemetry's error.type
	// does: "circuit_open", "timeout", "canceled", "corrupt_state", or
	// "_OTHER".
	AttrErrorType = attribute.Key("error.type")
)

// latencyBounds are the store duration histogram's buckets, in seconds:
// from 100µs (a Redis round trip on loopback) to 2.5s (a store that hangs
// without a time budget).
var latencyBounds = []float64{0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5}

// errorTypes are the values of AttrErrorType; index 0 means no error.
var errorTypes = [...]string{"", "circuit_open", "timeout", "canceled", "corrupt_state", "_OTHER"}

func errorType(err error) int {
	switch {
	case err == nil:
		return 0
	case errors.Is(err, ratelimit.ErrCircuitOpen):
		return 1
	case errors.Is(err, context.DeadlineExceeded):
		return 2
	case errors.Is(err, context.Canceled):
		return 3
	case errors.Is(err, ratelimit.ErrCorruptState):
		return 4
	}
	return 5
}

// Observer is a ratelimit.Observer that records decisions as metrics.
// Create it with New; one Observer may serve many limiters. It is safe for
// concurrent use.
type Observer struct {
	decisions metric.Int64Counter
	duration  metric.Float64Histogram
	errors    metric.Int64Counter

	mu    sync.RWMutex
	attrs map[limiterID]*limiterAttrs
}

var _ ratelimit.Observer = (*Observer)(nil)

// New returns an Observer whose instruments come from a meter of mp named
// ScopeName.
func New(mp metric.MeterProvider) (*Observer, error) {
	if mp == nil {
		return nil, errors.New("otellimit: nil meter provider")
	}
	m := mp.Meter(ScopeName)
	o := &Observer{attrs: make(map[limiterID]*limiterAttrs)}
	var err error
	if o.decisions, err = m.Int64Counter(MetricDecisions, metric.WithUnit("{decision}"),
		metric.WithDescription("Rate-limit decisions, by outcome and by where they came from.")); err != nil {
		return nil, err
	}
	if o.duration, err = m.Float64Histogram(MetricStoreDuration, metric.WithUnit("s"),
		metric.WithDescription("Duration of the rate limiter's calls to its store."),
		metric.WithExplicitBucketBoundaries(latencyBounds...)); err != nil {
		return nil, err
	}
	if o.errors, err = m.Int64Counter(MetricStoreErrors, metric.WithUnit("{error}"),
		metric.WithDescription("Rate-limit decisions returned with a store error, by error type.")); err != nil {
		return nil, err
	}
	return o, nil
}

// ObserveDecision records e. It implements ratelimit.Observer.
func (o *Observer) ObserveDecision(ctx context.Context, e ratelimit.Event) {
	a := o.limiter(e.Limiter, e.Algorithm)
	src := int(e.Decision.Source)
	if src >= len(a.decisions[0]) {
		src = 0
	}
	o.decisions.Add(ctx, 1, a.decisions[outcome(e)][src][boolIndex(e.Decision.Shadowed)]...)
	et := errorType(e.Err)
	if e.CalledStore {
		o.duration.Record(ctx, e.StoreLatency.Seconds(), a.duration[et]...)
	}
	if et != 0 {
		o.errors.Add(ctx, 1, a.errors[et]...)
	}
}

func outcome(e ratelimit.Event) int { return boolIndex(e.Allowed) }

func boolIndex(b bool) int {
	if b {
		return 1
	}
	return 0
}

// limiterID names a limiter's attribute sets.
type limiterID struct{ limiter, algorithm string }

// limiterAttrs holds a limiter's measurement options for every combination
// of attributes, made once, so recording allocates nothing.
type limiterAttrs struct {
	decisions [2][5][2][]metric.AddOption // [allowed][source][shadowed]
	duration  [len(errorTypes)][]metric.RecordOption
	errors    [len(errorTypes)][]metric.AddOption
}

func (o *Observer) limiter(name, algorithm string) *limiterAttrs {
	id := limiterID{name, algorithm}
	o.mu.RLock()
	a := o.attrs[id]
	o.mu.RUnlock()
	if a != nil {
		return a
	}
	o.mu.Lock()
	defer o.mu.Unlock()
	if a = o.attrs[id]; a == nil {
		a = newLimiterAttrs(name, algorithm)
		o.attrs[id] = a
	}
	return a
}

func newLimiterAttrs(name, algorithm string) *limiterAttrs {
	a := &limiterAttrs{}
	base := []attribute.KeyValue{AttrLimiter.String(name), AttrAlgorithm.String(algorithm)}
	with := func(kv ...attribute.KeyValue) metric.MeasurementOption {
		return metric.WithAttributeSet(attribute.NewSet(append(append([]attribute.KeyValue{}, base...), kv...)...))
	}
	for allowed, outcome := range []string{"denied", "allowed"} {
		for src := range a.decisions[allowed] {
			for shadowed := range a.decisions[allowed][src] {
				a.decisions[allowed][src][shadowed] = []metric.AddOption{with(
					AttrOutcome.String(outcome),
					AttrSource.String(ratelimit.Source(src).String()),
					AttrShadowed.Bool(shadowed == 1),
				)}
			}
		}
	}
	for et, name := range errorTypes {
		if et == 0 {
			a.duration[et] = []metric.RecordOption{with()}
			continue
		}
		opt := with(AttrErrorType.String(name))
		a.duration[et] = []metric.RecordOption{opt}
		a.errors[et] = []metric.AddOption{opt}
	}
	return a
}

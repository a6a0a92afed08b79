package otellimit_test

import (
	"context"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"
	"go.opentelemetry.io/otel/attribute"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"

	"github.com/ratelimitkit/ratelimit"
	"github.com/ratelimitkit/ratelimit/algorithms"
	"github.com/ratelimitkit/ratelimit/clock"
	"github.com/ratelimitkit/ratelimit/internal/testserver"
	"github.com/ratelimitkit/ratelimit/otellimit"
	"github.com/ratelimitkit/ratelimit/store/memory"
	rlredis "github.com/ratelimitkit/ratelimit/store/redis"
)

// collect reads every metric the reader holds, by instrument name.
func collect(t *testing.T, r *sdkmetric.ManualReader) map[string]metricdata.Metrics {
	t.Helper()
	var rm metricdata.ResourceMetrics
	if err := r.Collect(context.Background(), &rm); err != nil {
		t.Fatal(err)
	}
	out := map[string]metricdata.Metrics{}
	for _, sm := range rm.ScopeMetrics {
		if sm.Scope.Name != otellimit.ScopeName {
			t.Errorf("scope %q, want %q", sm.Scope.Name, otellimit.ScopeName)
		}
		for _, m := range sm.Metrics {
			out[m.Name] = m
		}
	}
	return out
}

// sums returns a counter's values by attribute set.
func sums(t *testing.T, m metricdata.Metrics) map[attribute.Set]int64 {
	t.Helper()
	sum, ok := m.Data.(metricdata.Sum[int64])
	if !ok || !sum.IsMonotonic {
		t.Fatalf("%s is %T, want a monotonic int64 sum", m.Name, m.Data)
	}
	out := map[attribute.Set]int64{}
	for _, p := range sum.DataPoints {
		out[p.Attributes] += p.Value
	}
	return out
}

func set(kv ...attribute.KeyValue) attribute.Set { return attribute.NewSet(kv...) }

func TestDecisions(t *testing.T) {
	reader := sdkmetric.NewManualReader()
	obs, err := otellimit.New(sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader)))
	if err != nil {
		t.Fatal(err)
	}
	fake := clock.NewFake(time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC))
	ctx := context.Background()
	lim, _ := ratelimit.New(memory.MustNew(), algorithms.FixedWindow(2, time.Hour), ratelimit.WithName("api"),
		ratelimit.WithClock(fake), ratelimit.WithDenyCache(10), ratelimit.WithObserver(obs))
	shadow, _ := ratelimit.New(memory.MustNew(), algorithms.FixedWindow(1, time.Hour), ratelimit.WithName("new"),
		ratelimit.WithClock(fake), ratelimit.WithShadow(), ratelimit.WithObserver(obs))
	for range 5 { // 2 allowed, 1 denied by the store, 2 by the deny cache
		lim.Allow(ctx, "user")
	}
	for range 3 { // 1 allowed, 2 shadowed denials
		shadow.Allow(ctx, "user")
	}
	got := collect(t, reader)
	api := []attribute.KeyValue{otellimit.AttrLimiter.String("api"), otellimit.AttrAlgorithm.String("fixed_window")}
	newLim := []attribute.KeyValue{otellimit.AttrLimiter.String("new"), otellimit.AttrAlgorithm.String("fixed_window")}
	point := func(base []attribute.KeyValue, outcome, source string, shadowed bool) attribute.Set {
		return set(append(base, otellimit.AttrOutcome.String(outcome), otellimit.AttrSource.String(source), otellimit.AttrShadowed.Bool(shadowed))...)
	}
	want := map[attribute.Set]int64{
		point(api, "allowed", "store", false):     2,
		point(api, "denied", "store", false):      1,
		point(api, "denied", "deny_cache", false): 2,
		point(newLim, "allowed", "store", false):  1,
		point(newLim, "denied", "store", true):    2,
	}
	gotSums := sums(t, got[otellimit.MetricDecisions])
	if len(gotSums) != len(want) {
		t.Errorf("%s has %d series, want %d: %v", otellimit.MetricDecisions, len(gotSums), len(want), gotSums)
	}
	for s, n := range want {
		if gotSums[s] != n {
			t.Errorf("%s{%s} = %d, want %d", otellimit.MetricDecisions, s.Encoded(attribute.DefaultEncoder()), gotSums[s], n)
		}
	}
	hist, ok := got[otellimit.MetricStoreDuration].Data.(metricdata.Histogram[float64])
	if !ok {
		t.Fatalf("%s is %T, want a float64 histogram", otellimit.MetricStoreDuration, got[otellimit.MetricStoreDuration].Data)
	}
	var calls uint64
	for _, p := range hist.DataPoints {
		calls += p.Count
	}
	if calls != 6 || got[otellimit.MetricStoreDuration].Unit != "s" { // 3 + 3: the deny cache spared 2
		t.Errorf("%s counts %d store calls in %q, want 6 in seconds", otellimit.MetricStoreDuration, calls, got[otellimit.MetricStoreDuration].Unit)
	}
	if _, ok := got[otellimit.MetricStoreErrors]; ok {
		t.Errorf("%s recorded without any error", otellimit.MetricStoreErrors)
	}
}

// TestStoreErrors stops a private Redis under a limiter with a circuit
// breaker and checks the errors counted by type.
func TestStoreErrors(t *testing.T) {
	srv := testserver.StartRedis(t)
	c := goredis.NewClient(&goredis.Options{Addr: srv.Addr(), ContextTimeoutEnabled: true, MaxRetries: -1, DialerRetries: 1})
	defer c.Close()
	store, err := rlredis.New(c)
	if err != nil {
		t.Fatal(err)
	}
	reader := sdkmetric.NewManualReader()
	obs, _ := otellimit.New(sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader)))
	lim, err := ratelimit.New(store, algorithms.GCRA(10, time.Second, 10), ratelimit.WithName("api"),
		ratelimit.WithCircuitBreaker(2, time.Hour), ratelimit.WithFallback(memory.MustNew(), 2), ratelimit.WithObserver(obs))
	if err != nil {
		t.Fatal(err)
	}
	srv.Stop()
	for range 5 { // 2 store failures open the breaker; 3 decisions with it open
		if _, err := lim.Allow(context.Background(), "user"); err == nil {
			t.Fatal("lim.Allow on a stopped store returned no error")
		}
	}
	got := collect(t, reader)
	base := []attribute.KeyValue{otellimit.AttrLimiter.String("api"), otellimit.AttrAlgorithm.String("gcra")}
	errs := sums(t, got[otellimit.MetricStoreErrors])
	if n := errs[set(append(base, otellimit.AttrErrorType.String("_OTHER"))...)]; n != 2 {
		t.Errorf("%s{error.type=_OTHER} = %d, want the 2 refused connections: %v", otellimit.MetricStoreErrors, n, errs)
	}
	if n := errs[set(append(base, otellimit.AttrErrorType.String("circuit_open"))...)]; n != 3 {
		t.Errorf("%s{error.type=circuit_open} = %d, want 3: %v", otellimit.MetricStoreErrors, n, errs)
	}
	decisions := sums(t, got[otellimit.MetricDecisions])
	fallback := set(append(base, otellimit.AttrOutcome.String("allowed"), otellimit.AttrSource.String("fallback"), otellimit.AttrShadowed.Bool(false))...)
	if decisions[fallback] != 5 {
		t.Errorf("%s from the fallback = %d, want 5: %v", otellimit.MetricDecisions, decisions[fallback], decisions)
	}
}

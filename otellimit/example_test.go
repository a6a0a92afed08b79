package otellimit_test

import (
	"context"
	"fmt"
	"time"

	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"

	"github.com/ratelimitkit/ratelimit"
	"github.com/ratelimitkit/ratelimit/algorithms"
	"github.com/ratelimitkit/ratelimit/otellimit"
	"github.com/ratelimitkit/ratelimit/store/memory"
)

// A limiter whose decisions are counted by OpenTelemetry. In production the
// meter provider is the application's (otel.GetMeterProvider()), exporting
// to Prometheus or an OTLP collector; here a manual reader shows what was
// recorded.
func Example() {
	reader := sdkmetric.NewManualReader()
	provider := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	obs, err := otellimit.New(provider)
	if err != nil {
		panic(err)
	}
	lim, err := ratelimit.New(memory.MustNew(), algorithms.FixedWindow(3, time.Minute),
		ratelimit.WithName("api"), ratelimit.WithObserver(obs))
	if err != nil {
		panic(err)
	}
	for range 5 {
		lim.Allow(context.Background(), "user-42")
	}

	var rm metricdata.ResourceMetrics
	reader.Collect(context.Background(), &rm)
	for _, m := range rm.ScopeMetrics[0].Metrics {
		if m.Name != otellimit.MetricDecisions {
			continue
		}
		for _, p := range m.Data.(metricdata.Sum[int64]).DataPoints {
			outcome, _ := p.Attributes.Value(otellimit.AttrOutcome)
			source, _ := p.Attributes.Value(otellimit.AttrSource)
			fmt.Printf("%s %s from %s: %d\n", m.Name, outcome.AsString(), source.AsString(), p.Value)
		}
	}
	// Unordered output:
	// ratelimit.decisions allowed from store: 3
	// ratelimit.decisions denied from store: 2
}

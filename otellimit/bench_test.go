package otellimit_test

import (
	"context"
	"testing"
	"time"

	sdkmetric "go.opentelemetry.io/otel/sdk/metric"

	"github.com/ratelimitkit/ratelimit"
	"github.com/ratelimitkit/ratelimit/otellimit"
)

// BenchmarkObserveDecision measures recording one decision that called the
// store into the OpenTelemetry SDK (a manual reader, nothing exported).
func BenchmarkObserveDecision(b *testing.B) {
	obs, err := otellimit.New(sdkmetric.NewMeterProvider(sdkmetric.WithReader(sdkmetric.NewManualReader())))
	if err != nil {
		b.Fatal(err)
	}
	e := ratelimit.Event{
		Limiter: "api", Algorithm: "gcra", Key: "user-42", Cost: 1, Allowed: true,
		Decision:    ratelimit.Decision{Allowed: true, Limit: 10, Remaining: 9, Source: ratelimit.SourceStore},
		CalledStore: true, StoreLatency: 250 * time.Microsecond,
	}
	ctx := context.Background()
	b.ReportAllocs()
	for b.Loop() {
		obs.ObserveDecision(ctx, e)
	}
}

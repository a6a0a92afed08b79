package ratelimit

import (
	"testing"
	"time"

	"github.com/ratelimitkit/ratelimit/algorithms"
)

// BenchmarkCheckStep measures the step check the Update path runs on
// every step (checkStep), on a GCRA admission.
func BenchmarkCheckStep(b *testing.B) {
	alg := algorithms.GCRA(10, time.Second, 10)
	req := algorithms.Request{Now: 1e15, Cost: 1}
	st, err := alg.Decide(nil, req)
	if err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	for b.Loop() {
		if err := checkStep(alg, req, &st); err != nil {
			b.Fatal(err)
		}
	}
}

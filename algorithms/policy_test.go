package algorithms_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/ratelimitkit/ratelimit/algorithms"
	"github.com/ratelimitkit/ratelimit/algorithms/forms"
)

func TestPolicy(t *testing.T) {
	tests := []struct {
		alg  algorithms.Algorithm
		want algorithms.Policy
		rule string
	}{
		{algorithms.FixedWindow(100, time.Minute),
			algorithms.Policy{"fixed_window", 100, time.Minute, 100, 100, time.Minute},
			"a window algorithm's quota is its limit per period"},
		{algorithms.SlidingLog(7, 3*time.Second),
			algorithms.Policy{"sliding_log", 7, 3 * time.Second, 7, 7, 3 * time.Second},
			"a window algorithm's quota is its limit per period"},
		{algorithms.SlidingWindow(10, 10*time.Second),
			algorithms.Policy{"sliding_window", 10, 10 * time.Second, 10, 10, 10 * time.Second},
			"a window algorithm's quota is its limit per period"},
		{algorithms.TokenBucket(100, time.Minute, 20),
			algorithms.Policy{"token_bucket", 100, time.Minute, 20, 20, 12 * time.Second},
			"a bucket's quota is its burst, refilled in burst × period / limit"},
		{algorithms.GCRA(100, time.Minute, 20),
			algorithms.Policy{"gcra", 100, time.Minute, 20, 20, 12 * time.Second},
			"GCRA states the token bucket's policy"},
		{algorithms.LeakyBucket(10, 10*time.Second, 5),
			algorithms.Policy{"leaky_bucket", 10, 10 * time.Second, 5, 5, 5 * time.Second},
			"the leaky bucket's quota is its capacity"},
		{algorithms.GCRA(3, time.Second, 1),
			algorithms.Policy{"gcra", 3, time.Second, 1, 1, 333334 * time.Microsecond},
			"a window that is not a whole number of microseconds rounds up"},
		{algorithms.TokenBucket(1, time.Second, 50),
			algorithms.Policy{"token_bucket", 1, time.Second, 50, 50, 50 * time.Second},
			"a burst above the limit refills over several periods"},
	}
	for _, tt := range tests {
		ps, ok := tt.alg.(algorithms.PolicyStater)
		if !ok {
			t.Fatalf("%v does not implement PolicyStater", tt.alg)
		}
		if got := ps.Policy(); got != tt.want {
			t.Errorf("%v.Policy() = %+v, want %+v (%s)", tt.alg, got, tt.want, tt.rule)
		}
	}
}

// TestEveryBuiltinStatesItsPolicy: the HTTP fields need every built-in's
// policy, including one added to the registry later.
func TestEveryBuiltinStatesItsPolicy(t *testing.T) {
	for _, b := range forms.Builtins() {
		alg := b.New(10, time.Second, 5)
		ps, ok := alg.(algorithms.PolicyStater)
		if !ok {
			t.Errorf("%s does not implement PolicyStater", b.Name)
			continue
		}
		p := ps.Policy()
		if p.Algorithm != b.Name || p.Limit != 10 || p.Period != time.Second || p.Quota < 1 || p.Window <= 0 {
			t.Errorf("%s: Policy() = %+v", b.Name, p)
		}
	}
}

func ExamplePolicyStater() {
	alg := algorithms.GCRA(100, time.Minute, 20)
	if ps, ok := alg.(algorithms.PolicyStater); ok {
		p := ps.Policy()
		fmt.Printf("%d per %v, burst %d: quota %d per %v\n", p.Limit, p.Period, p.Burst, p.Quota, p.Window)
	}
	// Output: 100 per 1m0s, burst 20: quota 20 per 12s
}

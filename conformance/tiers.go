package conformance

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/ratelimitkit/ratelimit"
	"github.com/ratelimitkit/ratelimit/algorithms/forms"
	"github.com/ratelimitkit/ratelimit/store"
)

func (n numbers) String() string {
	return fmt.Sprintf("%d per %v, burst %d", n.limit, n.period, n.burst)
}

// peekWant is what a Peek at the new tier must report right after a move.
type peekWant struct {
	allowed   bool
	remaining int
}

// tierMove is a key that moves between tiers: it spends under from, the
// clock advances, and a Peek under to must report want for the algorithm.
// The expectations are those docs/tiers.md states for each algorithm.
type tierMove struct {
	name    string
	rule    string
	from    numbers
	spend   int
	advance time.Duration
	to      numbers
	want    map[string]peekWant // by algorithm name
}

func tierMoves() []tierMove {
	const m, h = time.Minute, time.Hour
	small, large := numbers{10, m, 10}, numbers{100, m, 100}
	return []tierMove{
		{
			name: "upgrade-exhausted", from: small, spend: 10, to: large,
			rule: "what was consumed carries over, measured in units of cost; GCRA carries its time to rest instead",
			want: map[string]peekWant{
				"fixed_window": {true, 90}, "sliding_log": {true, 90}, "sliding_window": {true, 90},
				"token_bucket": {true, 90}, "leaky_bucket": {true, 90}, "gcra": {false, 0},
			},
		},
		{
			name: "downgrade-partial", from: large, spend: 5, to: small,
			rule: "what was consumed carries over; GCRA's time to rest is worth fewer units at a slower rate",
			want: map[string]peekWant{
				"fixed_window": {true, 5}, "sliding_log": {true, 5}, "sliding_window": {true, 5},
				"token_bucket": {true, 5}, "leaky_bucket": {true, 5}, "gcra": {true, 9},
			},
		},
		{
			name: "downgrade-over", from: large, spend: 50, to: small,
			rule: "a key that consumed more than the new limit is denied until enough has left or refilled",
			want: map[string]peekWant{
				"fixed_window": {false, 0}, "sliding_log": {false, 0}, "sliding_window": {false, 0},
				"token_bucket": {false, 0}, "leaky_bucket": {false, 0}, "gcra": {true, 5},
			},
		},
		{
			name: "longer-period", from: small, spend: 10, advance: 30 * time.Second, to: numbers{10, h, 10},
			rule: "windows keep their start and stretch to the new period; buckets refill at the new rate",
			want: map[string]peekWant{
				"fixed_window": {false, 0}, "sliding_log": {false, 0}, "sliding_window": {false, 0},
				"token_bucket": {false, 0}, "leaky_bucket": {false, 0}, "gcra": {true, 9},
			},
		},
		{
			name: "shorter-period", from: numbers{10, h, 10}, spend: 10, advance: 90 * time.Second, to: small,
			rule: "windows keep their start and end at the new period; buckets refill at the new rate from the last update; GCRA keeps its time to rest",
			want: map[string]peekWant{
				"fixed_window": {true, 10}, "sliding_log": {true, 10}, "sliding_window": {true, 5},
				"token_bucket": {true, 10}, "leaky_bucket": {true, 10}, "gcra": {false, 0},
			},
		},
	}
}

// testTiers checks keys that change tier (ratelimit.Limiter.Tier): the
// state carries across the move as each algorithm documents, a denial's
// RetryAfter under the new numbers holds, and admission at a tier is exact
// under concurrency.
func testTiers(t *testing.T, newHarness func(*testing.T) Harness) {
	forEach(t, newHarness, func(t *testing.T, h Harness, s store.Store, a algorithm) {
		b := forms.BuiltinOf(a.alg)
		tier := func(f *fixture, n numbers) *ratelimit.Tier {
			t.Helper()
			tr, err := f.lim.Tier(b.New(n.limit, n.period, n.burst))
			if err != nil {
				t.Fatalf("lim.Tier(%v): %v", n, err)
			}
			return tr
		}
		for _, mv := range tierMoves() {
			t.Run(mv.name, func(t *testing.T) {
				want, ok := mv.want[b.Name]
				if !ok {
					t.Fatalf("no expectation for %s: add one to tierMoves and docs/tiers.md", b.Name)
				}
				f := newFixture(t, s, b.New(mv.from.limit, mv.from.period, mv.from.burst))
				to := tier(f, mv.to)
				ctx := context.Background()
				key := "tier-" + mv.name
				for range mv.spend {
					f.expect(key, 1, true)
				}
				f.clock.Advance(mv.advance)
				d, err := to.Peek(ctx, key)
				if err != nil {
					t.Fatalf("tier(%v).Peek(%q) at %s: %v", mv.to, key, f.at(), err)
				}
				if d.Allowed != want.allowed || d.Remaining != want.remaining || d.Limit != int(to.Algorithm().MaxCost()) {
					t.Errorf("after %d admitted at %v and %v, tier(%v).Peek = %s, remaining %d, limit %d; want %s, remaining %d, limit %d (rule: %s)",
						mv.spend, mv.from, mv.advance, mv.to, verdict(d.Allowed), d.Remaining, d.Limit, verdict(want.allowed), want.remaining, to.Algorithm().MaxCost(), mv.rule)
				}
				// Spend the new tier, then retry a denial when told.
				for i := 0; ; i++ {
					d, err = to.Allow(ctx, key)
					if err != nil {
						t.Fatalf("tier(%v).Allow(%q) at %s: %v", mv.to, key, f.at(), err)
					}
					if !d.Allowed {
						break
					}
					if i > 200 {
						t.Fatalf("tier(%v) admitted %q more than 200 times at %s", mv.to, key, f.at())
					}
				}
				f.clock.Advance(d.RetryAfter)
				if d, err = to.Allow(ctx, key); err != nil || !d.Allowed {
					t.Errorf("tier(%v).Allow(%q) when its denial's RetryAfter has passed, at %s = %s, %v (retry after %v); want allowed (rule: a RetryAfter holds after a change of numbers)",
						mv.to, key, f.at(), verdict(d.Allowed), err, d.RetryAfter)
				}
			})
		}
		t.Run("concurrency", func(t *testing.T) {
			f := newFixture(t, s, a.alg)
			const limit = 25
			tr := tier(f, numbers{limit, time.Second, limit})
			const workers, each = 16, 4
			key := "tier-concurrent"
			allows := []allowFunc{tr.Allow}
			if tw := twinOf(t, h, s); tw != nil {
				allows = append(allows, tier(f.sibling(tw, a.alg), numbers{limit, time.Second, limit}).Allow)
			}
			admitted := admitConcurrently(t, workers, each, key, allows...)
			if admitted != limit {
				t.Errorf("%d goroutines × %d tier(%d per second, burst %d).Allow(%q) at a fixed time admitted %d, want exactly %d (rule: a tier's numbers are applied atomically, not the limiter's own %d)",
					workers, each, limit, limit, key, admitted, limit, a.limit)
			}
		})
	})
}

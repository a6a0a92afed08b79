package conformance

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/ratelimitkit/ratelimit"
	"github.com/ratelimitkit/ratelimit/algorithms"
	"github.com/ratelimitkit/ratelimit/algorithms/forms"
	"github.com/ratelimitkit/ratelimit/statefile"
	"github.com/ratelimitkit/ratelimit/store"
)

// The Export group holds a store that implements store.Exporter to
// what a move needs of it (docs/moving-state.md): statefile.Count counts
// each live key of a namespace once; statefile.Export yields each of them
// once, and no other; and every entry exported, imported into another
// fresh store of the same kind the way `ratelimit move` imports
// (statefile.Import), decides there exactly as in the source, for every
// built-in, two composites and a user's own algorithm.
// A second import of the same entries writes nothing (the destination's
// live state wins), and an entry whose state its algorithm cannot decode
// is refused. A store without Exporter, or one that answers
// ErrUnsupported, skips the group.

// exportAlgorithms are the algorithms the Export group moves, with periods
// of an hour, so that a store that expires keys by real time keeps them
// while the fake clock stands still.
func exportAlgorithms() []algorithms.Algorithm {
	const h = time.Hour
	out := []algorithms.Algorithm{
		algorithms.All(algorithms.GCRA(10, h, 10), algorithms.FixedWindow(20, h)),
		algorithms.All(algorithms.SlidingLog(10, h), algorithms.TokenBucket(10, h, 10)),
		ownAlgorithm{limit: 25},
	}
	for _, b := range forms.Builtins() {
		out = append(out, b.New(10, h, 10))
	}
	return out
}

func testExport(t *testing.T, newHarness func(*testing.T) Harness) {
	if !storeHas(t).exporter {
		t.Skip("store does not implement ratelimit.Exporter")
	}
	for _, alg := range exportAlgorithms() {
		t.Run(alg.Name(), func(t *testing.T) {
			src := newHarness(t)
			ctx := context.Background()
			f := newFixture(t, src.Store, alg, ratelimit.WithName("move"))
			other := f.sibling(src.Store, alg, ratelimit.WithName("other"))
			users := map[string]int{"ann": 7, "{bob}": 2, "c:d%\x00": 4}
			for u, n := range users {
				for range n {
					f.allow(u, 1)
				}
				other.allow(u, 1) // another namespace, which must not be counted
			}
			ns, now := f.lim.Namespace(), f.clock.Now()
			n, err := statefile.Count(ctx, src.Store, ns, now)
			if errors.Is(err, store.ErrUnsupported) {
				t.Skipf("the store cannot enumerate its keys here: %v", err)
			}
			if n != len(users) || err != nil {
				t.Fatalf("statefile.Count(store, %q) = %d, %v; want %d, the keys decided on", ns, n, err, len(users))
			}
			var entries []store.Entry
			seen := map[string]bool{}
			err = statefile.Export(ctx, src.Store, ns, now, func(e store.Entry) error {
				switch {
				case e.Key.Namespace != ns:
					return fmt.Errorf("yielded %q, outside namespace %q", e.Key.String(), ns)
				case users[e.Key.ID] == 0:
					return fmt.Errorf("yielded %q, a key no decision wrote", e.Key.String())
				case seen[e.Key.ID]:
					return fmt.Errorf("yielded %q twice", e.Key.String())
				case e.Expires <= now.UnixMicro():
					return fmt.Errorf("yielded %q expiring at %d, not after now %d", e.Key.String(), e.Expires, now.UnixMicro())
				}
				seen[e.Key.ID] = true
				entries = append(entries, e)
				return nil
			})
			if err != nil || len(entries) != len(users) {
				t.Fatalf("statefile.Export(store, %q) = %d entries, %v; want each of the %d keys once", ns, len(entries), err, len(users))
			}

			dst := newHarness(t)
			for round, want := range []bool{true, false} {
				for _, e := range entries {
					wrote, err := statefile.Import(ctx, dst.Store, e, now)
					if err != nil || wrote != want {
						t.Fatalf("import %d of %q into a fresh store = %v, %v; want %v", round+1, e.Key.String(), wrote, err, want)
					}
				}
			}
			// At once and a minute later (a moved state must not expire
			// sooner than the source's), the moved keys decide as the
			// source's.
			moved := f.sibling(dst.Store, alg, ratelimit.WithName("move"))
			for _, step := range []time.Duration{0, time.Minute} {
				f.clock.Advance(step)
				for u := range users {
					want, err1 := f.lim.Peek(ctx, u)
					got, err2 := moved.lim.Peek(ctx, u)
					if err := errors.Join(err1, err2); err != nil {
						t.Fatalf("Peek(%q): %v", u, err)
					}
					if got.Allowed != want.Allowed || got.Remaining != want.Remaining || got.Limit != want.Limit ||
						got.RetryAfter != want.RetryAfter || got.ResetAfter != want.ResetAfter {
						t.Errorf("after a move, lim.Peek(%q) at %s = %+v, want %+v as in the source", u, f.at(), got, want)
					}
				}
			}
			now = f.clock.Now()
			// A state the algorithm cannot decode is refused and not
			// written (a user's own algorithm's state is the user's to
			// read: it cannot be checked).
			bad := store.Entry{Key: store.Key{Namespace: ns, ID: "bad"}, State: []byte{1, 2, 3}, Expires: now.Add(time.Hour).UnixMicro()}
			if _, own := alg.(ownAlgorithm); !own {
				if wrote, err := statefile.Import(ctx, dst.Store, bad, now); !errors.Is(err, ratelimit.ErrCorruptState) || wrote {
					t.Errorf("import of an undecodable %s state = %v, %v; want ErrCorruptState", alg.Name(), wrote, err)
				}
				if n, err := statefile.Count(ctx, dst.Store, ns, now); n != len(users) || err != nil {
					t.Errorf("after a refused import, Count = %d, %v; want %d", n, err, len(users))
				}
			}
		})
	}
}

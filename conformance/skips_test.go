package conformance_test

import (
	"regexp"
	"strings"
	"testing"
)

// TestServerPathsSkipOnce runs the suite on a correct store without a
// Decider or a leasewire.Runner: the groups must leave their server paths out
// and say why once, in TestBrokenStoreHelper/ServerPaths, instead of
// skipping every group's server path once per algorithm (93 skips of 101
// in a user's run); the update paths still run. With a Decider, the server
// paths run.
func TestServerPathsSkipOnce(t *testing.T) {
	skip := regexp.MustCompile(`--- SKIP: TestBrokenStoreHelper/(\S+)`)
	for _, c := range []struct {
		mode       string
		serverRuns bool
	}{{"", false}, {"decider-correct", true}} {
		t.Run("mode="+c.mode, func(t *testing.T) {
			t.Parallel()
			out, passed := runChild(t, c.mode)
			if !passed {
				t.Fatalf("the suite fails a correct store (%q):\n%s", c.mode, failures(out))
			}
			var skipped []string
			for _, m := range skip.FindAllStringSubmatch(out, -1) {
				skipped = append(skipped, m[1])
				if strings.Contains(m[1], "/server") && !c.serverRuns {
					t.Errorf("skipped %s: a store without a Decider should have no server subtests", m[1])
				}
			}
			if n := strings.Count(out, "--- SKIP: TestBrokenStoreHelper/ServerPaths "); n != 1 {
				t.Errorf("ServerPaths skipped %d times, want once (the store has no lease.Runner)", n)
			}
			if !strings.Contains(out, "does not implement") {
				t.Errorf("no skip message names the interface the store lacks")
			}
			if len(skipped) > 10 {
				t.Errorf("%d skipped subtests, want at most 10: %s", len(skipped), strings.Join(skipped, ", "))
			}
			if got := strings.Contains(out, "--- PASS: TestBrokenStoreHelper/Concurrency/server/"); got != c.serverRuns {
				t.Errorf("Concurrency/server passed: %v, want %v", got, c.serverRuns)
			}
			if !strings.Contains(out, "--- PASS: TestBrokenStoreHelper/Concurrency/update/") {
				t.Errorf("Concurrency/update did not pass: the update paths must still run")
			}
		})
	}
}

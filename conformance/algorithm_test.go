package conformance_test

import (
	"encoding/binary"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/ratelimitkit/ratelimit/algorithms"
	"github.com/ratelimitkit/ratelimit/conformance"
)

// windowAlgorithm is a user's algorithm: at most limit units per fixed
// window of period, its state the window's start and its count (two
// little-endian int64s). With a defect it breaks the step contract in one
// way, and RunAlgorithm must fail it.
type windowAlgorithm struct {
	defect string
	limit  int64
	period int64 // µs
}

func (a windowAlgorithm) Name() string    { return "window" }
func (a windowAlgorithm) Validate() error { return nil }
func (a windowAlgorithm) MaxCost() int64  { return a.limit }
func (a windowAlgorithm) Decide(state []byte, req algorithms.Request) (algorithms.Step, error) {
	start := req.Now - req.Now%a.period
	var count int64
	if len(state) == 16 && int64(binary.LittleEndian.Uint64(state)) == start {
		count = int64(binary.LittleEndian.Uint64(state[8:]))
	}
	left := start + a.period - req.Now
	d := algorithms.Decision{Allowed: count+req.Cost <= a.limit, Limit: a.limit, Remaining: a.limit - count}
	if count > 0 {
		d.ResetAfter = left
	}
	write := d.Allowed && !req.Peek
	switch {
	case !d.Allowed && a.defect != "retry0":
		d.RetryAfter = left
	case write:
		count += req.Cost
		d.Remaining, d.ResetAfter = a.limit-count, left
	case req.Peek && a.defect == "peek-consumes":
		count += req.Cost
		write = true
	}
	if !write {
		return algorithms.Step{Decision: d}, nil
	}
	next := binary.LittleEndian.AppendUint64(binary.LittleEndian.AppendUint64(state[:0:0], uint64(start)), uint64(count))
	ttl := left
	if a.defect == "ttl0" {
		ttl = 0
	}
	return algorithms.Step{Decision: d, Next: next, TTL: ttl}, nil
}

// brokenAlgorithmCases names each defect of the algorithm (or of the store
// it runs on) and the RunAlgorithm subtest that must fail because of it.
var brokenAlgorithmCases = []struct {
	alg, store string
	mustFail   string
	rule       string
}{
	{"ttl0", "", "Differential/", "a state written expires: TTL of at least 1 µs"},
	{"peek-consumes", "", "Differential/", "a peek returns no new state"},
	{"peek-consumes", "", "Peek", "a peek returns no new state"},
	{"retry0", "", "Differential/", "a denial says when to retry"},
	{"", "not-atomic", "Concurrency/", "the store's read-modify-write is atomic"},
}

// TestBrokenAlgorithmHelper runs RunAlgorithm on the algorithm and store
// named by CONFORMANCE_ALG ("defect/store defect"). It does nothing in a
// normal test run.
func TestBrokenAlgorithmHelper(t *testing.T) {
	v, ok := os.LookupEnv("CONFORMANCE_ALG")
	if !ok {
		t.Skip("runs only as the child process of TestRunAlgorithmCatchesBrokenAlgorithms")
	}
	defect, storeDefect, _ := strings.Cut(v, "/")
	alg := windowAlgorithm{defect: defect, limit: 5, period: int64(time.Second / time.Microsecond)}
	conformance.RunAlgorithm(t, alg, func(t *testing.T) conformance.Harness {
		return (&brokenStore{defect: storeDefect, items: map[string]item{}}).harness(t)
	})
}

func runAlgorithmChild(t *testing.T, alg, store string) (string, bool) {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^TestBrokenAlgorithmHelper$", "-test.v", "-test.count=1", "-test.timeout=5m")
	cmd.Env = append(os.Environ(), "CONFORMANCE_ALG="+alg+"/"+store)
	out, err := cmd.CombinedOutput()
	if _, isExit := err.(*exec.ExitError); err != nil && !isExit {
		t.Fatalf("running RunAlgorithm in a child process: %v", err)
	}
	return string(out), err == nil
}

func TestRunAlgorithmPassesCorrectAlgorithm(t *testing.T) {
	out, passed := runAlgorithmChild(t, "", "")
	if !passed {
		t.Fatalf("RunAlgorithm fails a correct algorithm on a correct store:\n%s", failures(out))
	}
	for _, group := range []string{"Differential/seed-1", "Peek", "Concurrency/new-key", "Concurrency/existing-key"} {
		if !strings.Contains(out, "--- PASS: TestBrokenAlgorithmHelper/"+group) {
			t.Errorf("RunAlgorithm ran no passing subtest %s on a correct algorithm: the group checks nothing", group)
		}
	}
}

func TestRunAlgorithmCatchesBrokenAlgorithms(t *testing.T) {
	for _, c := range brokenAlgorithmCases {
		t.Run(c.alg+"/"+c.store+"/"+c.mustFail, func(t *testing.T) {
			t.Parallel()
			out, passed := runAlgorithmChild(t, c.alg, c.store)
			if passed {
				t.Fatalf("RunAlgorithm passes algorithm defect %q on store defect %q (rule: %s)", c.alg, c.store, c.rule)
			}
			if want := "--- FAIL: TestBrokenAlgorithmHelper/" + c.mustFail; !strings.Contains(out, want) {
				t.Errorf("algorithm defect %q, store defect %q (rule: %s): no failing subtest %s; failures were:\n%s", c.alg, c.store, c.rule, c.mustFail, failures(out))
			}
		})
	}
}

package conformance_test

import (
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/ratelimitkit/ratelimit/algorithms"
	"github.com/ratelimitkit/ratelimit/conformance"
	"github.com/ratelimitkit/ratelimit/store"
	"github.com/ratelimitkit/ratelimit/store/memory"
)

func memoryHarness(t *testing.T) conformance.Harness {
	s, err := memory.New()
	if err != nil {
		t.Fatal(err)
	}
	return conformance.Harness{Store: s, Twin: func(*testing.T) store.Store { return s }}
}

// correctSpace is the part of the space that holds on the code as it is
// (issue 29's open defects are in the root's issue29Open): every
// algorithm, call and option set except local quota, on monotonic clocks.
func correctSpace() conformance.CheckConfig {
	var cfg conformance.CheckConfig
	for _, s := range conformance.DefaultOptionSets() {
		if s.LocalQuota == nil {
			cfg.Options = append(cfg.Options, s)
		}
	}
	cfg.Clocks = []conformance.ClockMode{conformance.ClockMonotonic}
	return cfg
}

// TestCheckerPassesCorrectStore: a correct store passes the checker.
func TestCheckerPassesCorrectStore(t *testing.T) {
	conformance.Check(t, memoryHarness, correctSpace())
}

// windowModel is windowAlgorithm's promise: limit per aligned window, and
// everything that fits admitted.
type windowModel struct{ limit, period int64 }

func (m windowModel) Most(from, to int64) int64 {
	return m.limit * (to/m.period - from/m.period + 1)
}
func (m windowModel) Least(from, to int64) int64 { return m.Most(from, to) }

// userAlgorithmSpace draws only windowAlgorithm (with defect), with its
// model.
func userAlgorithmSpace(defect string) conformance.CheckConfig {
	const period = int64(time.Second / time.Microsecond)
	cfg := correctSpace()
	cfg.Options = []conformance.OptionSet{{Name: "none"}}
	cfg.NoBuiltins = true
	cfg.Algorithms = []conformance.CheckAlgorithm{{Alg: windowAlgorithm{defect: defect, limit: 7, period: period}, Model: windowModel{7, period}}}
	cfg.Calls = []conformance.Call{conformance.CallAllow, conformance.CallPeek, conformance.CallConcurrent, conformance.CallReserve, conformance.CallReset}
	return cfg
}

// TestCheckerUserAlgorithm puts a user's algorithm, with its model, through
// the checker (TestCheckerCatchesBrokenStores fails a broken one).
func TestCheckerUserAlgorithm(t *testing.T) {
	conformance.Check(t, memoryHarness, userAlgorithmSpace(""))
}

// TestCheckerReplaysTrace: CheckTrace replays a trace as a regression case.
func TestCheckerReplaysTrace(t *testing.T) {
	conformance.CheckTrace(t, memoryHarness, conformance.CheckConfig{}, conformance.Trace{
		Alg: algorithms.TokenBucket(10, time.Second, 5), Options: "none", Instances: 2,
		Steps: []conformance.Step{
			{Call: conformance.CallConcurrent, Cost: 1, Callers: 32},
			{Call: conformance.CallAllow, Advance: 100 * time.Millisecond, Cost: 1},
			{Call: conformance.CallReserve, Cost: 1, MaxDelay: time.Second},
			{Call: conformance.CallCancel},
			{Call: conformance.CallWait, Instance: 1, Cost: 1, Tick: 10 * time.Millisecond},
		},
	})
}

// TestCheckerHelper runs the checker on the broken store CHECKER_DEFECT
// names. It does nothing in a normal test run.
func TestCheckerHelper(t *testing.T) {
	defect, ok := os.LookupEnv("CHECKER_DEFECT")
	if !ok {
		t.Skip("runs only as the child process of TestCheckerCatchesBrokenStores")
	}
	cfg := correctSpace()
	if alg, ok := strings.CutPrefix(defect, "algorithm-"); ok {
		cfg = userAlgorithmSpace(alg)
	}
	cfg.Traces = 300
	conformance.Check(t, func(t *testing.T) conformance.Harness {
		if defect == "per-instance" {
			return instanceHarness(true, true)
		}
		s := &brokenStore{defect: strings.TrimPrefix(defect, "algorithm-"), items: map[string]item{}}
		return conformance.Harness{Store: s, Twin: func(*testing.T) store.Store { return s }}
	}, cfg)
}

// TestCheckerCatchesBrokenStores: the checker fails stores that over-admit
// (not atomic, atomic only inside one instance, losing writes) or decide
// by the wrong clock, and a user's algorithm whose Peek consumes, and
// reports the trace.
func TestCheckerCatchesBrokenStores(t *testing.T) {
	for _, defect := range []string{"not-atomic", "per-instance", "state-lost", "clock-ignored", "algorithm-peek-consumes"} {
		t.Run(defect, func(t *testing.T) {
			t.Parallel()
			cmd := exec.Command(os.Args[0], "-test.run=^TestCheckerHelper$", "-test.v", "-test.count=1", "-rapid.shrinktime=5s")
			cmd.Env = append(os.Environ(), "CHECKER_DEFECT="+defect)
			b, err := cmd.CombinedOutput()
			if _, isExit := err.(*exec.ExitError); err != nil && !isExit {
				t.Fatalf("running the checker in a child process: %v", err)
			}
			out := string(b)
			if err == nil {
				t.Fatalf("the checker passes a store with defect %q", defect)
			}
			for _, want := range []string{"trace: ", "as a regression case: conformance.CheckTrace("} {
				if !strings.Contains(out, want) {
					t.Errorf("defect %q: the checker's report does not say %q:\n%s", defect, want, lastLines(out, 30))
				}
			}
		})
	}
}

package conformance_test

import (
	"os"
	"os/exec"
	"strings"
	"testing"
)

// The lease groups must fail the suite's broken stores too: each defect
// below is caught by the named lease subtest (run alone in a child
// process, as TestSuiteCatchesBrokenStores does for the limiter groups).
var brokenLeaseCases = []struct {
	defect   string
	mustFail string // a subtest path under TestBrokenStoreHelper
	rule     string
}{
	{"not-atomic", "LeaseExclusion/goroutines/update", "a lease excludes every other holder"},
	{"ttl-dropped", "LeaseExpiry/update", "every key a lease writes carries an expiry"},
	{"clock-ignored", "LeaseTakeover/update", "expiry is judged by the time the locker passes"},
	{"state-lost", "LeaseTakeover/update", "a lease's record is kept"},
	{"keys-collide", "LeaseKeys/update", "leases and limiters never share state"},
	{"delete-ignored", "LeaseFences/update", "a lost record loses the lease"},
	{"context-ignored", "LeaseContext/update", "a context that ends is the context's error"},
}

func TestLeaseGroupsCatchBrokenStores(t *testing.T) {
	for _, c := range brokenLeaseCases {
		t.Run(c.defect, func(t *testing.T) {
			t.Parallel()
			cmd := exec.Command(os.Args[0], "-test.run=^TestBrokenStoreHelper$/^Lease", "-test.v", "-test.count=1")
			cmd.Env = append(os.Environ(), "CONFORMANCE_DEFECT="+c.defect)
			b, err := cmd.CombinedOutput()
			if _, isExit := err.(*exec.ExitError); err != nil && !isExit {
				t.Fatalf("running the lease groups in a child process: %v", err)
			}
			out := string(b)
			if err == nil {
				t.Fatalf("the lease groups pass a store with defect %q (rule: %s)", c.defect, c.rule)
			}
			if want := "--- FAIL: TestBrokenStoreHelper/" + c.mustFail; !strings.Contains(out, want) {
				t.Errorf("defect %q (rule: %s): no failing subtest %s; failures were:\n%s", c.defect, c.rule, c.mustFail, failures(out))
			}
		})
	}
}

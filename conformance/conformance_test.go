package conformance_test

import (
	"context"
	"os"
	"os/exec"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ratelimitkit/ratelimit"
	"github.com/ratelimitkit/ratelimit/conformance"
)

// A green run of the suite must mean something: each store below is broken
// in one way, and the suite must fail it in the named subtest. The suite is
// run in a child process (TestBrokenStoreHelper) so that its failures can
// be observed without failing this test.

// brokenStore is a small map-backed store with switchable defects. With no
// defect it is correct, and the suite must pass it.
type brokenStore struct {
	defect string

	mu     sync.Mutex
	items  map[string]item
	writes int
}

type item struct {
	state   []byte
	expires int64 // µs; 0 means never
}

func (s *brokenStore) mapKey(k ratelimit.Key) string {
	if s.defect == "keys-collide" {
		return k.ID // forgets the namespace: limiters share state
	}
	return k.String()
}

func (s *brokenStore) Update(ctx context.Context, key ratelimit.Key, now int64, fn ratelimit.UpdateFunc) error {
	if s.defect != "context-ignored" {
		if err := ctx.Err(); err != nil {
			return err
		}
	}
	if s.defect == "clock-ignored" {
		now = time.Now().UnixMicro()
	}
	k := s.mapKey(key)
	s.mu.Lock()
	it, ok := s.items[k]
	var cur []byte
	if ok && (it.expires == 0 || it.expires > now) {
		cur = append([]byte(nil), it.state...)
	}
	if s.defect == "not-atomic" {
		// Read, then compute and write without holding the lock: the
		// read-then-write race of hand-written limiters.
		s.mu.Unlock()
		runtime.Gosched()
		time.Sleep(50 * time.Microsecond)
		s.mu.Lock()
	}
	defer s.mu.Unlock()
	next, ttl, err := fn(cur, now)
	if err != nil || next == nil {
		return err
	}
	s.writes++
	if s.defect == "state-lost" && s.writes%3 == 0 {
		return nil // acknowledges the write but drops it
	}
	it = item{state: append([]byte(nil), next...), expires: now + ttl}
	if s.defect == "ttl-dropped" {
		it.expires = 0
	}
	s.items[k] = it
	return nil
}

func (s *brokenStore) Delete(ctx context.Context, key ratelimit.Key) error {
	if err := ctx.Err(); err != nil && s.defect != "context-ignored" {
		return err
	}
	if s.defect == "delete-ignored" {
		return nil
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.items, s.mapKey(key))
	return nil
}

func (s *brokenStore) harness(t *testing.T) conformance.Harness {
	return conformance.Harness{
		Store: s,
		Expiries: func(ctx context.Context) ([]conformance.Expiry, error) {
			s.mu.Lock()
			defer s.mu.Unlock()
			var list []conformance.Expiry
			for k, it := range s.items {
				list = append(list, conformance.Expiry{Key: k, Never: it.expires == 0, At: time.UnixMicro(it.expires)})
			}
			return list, nil
		},
	}
}

// brokenCases names each defect and a subtest that must fail because of it.
var brokenCases = []struct {
	defect   string
	mustFail string // a subtest path under TestBrokenStoreHelper
	rule     string
}{
	{"not-atomic", "Concurrency/update", "the read-modify-write must be atomic"},
	{"ttl-dropped", "Expiry/update", "every key written carries an expiry"},
	{"clock-ignored", "Boundaries/update", "the store uses the time it is given"},
	{"state-lost", "Differential/update", "a write that returns nil is stored"},
	{"keys-collide", "Keys/update", "limiters with different names do not share state"},
	{"delete-ignored", "Reset", "Delete removes the key's state"},
	{"context-ignored", "Context", "a store gives up when the context ends"},
}

// TestBrokenStoreHelper runs the suite on the store named by
// CONFORMANCE_DEFECT. It does nothing in a normal test run.
func TestBrokenStoreHelper(t *testing.T) {
	defect, ok := os.LookupEnv("CONFORMANCE_DEFECT")
	if !ok {
		t.Skip("runs only as the child process of TestSuiteCatchesBrokenStores")
	}
	conformance.Run(t, func(t *testing.T) conformance.Harness {
		s := &brokenStore{defect: defect, items: map[string]item{}}
		return s.harness(t)
	})
}

func runChild(t *testing.T, defect string) (string, bool) {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^TestBrokenStoreHelper$", "-test.v", "-test.count=1")
	cmd.Env = append(os.Environ(), "CONFORMANCE_DEFECT="+defect)
	out, err := cmd.CombinedOutput()
	if _, isExit := err.(*exec.ExitError); err != nil && !isExit {
		t.Fatalf("running the suite in a child process: %v", err)
	}
	return string(out), err == nil
}

func TestSuitePassesCorrectStore(t *testing.T) {
	t.Parallel()
	out, passed := runChild(t, "")
	if !passed {
		t.Fatalf("the suite fails a correct store:\n%s", failures(out))
	}
}

func TestSuiteCatchesBrokenStores(t *testing.T) {
	for _, c := range brokenCases {
		t.Run(c.defect, func(t *testing.T) {
			t.Parallel()
			out, passed := runChild(t, c.defect)
			if passed {
				t.Fatalf("the suite passes a store with defect %q (rule: %s)", c.defect, c.rule)
			}
			if want := "--- FAIL: TestBrokenStoreHelper/" + c.mustFail; !strings.Contains(out, want) {
				t.Errorf("defect %q (rule: %s): no failing subtest %s; failures were:\n%s", c.defect, c.rule, c.mustFail, failures(out))
			}
		})
	}
}

// failures returns the FAIL lines of go test -v output.
func failures(out string) string {
	var b strings.Builder
	for _, line := range strings.Split(out, "\n") {
		if strings.Contains(line, "--- FAIL") || strings.Contains(line, ".go:") {
			b.WriteString(line + "\n")
		}
	}
	return b.String()
}

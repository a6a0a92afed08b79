package conformance_test

import (
	"context"
	"os"
	"os/exec"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ratelimitkit/ratelimit/conformance"
	"github.com/ratelimitkit/ratelimit/store"
)

// A store whose read-modify-write is atomic only inside one instance (a
// per-instance mutex over a backend that two processes share) admits
// exactly the limit in a test that uses one instance, and over-admits in
// production, where every process has its own. The suite's concurrency
// groups run their goroutines over the Store and its Twin, so they must
// fail it (issue 29, defect 6).

// backend is what two instances of instanceStore share: the "server",
// whose single reads and writes are atomic, and a lock that a correct
// store's read-modify-write takes there (as a Lua script or a transaction
// serialises on the server).
type backend struct {
	mu    sync.Mutex // each single read or write
	items map[string]item
	rmw   sync.Mutex // the server-side lock a correct instance takes
}

func (b *backend) get(k string, now int64) []byte {
	b.mu.Lock()
	defer b.mu.Unlock()
	it, ok := b.items[k]
	if !ok || (it.expires != 0 && it.expires <= now) {
		return nil
	}
	return append([]byte(nil), it.state...)
}

func (b *backend) put(k string, state []byte, expires int64) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.items[k] = item{state: append([]byte(nil), state...), expires: expires}
}

func (b *backend) del(k string) {
	b.mu.Lock()
	defer b.mu.Unlock()
	delete(b.items, k)
}

// instanceStore is one instance (one process's client) of a store on b.
// Its Update holds rmw around the read, the decision and the write: the
// backend's lock for a correct store, a mutex of the instance's own for the
// broken one.
type instanceStore struct {
	b   *backend
	rmw *sync.Mutex
}

func (s *instanceStore) Update(ctx context.Context, key store.Key, now int64, fn store.UpdateFunc) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	s.rmw.Lock()
	defer s.rmw.Unlock()
	k := key.String()
	cur := s.b.get(k, now)
	time.Sleep(20 * time.Microsecond) // a round trip to the backend
	next, ttl, err := fn(cur, now)
	if err != nil || next == nil {
		return err
	}
	s.b.put(k, next, now+ttl)
	return nil
}

func (s *instanceStore) Delete(ctx context.Context, key store.Key) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	s.b.del(key.String())
	return nil
}

// instanceHarness returns a harness on a fresh backend: its Store and, when
// twin, its Twin are two instances on it, whose read-modify-write is
// atomic across both unless perInstance.
func instanceHarness(perInstance, twin bool) conformance.Harness {
	b := &backend{items: map[string]item{}}
	instance := func() *instanceStore {
		if perInstance {
			return &instanceStore{b: b, rmw: new(sync.Mutex)}
		}
		return &instanceStore{b: b, rmw: &b.rmw}
	}
	h := conformance.Harness{Store: instance()}
	if twin {
		h.Twin = func(t *testing.T) store.Store { return instance() }
	}
	return h
}

// TestInstanceStoreHelper runs the suite's concurrency groups on the store
// CONFORMANCE_INSTANCE names ("shared", "per-instance" or "per-instance,
// no twin"). It does nothing in a normal test run.
func TestInstanceStoreHelper(t *testing.T) {
	mode, ok := os.LookupEnv("CONFORMANCE_INSTANCE")
	if !ok {
		t.Skip("runs only as the child process of TestSuiteCatchesPerInstanceAtomicity")
	}
	conformance.Run(t, func(t *testing.T) conformance.Harness {
		return instanceHarness(strings.HasPrefix(mode, "per-instance"), !strings.HasSuffix(mode, "no twin"))
	})
}

func runInstanceChild(t *testing.T, mode string) (string, bool) {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^TestInstanceStoreHelper$/^(Concurrency|OwnAlgorithm)$", "-test.v", "-test.count=1", "-test.timeout=5m")
	cmd.Env = append(os.Environ(), "CONFORMANCE_INSTANCE="+mode)
	out, err := cmd.CombinedOutput()
	if _, isExit := err.(*exec.ExitError); err != nil && !isExit {
		t.Fatalf("running the suite in a child process: %v", err)
	}
	return string(out), err == nil
}

// TestSuiteCatchesPerInstanceAtomicity: the concurrency groups pass a
// store atomic across its instances, and fail one atomic only inside each,
// in Concurrency and OwnAlgorithm, once the harness gives them a Twin;
// without one they cannot tell the two apart (which is why every harness
// of a shared store sets Twin).
func TestSuiteCatchesPerInstanceAtomicity(t *testing.T) {
	cases := []struct {
		mode     string
		pass     bool
		mustFail []string
	}{
		{"shared", true, nil},
		{"per-instance", false, []string{"Concurrency/update/", "OwnAlgorithm"}},
		{"per-instance, no twin", true, nil}, // what the suite could not see before
	}
	for _, c := range cases {
		t.Run(c.mode, func(t *testing.T) {
			t.Parallel()
			out, passed := runInstanceChild(t, c.mode)
			if !strings.Contains(out, "--- PASS: TestInstanceStoreHelper/Concurrency/update/") && c.pass {
				t.Errorf("store %q: no passing Concurrency subtest ran:\n%s", c.mode, lastLines(out, 20))
			}
			switch {
			case c.pass && !passed:
				t.Fatalf("the concurrency groups fail a store %q they should pass:\n%s", c.mode, failures(out))
			case !c.pass && passed:
				t.Fatalf("the concurrency groups pass a store whose read-modify-write is atomic only inside one instance (rule: atomic across the store's instances, as across processes)")
			}
			for _, sub := range c.mustFail {
				if want := "--- FAIL: TestInstanceStoreHelper/" + sub; !strings.Contains(out, want) {
					t.Errorf("store %q: no failing subtest %s; failures were:\n%s", c.mode, sub, failures(out))
				}
			}
		})
	}
}

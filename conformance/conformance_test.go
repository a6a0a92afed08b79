package conformance_test

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ratelimitkit/ratelimit/algorithms"
	"github.com/ratelimitkit/ratelimit/algorithms/forms"
	"github.com/ratelimitkit/ratelimit/conformance"
	"github.com/ratelimitkit/ratelimit/store"
)

// A green run of the suite must mean something: each store below is broken
// in one way, and the suite must fail it in the named subtest. The suite is
// run in a child process (TestBrokenStoreHelper) so that its failures can
// be observed without failing this test.

// brokenStore is a small map-backed store with switchable defects. With no
// defect it is correct, and the suite must pass it.
type brokenStore struct {
	defect  string
	decider bool // implements store.Decider (see deciderStore)

	mu     sync.Mutex
	items  map[string]item
	writes int

	// frozen makes every call wait for thawed, as a backend that stopped
	// answering (Harness.Freeze).
	frozen atomic.Bool
	thawed chan struct{}

	// Under the defect "connect-wait-ignores-ctx", the connection a call
	// on the frozen backend gave up on: the next call opens another for
	// as long as its context allows, and the calls meanwhile wait for it
	// whatever their own contexts say, as a client's calls waiting on
	// another's dial may.
	conn struct {
		sync.Mutex
		broken  bool
		opening chan struct{} // closed when the call opening one gives up
	}
}

// connect is the "connect-wait-ignores-ctx" defect's connection: a call
// waits out a connection another call is opening, and opens one itself
// (until ctx ends, the backend being frozen) when the last was dropped.
func (s *brokenStore) connect(ctx context.Context) {
	s.conn.Lock()
	if opening := s.conn.opening; opening != nil {
		s.conn.Unlock()
		<-opening // whatever ctx says: the defect
		return
	}
	if !s.conn.broken {
		s.conn.Unlock()
		return
	}
	opening := make(chan struct{})
	s.conn.opening = opening
	s.conn.Unlock()
	select {
	case <-ctx.Done():
	case <-s.thawed:
	}
	s.conn.Lock()
	s.conn.opening = nil
	s.conn.Unlock()
	close(opening)
}

// hang is a call to a frozen backend: no answer until it thaws, and the
// store gives up when ctx ends, unless its defect is context-ignored.
func (s *brokenStore) hang(ctx context.Context) error {
	errThawed := errors.New("broken: the backend thawed")
	if s.defect == "context-ignored" {
		<-s.thawed
		return errThawed
	}
	if s.defect == "connect-wait-ignores-ctx" {
		s.connect(ctx)
	}
	select {
	case <-ctx.Done():
		if s.defect == "connect-wait-ignores-ctx" {
			s.conn.Lock()
			s.conn.broken = true // a client drops a connection whose reply never came
			s.conn.Unlock()
		}
		return ctx.Err()
	case <-s.thawed:
		return errThawed
	}
}

type item struct {
	state   []byte
	expires int64 // µs; 0 means never
}

func (s *brokenStore) mapKey(k store.Key) string {
	if s.defect == "keys-collide" {
		return k.ID // forgets the namespace: limiters share state
	}
	return k.String()
}

func (s *brokenStore) Update(ctx context.Context, key store.Key, now int64, fn store.UpdateFunc) error {
	if s.defect == "deadlock" {
		<-make(chan struct{}) // waits forever, whatever the context says
	}
	if s.frozen.Load() {
		return s.hang(ctx)
	}
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
	if ok && (it.expires == 0 || it.expires > now || s.defect == "stale-state") {
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

func (s *brokenStore) Delete(ctx context.Context, key store.Key) error {
	if s.frozen.Load() {
		return s.hang(ctx)
	}
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
	var timeout time.Duration
	if v := os.Getenv("CONFORMANCE_TIMEOUT"); v != "" {
		var err error
		if timeout, err = time.ParseDuration(v); err != nil {
			t.Fatal(err)
		}
	}
	h := conformance.Harness{
		Timeout: timeout,
		Store:   s,
		Expiries: func(ctx context.Context) ([]conformance.Expiry, error) {
			s.mu.Lock()
			defer s.mu.Unlock()
			var list []conformance.Expiry
			for k, it := range s.items {
				list = append(list, conformance.Expiry{Key: k, Never: it.expires == 0, At: time.UnixMicro(it.expires)})
			}
			return list, nil
		},
		State: func(ctx context.Context, key store.Key) ([]byte, int64, error) {
			s.mu.Lock()
			defer s.mu.Unlock()
			it, ok := s.items[s.mapKey(key)]
			if !ok {
				return nil, 0, nil
			}
			return append([]byte(nil), it.state...), it.expires, nil
		},
		ServerClock: func(t *testing.T) store.Store { return serverClockStore{s} },
		Freeze: func(t *testing.T) (store.Store, func()) {
			fs := &brokenStore{defect: s.defect, decider: s.decider, items: map[string]item{}, thawed: make(chan struct{})}
			t.Cleanup(func() { close(fs.thawed) })
			return fs.harness(t).Store, func() { fs.frozen.Store(true) }
		},
	}
	if s.decider {
		h.Store = deciderStore{s, false}
		h.ServerClock = func(t *testing.T) store.Store { return deciderStore{s, true} }
		h.DecidesAllBuiltins = true
	}
	return h
}

// serverClockStore is s reading its "server's" clock: this machine's.
type serverClockStore struct{ *brokenStore }

func (s serverClockStore) Update(ctx context.Context, key store.Key, now int64, fn store.UpdateFunc) error {
	return s.brokenStore.Update(ctx, key, time.Now().UnixMicro(), fn)
}

// deciderStore is s with a Decider that runs the Go form under s's lock,
// as a server-side form would run next to the data, with switchable defects
// of the kind a hand-written server form can have.
type deciderStore struct {
	*brokenStore
	serverClock bool
}

func (s deciderStore) Update(ctx context.Context, key store.Key, now int64, fn store.UpdateFunc) error {
	if s.serverClock {
		now = time.Now().UnixMicro()
	}
	return s.brokenStore.Update(ctx, key, now, fn)
}

func (s deciderStore) Decide(ctx context.Context, key store.Key, alg algorithms.Algorithm, req algorithms.Request) (algorithms.Decision, error) {
	if s.serverClock && s.defect != "decider-server-clock-ignored" {
		req.Now = time.Now().UnixMicro()
	}
	if s.defect == "decider-form-missing" && forms.BuiltinOf(alg) == forms.Builtins()[0] {
		return algorithms.Decision{}, fmt.Errorf("broken: no form for %s: %w", alg.Name(), store.ErrUnsupported)
	}
	if c, ok := alg.(algorithms.Composite); ok && s.defect == "decider-partial" {
		// Each limit as a limiter of its own, called one after the other:
		// a limit that admits consumes even when another denies.
		var parts []algorithms.Decision
		for i, p := range c.Parts() {
			k := key
			k.ID = fmt.Sprintf("%s#%d", key.ID, i)
			var d algorithms.Decision
			err := s.brokenStore.Update(ctx, k, req.Now, func(cur []byte, now int64) ([]byte, int64, error) {
				r := req
				r.Now = now
				step, err := p.Decide(cur, r)
				d = step.Decision
				return step.Next, step.TTL, err
			})
			if err != nil {
				return algorithms.Decision{}, err
			}
			parts = append(parts, d)
		}
		return algorithms.Combine(parts), nil
	}
	var d algorithms.Decision
	err := s.brokenStore.Update(ctx, key, req.Now, func(cur []byte, now int64) ([]byte, int64, error) {
		r := req
		r.Now = now
		if s.defect == "decider-cost-ignored" {
			r.Cost = 1
		}
		pre := append([]byte(nil), cur...)
		step, err := alg.Decide(cur, r)
		if err != nil {
			return nil, 0, err
		}
		d = step.Decision
		switch s.defect {
		case "decider-last-now":
			// A form that stores last = now where the Go form keeps
			// max(last, now): the bucket then refills twice for the time
			// between a write and a request from a clock behind it.
			if n := alg.Name(); step.Next != nil && (n == "token_bucket" || n == "leaky_bucket") {
				binary.LittleEndian.PutUint64(step.Next[8:], uint64(now))
			}
		case "decider-retry-floor":
			if alg.Name() == "token_bucket" && !d.Allowed {
				d.RetryAfter = floorRetry(alg, pre, r, d.RetryAfter)
			}
		}
		return step.Next, step.TTL, nil
	})
	return d, err
}

// floorRetry is the token bucket's retry-after with the division by the
// drip rounded down instead of up, as a form that wrote floor for the
// ceiling idiom would give: over/drip where the Go form has ceil(over/drip)
// for the missing units over = deficit + need − capacity. It recomputes
// the deficit only for state in the algorithm's own unit (the common case)
// and returns ceil unchanged otherwise.
func floorRetry(alg algorithms.Algorithm, state []byte, req algorithms.Request, ceil int64) int64 {
	a := alg.(forms.ServerForm).ServerArgs() // unit, drip, capacity, fill, burst
	unit, drip, capacity, fill := a[0], a[1], a[2], a[3]
	deficit := int64(0)
	if len(state) == 24 {
		f := func(i int) int64 { return int64(binary.LittleEndian.Uint64(state[8*i:])) }
		if f(2) != unit {
			return ceil
		}
		deficit = min(f(0), capacity)
		switch elapsed := req.Now - f(1); {
		case elapsed >= fill:
			deficit = 0
		case elapsed > 0:
			deficit = max(deficit-elapsed*drip, 0)
		}
	}
	return (deficit + req.Cost*unit - capacity) / drip
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
	{"stale-state", "StaleState/expired", "Update hands fn no state once its TTL has passed"},
	{"keys-collide", "Keys/update", "limiters with different names do not share state"},
	{"delete-ignored", "Reset", "Delete removes the key's state"},
	{"context-ignored", "Context", "a store gives up when the context ends"},
	{"decider-last-now", "Differential/server/", "a server form keeps max(last, now), as the Go form does, when the clock steps back"},
	{"decider-last-now+nostate", "Differential/server/", "decisions alone expose the last = now drift once the clock steps back"},
	{"decider-retry-floor", "Differential/server/", "a server form rounds a retry-after up, as the Go form does"},
	{"decider-cost-ignored", "Differential/server/", "a server form charges the request's cost"},
	{"decider-form-missing", "Concurrency/server/", "a store that says it decides every built-in has a form for each (a limiter would silently use Update)"},
	{"decider-server-clock-ignored", "DifferentialServerClock/server/", "a store on its server's clock decides by it"},
	{"decider-partial", "Composite/server/Concurrency-0/", "a composite's denied request consumes from no limit"},
	{"decider-partial", "Composite/server/Boundaries", "a composite's denied request consumes from no limit"},
	{"context-ignored", "FaultHungStore/frozen", "a store honours its context when its server stops answering, so every call keeps its bound"},
	{"connect-wait-ignores-ctx", "FaultHungStore/reconnect", "a call waiting for a connection another call is opening still ends with its own context"},
	{"do-no-deadline-check", "FaultDoSlowReply/past-deadline", "Do never starts the work on a lease whose reply came after its deadline"},
	{"do-no-deadline-check", "FaultDoSlowReply/within-margin", "Do never starts the work with less than a safety margin of its lease left"},
	{"do-no-deadline-check", "FaultDoPanic", "Do releases the lease when the work panics"},
	{"breaker-blames-caller", "FaultBreaker/caller-deadlines", "the breaker opens only on store faults, never on a caller's own deadline"},
	{"quota-keeps-share", "LocalQuota/update/fixed_window/shares-expire", "a local-quota share is not spent once its window is over"},
	{"quota-keeps-share", "LocalQuota/update/gcra/shares-expire", "a local-quota share is not spent once its lifetime is over"},
	{"quota-keeps-share", "LocalQuota/update/fixed_window/never-drops", "no unit the store counted for a local-quota share is dropped: it is spent or given back"},
}

// TestBrokenStoreHelper runs the suite on the store named by
// CONFORMANCE_DEFECT. It does nothing in a normal test run.
func TestBrokenStoreHelper(t *testing.T) {
	defect, ok := os.LookupEnv("CONFORMANCE_DEFECT")
	if !ok {
		t.Skip("runs only as the child process of TestSuiteCatchesBrokenStores")
	}
	defect, noState := strings.CutSuffix(defect, "+nostate")
	useBrokenSubject(defect)
	conformance.Run(t, func(t *testing.T) conformance.Harness {
		s := &brokenStore{defect: defect, items: map[string]item{}}
		if strings.HasPrefix(defect, "decider") {
			s.decider, s.defect = true, strings.TrimPrefix(defect, "decider-correct")
		}
		h := s.harness(t)
		if noState {
			h.State = nil // compare decisions only
		}
		return h
	})
}

func runChild(t *testing.T, defect string, env ...string) (string, bool) {
	t.Helper()
	return runChildGroups(t, defect, "", env...)
}

// runChildGroups runs the groups whose names match the pattern groups (all
// when empty) on the store with defect in a child process.
func runChildGroups(t *testing.T, defect, groups string, env ...string) (string, bool) {
	t.Helper()
	run := "^TestBrokenStoreHelper$"
	if groups != "" {
		run += "/" + groups
	}
	cmd := exec.Command(os.Args[0], "-test.run="+run, "-test.v", "-test.count=1", "-test.timeout=5m")
	cmd.Env = append(append(os.Environ(), "CONFORMANCE_DEFECT="+defect), env...)
	out, err := cmd.CombinedOutput()
	if _, isExit := err.(*exec.ExitError); err != nil && !isExit {
		t.Fatalf("running the suite in a child process: %v", err)
	}
	return string(out), err == nil
}

func TestSuitePassesCorrectStore(t *testing.T) {
	for _, mode := range []string{"", "decider-correct"} {
		t.Run("mode="+mode, func(t *testing.T) {
			t.Parallel()
			out, passed := runChild(t, mode)
			if !passed {
				t.Fatalf("the suite fails a correct store (%q):\n%s", mode, failures(out))
			}
			groups := []string{"Differential/update/", "DifferentialServerClock/update/"}
			if mode != "" {
				groups = append(groups, "Differential/server/", "DifferentialServerClock/server/")
			}
			for _, group := range groups {
				if !strings.Contains(out, "--- PASS: TestBrokenStoreHelper/"+group) {
					t.Errorf("the suite ran no passing subtest %s on a correct store (%q): the group checks nothing", group, mode)
				}
			}
		})
	}
}

func TestSuiteCatchesBrokenStores(t *testing.T) {
	for _, c := range brokenCases {
		t.Run(c.defect, func(t *testing.T) {
			t.Parallel()
			groups := ""
			if strings.HasPrefix(c.mustFail, "Fault") {
				groups = "^Fault" // the fault groups alone catch these
			}
			if strings.HasPrefix(c.mustFail, "LocalQuota") {
				groups = "^LocalQuota" // and the LocalQuota group these
			}
			out, passed := runChildGroups(t, c.defect, groups)
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

// TestWatchdogNamesHungSubtest runs the suite on a store whose Update never
// returns: the watchdog must end the run soon after its time limit, naming
// the subtest that hung, instead of letting it hang until go test's
// -timeout.
func TestWatchdogNamesHungSubtest(t *testing.T) {
	t.Parallel()
	start := time.Now()
	out, passed := runChild(t, "deadlock", "CONFORMANCE_TIMEOUT=500ms")
	took := time.Since(start)
	if passed {
		t.Fatal("the suite passes a store that deadlocks")
	}
	// The first subtest that calls Update is the first concurrency test.
	const want = "conformance: subtest TestBrokenStoreHelper/Concurrency/update/fixed_window/new-key made no progress for 500ms"
	if !strings.Contains(out, want) {
		t.Errorf("the suite's report on a deadlocked store does not say %q:\n%s", want, lastLines(out, 20))
	}
	if took > time.Minute {
		t.Errorf("the suite took %v to give up on a deadlocked store, want about its 500ms limit", took)
	}
}

// lastLines returns the last n lines of out.
func lastLines(out string, n int) string {
	lines := strings.Split(out, "\n")
	return strings.Join(lines[max(len(lines)-n, 0):], "\n")
}

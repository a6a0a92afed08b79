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
	"github.com/ratelimitkit/ratelimit/store/memory"
)

// clampedStore is a memory store reached through Update alone, with the
// defect "clamped": it keeps its clock monotonic, handing the algorithm the
// latest time it has seen when a request's reading is older, but sets the
// state's expiry from the request's own reading. So a state written by a
// reading older than the state expires early by the time the reading lies
// behind, and the key comes back rested: what issue 29 measured of the
// buckets before they measured their TTL from the request's own now.
type clampedStore struct {
	s      *memory.Store
	defect string

	mu   sync.Mutex
	last int64
}

func (c *clampedStore) Update(ctx context.Context, key store.Key, now int64, fn store.UpdateFunc) error {
	if c.defect != "clamped" {
		return c.s.Update(ctx, key, now, fn)
	}
	c.mu.Lock()
	c.last = max(c.last, now)
	latest := c.last
	c.mu.Unlock()
	return c.s.Update(ctx, key, now, func(cur []byte, _ int64) ([]byte, int64, error) {
		return fn(cur, latest) // the memory store sets the expiry from now
	})
}

func (c *clampedStore) Delete(ctx context.Context, key store.Key) error {
	return c.s.Delete(ctx, key)
}

// TestBrokenClampHelper runs the StaleReading group on the store named by
// CONFORMANCE_CLAMP_DEFECT. It does nothing in a normal test run.
func TestBrokenClampHelper(t *testing.T) {
	defect, ok := os.LookupEnv("CONFORMANCE_CLAMP_DEFECT")
	if !ok {
		t.Skip("runs only as the child process of TestStaleReadingCatchesClampedStore")
	}
	conformance.Run(t, func(t *testing.T) conformance.Harness {
		s := memory.MustNew()
		return conformance.Harness{
			Store: &clampedStore{s: s, defect: defect},
			Expiries: func(ctx context.Context) ([]conformance.Expiry, error) {
				var list []conformance.Expiry
				s.Expiries(func(k store.Key, expires int64) {
					list = append(list, conformance.Expiry{Key: k.String(), At: time.UnixMicro(expires)})
				})
				return list, nil
			},
		}
	})
}

// TestStaleReadingCatchesClampedStore runs the StaleReading group on the
// correct store, which must pass, and on the clamped one, which must fail
// it for the token bucket (its state expires early).
func TestStaleReadingCatchesClampedStore(t *testing.T) {
	for _, defect := range []string{"", "clamped"} {
		t.Run("defect="+defect, func(t *testing.T) {
			t.Parallel()
			cmd := exec.Command(os.Args[0], "-test.run=^TestBrokenClampHelper$/^StaleReading$", "-test.v", "-test.count=1")
			cmd.Env = append(os.Environ(), "CONFORMANCE_CLAMP_DEFECT="+defect)
			b, err := cmd.CombinedOutput()
			if _, isExit := err.(*exec.ExitError); err != nil && !isExit {
				t.Fatalf("running the StaleReading group in a child process: %v", err)
			}
			out := string(b)
			const bucket = "TestBrokenClampHelper/StaleReading/update/token_bucket-6-spent-9/2s"
			switch {
			case defect == "" && err != nil:
				t.Fatalf("the StaleReading group fails a correct store:\n%s", failures(out))
			case defect == "" && !strings.Contains(out, "--- PASS: "+bucket):
				t.Fatalf("the StaleReading group ran no passing %s on a correct store:\n%s", bucket, lastLines(out, 30))
			case defect != "" && !strings.Contains(out, "--- FAIL: "+bucket):
				t.Fatalf("the StaleReading group does not fail %s on a store that sets expiry from a reading older than the time it decided at (rule: the state's expiry covers its latest time):\n%s", bucket, failures(out))
			}
		})
	}
}

package storetest

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/ratelimitkit/ratelimit"
)

// AdmitsExactly makes perKey decisions on each of keys keys ("k0",
// "k1", ...) from callers goroutines that take the next decision of the
// lot as they become free, so that one key's decisions meet in batches
// and runs with other keys', and checks that each key admits exactly
// limit of them: no error, no decision lost or made twice.
func AdmitsExactly(t *testing.T, lim *ratelimit.Limiter, keys, perKey, limit, callers int) {
	t.Helper()
	var next atomic.Int64
	admitted := make([]atomic.Int64, keys)
	var wg sync.WaitGroup
	errs := make(chan error, callers)
	for range callers {
		wg.Go(func() {
			for {
				i := int(next.Add(1) - 1)
				if i >= keys*perKey {
					return
				}
				d, err := lim.Allow(context.Background(), fmt.Sprintf("k%d", i%keys))
				if err != nil {
					errs <- err
					return
				}
				if d.Allowed {
					admitted[i%keys].Add(1)
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	for k := range keys {
		if got := admitted[k].Load(); got != int64(limit) {
			t.Errorf("key k%d: %d of %d decisions admitted, want exactly %d", k, got, perKey, limit)
		}
	}
}

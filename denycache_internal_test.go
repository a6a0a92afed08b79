package ratelimit

import (
	"fmt"
	"testing"
	"time"

	"github.com/ratelimitkit/ratelimit/algorithms"
)

// TestDenyCacheBounded fills a deny cache far past its size and checks
// that it never holds more keys than it was given, and that a key denied
// last is still there.
func TestDenyCacheBounded(t *testing.T) {
	for _, size := range []int{1, 5, 16, 100, 1000} {
		c := newDenyCache(size)
		denied := Decision{RetryAfter: time.Hour}
		for i := range 20 * size {
			key := fmt.Sprint("key-", i)
			c.remember(key, testTier, algorithms.Request{Now: int64(i), Cost: 1}, &denied)
			if n := c.len(); n > size {
				t.Fatalf("deny cache of size %d holds %d keys after %d denials", size, n, i+1)
			}
			var d Decision
			if !c.lookup(key, testTier, algorithms.Request{Now: int64(i), Cost: 1}, &d) {
				t.Fatalf("deny cache of size %d lost %s right after storing it", size, key)
			}
		}
	}
}

// TestDenyCacheReclaimsExpired checks that a full cache makes room with
// expired entries before live ones.
func TestDenyCacheReclaimsExpired(t *testing.T) {
	c := newDenyCache(1)
	c.remember("old", testTier, algorithms.Request{Now: 0, Cost: 1}, &Decision{RetryAfter: time.Microsecond})
	c.remember("new", testTier, algorithms.Request{Now: 10, Cost: 1}, &Decision{RetryAfter: time.Hour})
	var d Decision
	if c.len() != 1 || !c.lookup("new", testTier, algorithms.Request{Now: 10, Cost: 1}, &d) {
		t.Errorf("a full deny cache of 1 did not replace its expired entry: %d keys", c.len())
	}
}

// testTier is the tier the cache's own tests remember denials at.
var testTier = &Tier{}

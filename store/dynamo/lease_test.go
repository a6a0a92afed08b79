package dynamo_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/ratelimitkit/ratelimit"
	"github.com/ratelimitkit/ratelimit/algorithms"
	"github.com/ratelimitkit/ratelimit/internal/testserver"
	"github.com/ratelimitkit/ratelimit/lease"
	"github.com/ratelimitkit/ratelimit/lease/leasewire"
	"github.com/ratelimitkit/ratelimit/store/dynamo"
)

// The store runs the lease's transition itself, to confirm what its cache
// says of a held key.
var _ leasewire.Runner = (*dynamo.Store)(nil)

// TestLeaseHandOver checks that a key released through one store instance
// (one process) is taken by another instance on the same table, already
// waiting in Acquire and whose cache says the key is held, within twice
// its poll interval, not when the released lease would have run out; and
// that limiters keep answering denials from the cache.
func TestLeaseHandOver(t *testing.T) {
	client := newClient(testserver.DynamoDBEndpoint(t))
	table := newTable(t, client)
	c1, c2 := &counter{Client: client}, &counter{Client: client}
	s1, err := dynamo.New(c1, dynamo.WithTable(table))
	if err != nil {
		t.Fatal(err)
	}
	s2, err := dynamo.New(c2, dynamo.WithTable(table))
	if err != nil {
		t.Fatal(err)
	}
	const ttl, poll = 3 * time.Second, 100 * time.Millisecond
	lk1, err := lease.New(s1, ttl, lease.WithPollInterval(poll))
	if err != nil {
		t.Fatal(err)
	}
	lk2, err := lease.New(s2, ttl, lease.WithPollInterval(poll))
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	for trial := 0; trial < 3; trial++ {
		key := fmt.Sprintf("k%d", trial)
		held, err := lk1.TryAcquire(ctx, key)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := lk2.TryAcquire(ctx, key); !errors.Is(err, lease.ErrHeld) {
			t.Fatalf("the second instance's TryAcquire of a held key = %v, want ErrHeld", err)
		}
		type got struct {
			at  time.Time
			err error
		}
		taken := make(chan got, 1)
		go func() {
			actx, cancel := context.WithTimeout(ctx, 2*ttl)
			defer cancel()
			le, err := lk2.Acquire(actx, key)
			at := time.Now()
			if err == nil {
				err = le.Release(ctx)
			}
			taken <- got{at, err}
		}()
		time.Sleep(2 * poll) // the second instance polls the held key
		released := time.Now()
		if err := held.Release(ctx); err != nil {
			t.Fatal(err)
		}
		g := <-taken
		if g.err != nil {
			t.Fatalf("the second instance's Acquire: %v", g.err)
		}
		handOver := g.at.Sub(released)
		t.Logf("trial %d: hand-over %v (poll %v, TTL %v)", trial, handOver.Round(time.Millisecond), poll, ttl)
		if handOver >= 2*poll {
			t.Errorf("trial %d: a key released by one instance was taken by another %v later, want under twice the poll interval %v (rule: the cache's \"held\" is confirmed by the table)", trial, handOver, 2*poll)
		}
	}
	// A limiter's denial is still answered from the cache, without a
	// request.
	lim, err := ratelimit.New(s2, algorithms.FixedWindow(1, time.Hour), ratelimit.WithName("handover"))
	if err != nil {
		t.Fatal(err)
	}
	if d, err := lim.Allow(ctx, "u"); err != nil || !d.Allowed {
		t.Fatalf("lim.Allow = %+v, %v; want allowed", d, err)
	}
	c2.reset()
	if d, err := lim.Allow(ctx, "u"); err != nil || d.Allowed {
		t.Fatalf("second lim.Allow = %+v, %v; want denied", d, err)
	}
	if n := c2.total(); n != 0 {
		t.Errorf("a denial on a key the store knows made %d requests, want 0 (the cache's savings for limiters)", n)
	}
}

package redisengine

import (
	"context"
	"errors"
	"testing"
	"time"
)

// TestBatchContext holds a batch's context to its two forms: for an
// Overlapper's batch, the latest of its callers' deadlines as its own; for
// any other's, no deadline (which a client would put on a connection that
// other batches share) but an end at that same time, with Err then
// context.DeadlineExceeded. Neither ends when a caller's context is
// canceled, and a caller without a deadline leaves the batch without one.
func TestBatchContext(t *testing.T) {
	type key struct{}
	parent := context.WithValue(context.Background(), key{}, "v")
	short, cancelShort := context.WithTimeout(parent, 20*time.Millisecond)
	defer cancelShort()
	long, cancelLong := context.WithTimeout(parent, 60*time.Millisecond)
	defer cancelLong()
	latest, _ := long.Deadline()
	batch := []*pending{{ctx: short}, {ctx: long}}

	ctx, cancel := batchContext(batch, true)
	if d, ok := ctx.Deadline(); !ok || !d.Equal(latest) {
		t.Errorf("an Overlapper's batch: deadline %v (%v), want the latest caller's, %v", d, ok, latest)
	}
	cancel()

	ctx, cancel = batchContext(batch, false)
	defer cancel()
	if d, ok := ctx.Deadline(); ok {
		t.Errorf("a shared connection's batch has the deadline %v, want none", d)
	}
	if v := ctx.Value(key{}); v != "v" {
		t.Errorf("Value = %v, want the first caller's", v)
	}
	cancelShort() // a caller's cancellation does not end the batch
	select {
	case <-ctx.Done():
		if time.Now().Before(latest) {
			t.Errorf("ended at %v, before its callers' latest deadline %v", time.Now(), latest)
		}
	case <-time.After(2 * time.Second):
		t.Fatal("not ended 2s after its callers' latest deadline")
	}
	if err := ctx.Err(); !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("Err = %v, want context.DeadlineExceeded", err)
	}

	batch = append(batch, &pending{ctx: parent})
	for _, deadline := range []bool{true, false} {
		ctx, cancel := batchContext(batch, deadline)
		if _, ok := ctx.Deadline(); ok || ctx.Done() != nil {
			t.Errorf("a batch with a caller without a deadline (deadline form %v) can end, want it not to", deadline)
		}
		cancel()
	}
}

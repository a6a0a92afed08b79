package mapstore

import (
	"context"
	"testing"
	"time"

	"github.com/ratelimitkit/ratelimit/conformance"
	"github.com/ratelimitkit/ratelimit/store"
)

// TestConformance runs the whole suite on the store: a store of your own
// keeps this test, with its harness reading your backend.
func TestConformance(t *testing.T) {
	conformance.Run(t, func(t *testing.T) conformance.Harness {
		s := New()
		return conformance.Harness{
			Store: s,
			// The backend's keys with their expiries, so the suite proves
			// every write carries one.
			Expiries: func(ctx context.Context) ([]conformance.Expiry, error) {
				s.mu.Lock()
				defer s.mu.Unlock()
				var out []conformance.Expiry
				for k, it := range s.items {
					out = append(out, conformance.Expiry{Key: k.String(), At: time.UnixMicro(it.expires)})
				}
				return out, nil
			},
			// The state holds the Go form's bytes already, so the suite
			// can compare every write with the Go form's.
			State: func(ctx context.Context, key store.Key) ([]byte, int64, error) {
				s.mu.Lock()
				defer s.mu.Unlock()
				it, ok := s.items[key]
				if !ok {
					return nil, 0, nil
				}
				return append([]byte(nil), it.state...), it.expires, nil
			},
		}
	})
}

// TestSweep checks that expired state is deleted, not only ignored: after
// sweepEvery writes past the expiry of a key, the map no longer holds it.
func TestSweep(t *testing.T) {
	s := New()
	ctx := context.Background()
	write := func(id string, now int64) {
		t.Helper()
		err := s.Update(ctx, store.Key{Namespace: "n:a", ID: id}, now, func(cur []byte, now int64) ([]byte, int64, error) {
			return []byte{1}, 10, nil
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	write("old", 0)
	for range sweepEvery {
		write("new", 100)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, ok := s.items[store.Key{Namespace: "n:a", ID: "old"}]; ok {
		t.Errorf("after %d writes at t=100µs, the state that expired at t=10µs is still in the map", sweepEvery)
	}
	if len(s.items) != 1 {
		t.Errorf("the map holds %d keys, want 1", len(s.items))
	}
}

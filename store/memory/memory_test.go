package memory_test

import (
	"context"
	"testing"
	"time"

	"github.com/ratelimitkit/ratelimit/conformance"
	"github.com/ratelimitkit/ratelimit/store"
	"github.com/ratelimitkit/ratelimit/store/memory"
)

func harness(t *testing.T) conformance.Harness {
	s := memory.MustNew()
	return conformance.Harness{
		Store: s,
		Expiries: func(ctx context.Context) ([]conformance.Expiry, error) {
			var list []conformance.Expiry
			s.Expiries(func(k store.Key, expires int64) {
				list = append(list, conformance.Expiry{Key: k.String(), At: time.UnixMicro(expires)})
			})
			return list, nil
		},
		DecidesAllBuiltins: true, // its Decider runs every Go form
		// One process holds one memory store: a second instance over the
		// same backend is the same store.
		Twin: func(t *testing.T) store.Store { return s },
	}
}

func TestConformance(t *testing.T) {
	conformance.Run(t, harness)
}

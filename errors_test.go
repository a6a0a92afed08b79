package ratelimit_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/ratelimitkit/ratelimit"
	"github.com/ratelimitkit/ratelimit/algorithms"
	"github.com/ratelimitkit/ratelimit/store"
	"github.com/ratelimitkit/ratelimit/store/memory"
)

// TestErrorsAliasTheStoreContract checks that each error of package
// ratelimit is the very value a store returns (package store's or
// algorithms'), so errors.Is answers the same whichever package a user
// names, and that the messages users read are the ones they always were.
func TestErrorsAliasTheStoreContract(t *testing.T) {
	for _, c := range []struct {
		name       string
		root, home error
		msg        string
	}{
		{"ErrInvalidParams", ratelimit.ErrInvalidParams, algorithms.ErrInvalidParams, "ratelimit: invalid parameters"},
		{"ErrCorruptState", ratelimit.ErrCorruptState, algorithms.ErrCorruptState, "ratelimit: corrupt state"},
		{"ErrInvalidKey", ratelimit.ErrInvalidKey, store.ErrInvalidKey, "ratelimit: invalid key"},
		{"ErrInvalidCost", ratelimit.ErrInvalidCost, store.ErrInvalidCost, "ratelimit: invalid cost"},
		{"ErrInvalidTime", ratelimit.ErrInvalidTime, store.ErrInvalidTime, "ratelimit: invalid time"},
	} {
		if c.root != c.home {
			t.Errorf("ratelimit.%s is not the value the store contract defines", c.name)
		}
		wrapped := fmt.Errorf("a store's failure: %w", c.home)
		if !errors.Is(wrapped, c.root) {
			t.Errorf("errors.Is(store error wrapping %s, ratelimit.%s) = false", c.name, c.name)
		}
		if got := c.root.Error(); got != c.msg {
			t.Errorf("ratelimit.%s.Error() = %q, want %q", c.name, got, c.msg)
		}
	}

	// A store returns the contract's values and a user checks the root's:
	// the memory store refuses a key bound below its shard count.
	if _, err := memory.New(memory.WithMaxKeys(1)); !errors.Is(err, ratelimit.ErrInvalidParams) {
		t.Errorf("memory.New(WithMaxKeys(1)) error = %v, want ratelimit.ErrInvalidParams", err)
	}
	// And the limiter's own checks return the values a store author sees.
	st, err := memory.New()
	if err != nil {
		t.Fatal(err)
	}
	lim, err := ratelimit.New(st, algorithms.GCRA(10, time.Second, 5))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := lim.AllowN(context.Background(), "k", 6); !errors.Is(err, store.ErrInvalidCost) {
		t.Errorf("AllowN with cost 6 above a burst of 5: error = %v, want store.ErrInvalidCost", err)
	}
	if _, err := lim.Allow(context.Background(), ""); !errors.Is(err, store.ErrInvalidKey) {
		t.Errorf("Allow with an empty key: error = %v, want store.ErrInvalidKey", err)
	}
}

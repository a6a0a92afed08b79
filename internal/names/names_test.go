package names_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/ratelimitkit/ratelimit/algorithms"
	"github.com/ratelimitkit/ratelimit/internal/names"
	"github.com/ratelimitkit/ratelimit/store"
)

// TestMaxKeyLen holds the limit this package checks to the one package
// store documents.
func TestMaxKeyLen(t *testing.T) {
	if names.MaxKeyLen != store.MaxKeyLen {
		t.Fatalf("names.MaxKeyLen = %d, store.MaxKeyLen = %d", names.MaxKeyLen, store.MaxKeyLen)
	}
	if err := names.CheckKey(strings.Repeat("k", store.MaxKeyLen)); err != nil {
		t.Errorf("a key of MaxKeyLen bytes: %v", err)
	}
	for _, k := range []string{"", strings.Repeat("k", store.MaxKeyLen+1)} {
		if err := names.CheckKey(k); !errors.Is(err, names.ErrInvalidKey) {
			t.Errorf("CheckKey(%d bytes) = %v, want ErrInvalidKey", len(k), err)
		}
	}
}

func TestCheckName(t *testing.T) {
	for _, ok := range []string{"a", "api-v1.x_2", strings.Repeat("n", 64)} {
		if err := names.CheckName("name", ok); err != nil {
			t.Errorf("CheckName(%q) = %v", ok, err)
		}
	}
	for _, bad := range []string{"", strings.Repeat("n", 65), "a:b", "a b", "{x}", "é"} {
		if err := names.CheckName("name", bad); !errors.Is(err, algorithms.ErrInvalidParams) {
			t.Errorf("CheckName(%q) = %v, want ErrInvalidParams", bad, err)
		}
	}
	if err := names.CheckNamespace("api:gcra"); err != nil {
		t.Errorf("CheckNamespace(api:gcra) = %v", err)
	}
	for _, bad := range []string{"api", "api:", ":gcra", "a:b:c", "a b:gcra"} {
		if err := names.CheckNamespace(bad); !errors.Is(err, names.ErrInvalidKey) {
			t.Errorf("CheckNamespace(%q) = %v, want ErrInvalidKey", bad, err)
		}
	}
}

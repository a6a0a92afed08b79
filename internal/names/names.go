// Package names checks the names and keys a Limiter and a lease Locker
// accept, for the packages of this module that take them (ratelimit,
// lease, statefile, store): the rules are written here once.
package names

import (
	"errors"
	"fmt"
	"strings"

	"github.com/ratelimitkit/ratelimit/algorithms"
	"github.com/ratelimitkit/ratelimit/internal/echo"
)

// MaxKeyLen is the longest key, in bytes, a Limiter or a Locker accepts.
const MaxKeyLen = 512

// ErrInvalidKey reports an empty or oversized key; packages store and
// ratelimit export it.
var ErrInvalidKey = errors.New("ratelimit: invalid key")

// CheckKey reports whether key may be a key: 1 to MaxKeyLen bytes. The
// error wraps ErrInvalidKey. It is small enough to inline; the error is
// built out of line.
func CheckKey(key string) error {
	if key == "" || len(key) > MaxKeyLen {
		return keyError(key)
	}
	return nil
}

func keyError(key string) error {
	if key == "" {
		return fmt.Errorf("%w: empty key", ErrInvalidKey)
	}
	return fmt.Errorf("%w: key of %d bytes exceeds %d", ErrInvalidKey, len(key), MaxKeyLen)
}

// CheckName reports whether name may name a limiter, an algorithm or a
// lease locker: 1 to 64 characters of [A-Za-z0-9_.-]. what names it in the
// error, which wraps algorithms.ErrInvalidParams.
func CheckName(what, name string) error {
	if name == "" || len(name) > 64 {
		return fmt.Errorf("%w: %s %s must be 1 to 64 characters", algorithms.ErrInvalidParams, what, echo.Quote(name))
	}
	for _, c := range []byte(name) {
		ok := 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || c == '_' || c == '.' || c == '-'
		if !ok {
			return fmt.Errorf("%w: %s %s may hold only letters, digits, '_', '.' and '-'", algorithms.ErrInvalidParams, what, echo.Quote(name))
		}
	}
	return nil
}

// CheckNamespace checks a namespace as a Limiter makes it: a limiter name
// and an algorithm name, each a name CheckName accepts, joined by ':'. The
// error wraps ErrInvalidKey.
func CheckNamespace(ns string) error {
	name, alg, ok := strings.Cut(ns, ":")
	if !ok {
		return fmt.Errorf("%w: namespace %q is not <name>:<algorithm>", ErrInvalidKey, ns)
	}
	if err := errors.Join(CheckName("limiter name", name), CheckName("algorithm name", alg)); err != nil {
		return fmt.Errorf("%w: namespace %q: %w", ErrInvalidKey, ns, err)
	}
	return nil
}

package ratelimit

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/ratelimitkit/ratelimit/algorithms"
)

// Moving state between stores: the capabilities a store offers to it.
//
// A store that can enumerate its keys implements Exporter; one that must
// write state in a form of its own (the Lua forms' doubles in Redis, say)
// implements Importer. Both are optional, detected by type assertion, in
// the manner of database/sql/driver: a store without Exporter cannot be
// counted or exported (ErrUnsupported), and a store without Importer is
// imported into through its Update, which every store has. Users call
// neither: package statefile counts, exports and imports through them,
// and reads and writes the state file. docs/moving-state.md describes the
// format and each store's support.

// Entry is one key's state, in the store-independent form every store
// exports and imports: the Go form's state bytes (what the algorithm's
// Decide takes) and when that state's TTL passes.
type Entry struct {
	// Key names the state: the limiter's namespace and the user's key.
	Key Key
	// State is the Go form's encoding of the state.
	State []byte
	// Expires is when the state's TTL passes, in microseconds since the
	// Unix epoch, on the clock that decided; after it the state counts as
	// missing.
	Expires int64
}

// Exporter is implemented by stores that can enumerate the keys they hold.
//
// Export calls yield for every key under namespace (every key the store
// holds when namespace is "") whose state is live at now: its expiry is
// after now, on the store's clock rule (Store.Update's). It stops at the
// first error yield returns and returns that error unchanged. Keys written
// or deleted while Export runs may or may not be seen, and a store whose
// backend scans without a snapshot (Redis SCAN) may yield a key twice;
// importing the second copy writes nothing. yield must not call the store
// from within a lock the store holds; the built-in stores call it holding
// none.
//
// A store that cannot enumerate its keys in some configuration returns an
// error wrapping ErrUnsupported that says why.
//
// Export bounds each of its round trips to the backend (a page, a batch of
// keys) whatever ctx allows, so that a store that hangs fails a count or
// an export (package statefile) within about one bound, and a long export
// of a live store is not cut off: the built-in stores give each round
// trip a second.
type Exporter interface {
	Export(ctx context.Context, namespace string, now int64, yield func(Entry) error) error
}

// Importer is implemented by stores whose decisions for some algorithms do
// not read the state Update writes (the Redis and Valkey stores keep the
// Lua forms' state apart). Stores without it are imported into through
// Update, which is exactly right for them.
//
// Import writes e's state under e.Key, with an expiry at e.Expires, in the
// form the store's decisions for alg read, unless the key already holds
// live state at now, which it keeps; it reports whether it wrote. alg is
// nil when the algorithm is not known (then the state goes where Update
// keeps it). An entry already expired at now is not written. Like Update,
// it is atomic per key and uses the store's own clock where configured.
type Importer interface {
	Import(ctx context.Context, alg algorithms.Algorithm, e Entry, now int64) (bool, error)
}

// ParseKey is the inverse of Key.String: since a namespace holds exactly
// one ':', the second ':' ends it, and the ID, which may hold any bytes,
// follows. It reports false when s holds fewer than two ':' or the
// namespace is not one a Limiter makes (see Key).
func ParseKey(s string) (Key, bool) {
	i := strings.IndexByte(s, ':')
	if i < 0 {
		return Key{}, false
	}
	j := strings.IndexByte(s[i+1:], ':')
	if j < 0 {
		return Key{}, false
	}
	k := Key{Namespace: s[:i+1+j], ID: s[i+2+j:]}
	if checkNamespace(k.Namespace) != nil {
		return Key{}, false
	}
	return k, true
}

// checkNamespace checks a namespace as a Limiter makes it: a name and an
// algorithm name, each [A-Za-z0-9_.-]{1,64}, joined by ':'.
func checkNamespace(ns string) error {
	name, alg, ok := strings.Cut(ns, ":")
	if !ok {
		return fmt.Errorf("%w: namespace %q is not <name>:<algorithm>", ErrInvalidKey, ns)
	}
	if err := errors.Join(checkName("limiter name", name), checkName("algorithm name", alg)); err != nil {
		return fmt.Errorf("%w: namespace %q: %w", ErrInvalidKey, ns, err)
	}
	return nil
}

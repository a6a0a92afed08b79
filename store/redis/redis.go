// Package redis is a ratelimit.Store on Redis, through
// github.com/redis/go-redis/v9. It accepts any redis.UniversalClient: a
// plain client, a cluster client, a ring or a failover client.
//
// For the built-in algorithms a decision is one EVALSHA of the algorithm's
// Lua form (algorithms/lua), atomic on the server, with no retries: the
// store implements ratelimit.Decider. Scripts are run by their SHA1; when
// the server has lost them (a restart, SCRIPT FLUSH, a failover), the store
// sends the script itself once, which reloads it, so no setup step is
// needed. A user's own algorithm runs through Update, an optimistic
// compare-and-set that retries a bounded number of times.
//
// Keys are "<prefix>:{<limiter namespace>:<key>}", where the braces are the
// Redis Cluster hash tag, so one decision touches one slot whatever bytes
// the key holds (braces in it are escaped). Every key written carries an
// expiry. By default the scripts read the server's clock (TIME); see
// WithServerClock. docs/stores/redis.md has the details.
package redis

import (
	"context"
	"strings"

	goredis "github.com/redis/go-redis/v9"

	"github.com/ratelimitkit/ratelimit"
	"github.com/ratelimitkit/ratelimit/algorithms"
	"github.com/ratelimitkit/ratelimit/internal/redisform"
)

// DefaultPrefix starts every key unless WithPrefix says otherwise.
const DefaultPrefix = "rl"

// ErrConflict is returned (wrapped) by Update when its compare-and-set keeps
// losing to writers in other processes; only users' own algorithms, which
// have no Lua form, can meet it.
var ErrConflict = redisform.ErrConflict

// Store keeps rate-limit state in Redis. Create it with New; the zero value
// is not usable. It is safe for concurrent use, and holds no resources of
// its own: closing the client is the caller's business.
type Store struct {
	client goredis.UniversalClient
	engine redisform.Engine
}

var (
	_ ratelimit.Store   = (*Store)(nil)
	_ ratelimit.Decider = (*Store)(nil)
)

// Option configures a Store.
type Option func(*Store) error

// WithPrefix sets the prefix of every key the store writes (DefaultPrefix
// otherwise): 1 to 64 bytes without braces. Stores with different prefixes
// on one server never share state.
func WithPrefix(prefix string) Option {
	return func(s *Store) error {
		if err := redisform.CheckPrefix("redis", prefix); err != nil {
			return err
		}
		s.engine.Prefix = prefix
		return nil
	}
}

// WithServerClock chooses whose clock the store uses. With on (the
// default), every decision reads the Redis server's TIME inside its script,
// so machines whose clocks disagree still share one timeline, and the
// limiter's clock (ratelimit.WithClock) is ignored. With off, the store uses
// the time the limiter passes, which is what tests with a fake clock need.
// On a cluster, each key's time comes from the node that holds it.
func WithServerClock(on bool) Option {
	return func(s *Store) error {
		s.engine.ServerClock = on
		return nil
	}
}

// New returns a store on client. It sends nothing to the server: scripts are
// loaded on first use.
func New(client goredis.UniversalClient, opts ...Option) (*Store, error) {
	if client == nil {
		return nil, errorf("nil client")
	}
	s := &Store{client: client}
	s.engine = redisform.Engine{Name: "redis", Prefix: DefaultPrefix, ServerClock: true, Slack: redisform.DefaultSlack, Backend: backend{client}}
	for _, opt := range opts {
		if err := opt(s); err != nil {
			return nil, err
		}
	}
	s.engine.Init()
	return s, nil
}

// Client returns the client the store uses: an escape hatch for what the
// store does not do, such as closing it.
func (s *Store) Client() goredis.UniversalClient { return s.client }

// Prefix returns the prefix of the store's keys.
func (s *Store) Prefix() string { return s.engine.Prefix }

// ServerClock reports whether the store reads the server's clock.
func (s *Store) ServerClock() bool { return s.engine.ServerClock }

// Decide implements ratelimit.Decider with one EVALSHA of alg's Lua form. For
// an algorithm without one it returns an error wrapping
// ratelimit.ErrUnsupported without sending anything.
func (s *Store) Decide(ctx context.Context, key ratelimit.Key, alg algorithms.Algorithm, req algorithms.Request) (algorithms.Decision, error) {
	return s.engine.Decide(ctx, key, alg, req)
}

// Update implements ratelimit.Store with an optimistic compare-and-set (a
// GET, then a script that writes only if the value is unchanged), retried
// up to a bounded number of times before an error wrapping ErrConflict.
// Concurrent updates of one key within one process wait for each other
// instead of competing. The limiter uses it only for algorithms without a
// Lua form.
func (s *Store) Update(ctx context.Context, key ratelimit.Key, now int64, fn ratelimit.UpdateFunc) error {
	return s.engine.Update(ctx, key, now, fn)
}

// Delete implements ratelimit.Store: it deletes every key of key's state.
func (s *Store) Delete(ctx context.Context, key ratelimit.Key) error {
	return s.engine.Delete(ctx, key)
}

type backend struct{ c goredis.UniversalClient }

func (b backend) EvalSha(ctx context.Context, sha string, keys []string, args []any) (any, error) {
	return b.c.EvalSha(ctx, sha, keys, args...).Result()
}

func (b backend) Eval(ctx context.Context, src string, keys []string, args []any) (any, error) {
	return b.c.Eval(ctx, src, keys, args...).Result()
}

func (b backend) Del(ctx context.Context, keys ...string) error {
	return b.c.Del(ctx, keys...).Err()
}

func (b backend) NoScript(err error) bool {
	return goredis.HasErrorPrefix(err, "NOSCRIPT") || strings.HasPrefix(err.Error(), "NOSCRIPT")
}

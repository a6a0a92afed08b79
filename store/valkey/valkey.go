// Package valkey is a ratelimit.Store on Valkey (or Redis), through
// github.com/valkey-io/valkey-go. It accepts a valkey.Client, standalone or
// cluster.
//
// For the built-in algorithms a decision is one EVALSHA of the algorithm's
// Lua form (algorithms/lua), atomic on the server, with no retries: the
// store implements ratelimit.Decider. valkey-go pipelines concurrent
// commands on shared connections automatically, so many goroutines deciding
// at once cost few round trips. Scripts are run by their SHA1; when the
// server has lost them (a restart, SCRIPT FLUSH, a failover), the store
// sends the script itself once, which reloads it. A user's own algorithm
// runs through Update, an optimistic compare-and-set that retries a bounded
// number of times.
//
// The keys, the scripts and their behaviour are those of package
// store/redis, so both stores can share one server and even one limiter's
// keys. docs/stores/redis.md has the details.
package valkey

import (
	"context"

	vk "github.com/valkey-io/valkey-go"

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

// Store keeps rate-limit state in Valkey. Create it with New; the zero value
// is not usable. It is safe for concurrent use, and holds no resources of
// its own: closing the client is the caller's business.
type Store struct {
	client vk.Client
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
		if err := redisform.CheckPrefix("valkey", prefix); err != nil {
			return err
		}
		s.engine.Prefix = prefix
		return nil
	}
}

// WithServerClock chooses whose clock the store uses. With on (the
// default), every decision reads the server's TIME inside its script, so
// machines whose clocks disagree still share one timeline, and the
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
func New(client vk.Client, opts ...Option) (*Store, error) {
	if client == nil {
		return nil, errorf("nil client")
	}
	s := &Store{client: client}
	s.engine = redisform.Engine{Name: "valkey", Prefix: DefaultPrefix, ServerClock: true, Slack: redisform.DefaultSlack, Backend: backend{client}}
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
func (s *Store) Client() vk.Client { return s.client }

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

type backend struct{ c vk.Client }

func (b backend) EvalSha(ctx context.Context, sha string, keys []string, args []any) (any, error) {
	cmd := b.c.B().Evalsha().Sha1(sha).Numkeys(int64(len(keys))).Key(keys...).Arg(redisform.Strings(args)...).Build()
	return b.c.Do(ctx, cmd).ToAny()
}

func (b backend) Eval(ctx context.Context, src string, keys []string, args []any) (any, error) {
	cmd := b.c.B().Eval().Script(src).Numkeys(int64(len(keys))).Key(keys...).Arg(redisform.Strings(args)...).Build()
	return b.c.Do(ctx, cmd).ToAny()
}

func (b backend) Del(ctx context.Context, keys ...string) error {
	return b.c.Do(ctx, b.c.B().Del().Key(keys...).Build()).Error()
}

func (b backend) NoScript(err error) bool {
	verr, ok := vk.IsValkeyErr(err)
	return ok && verr.IsNoScript()
}

// Package redis is a store.Store on Redis, through
// github.com/redis/go-redis/v9. It accepts any redis.UniversalClient: a
// plain client, a cluster client, a ring or a failover client.
//
// For the built-in algorithms a decision is one EVALSHA of the algorithm's
// Lua form (algorithms/forms/lua), atomic on the server, with no retries: the
// store implements store.Decider. Scripts are run by their SHA1; when
// the server has lost them (a restart, SCRIPT FLUSH, a failover), the store
// sends the script itself once, which reloads it, so no setup step is
// needed. A user's own algorithm runs through Update, an optimistic
// compare-and-set that retries a bounded number of times; concurrent
// updates of one key within one process wait for each other instead of
// competing.
//
// Keys are "<prefix>:{<limiter namespace>:<key>}", where the braces are the
// Redis Cluster hash tag, so one decision touches one slot whatever bytes
// the key holds (braces in it are escaped). Every key written carries an
// expiry. By default the scripts read the server's clock (TIME); see
// WithServerClock. docs/stores/redis.md has the details.
//
// Create the client with ContextTimeoutEnabled, so that a call ends at its
// context's deadline (the limiter's store budget, a second by default),
// with DialerRetries set to 1, so that a server that refuses connections
// is reported as that at once instead of after five dials 100ms apart,
// and with MaxRetries set to -1, so that go-redis does not retry the
// handshake of a new connection (HELLO) that the server dropped, 10ms to
// 1s apart:
//
//	client := redis.NewClient(&redis.Options{ // import "github.com/redis/go-redis/v9"
//		Addr:                  "localhost:6379",
//		ContextTimeoutEnabled: true,
//		DialerRetries:         1,
//		MaxRetries:            -1,
//	})
//
// The store sends each of its own commands once whatever the client's
// MaxRetries says (a decision sent again may have run already), so a
// refused connection, a dropped one or a timeout comes back as the
// client's error, which the store's error wraps.
//
// The store is this package's client adapter over the engine it shares
// with store/valkey (internal/redisengine), which holds the logic.
package redis

import (
	"context"
	"errors"
	"fmt"
	"net"
	"slices"
	"strings"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/ratelimitkit/ratelimit/algorithms"
	"github.com/ratelimitkit/ratelimit/internal/ctxaware"
	"github.com/ratelimitkit/ratelimit/internal/redisengine"
	"github.com/ratelimitkit/ratelimit/lease/leasewire"
	"github.com/ratelimitkit/ratelimit/store"
)

// DefaultPrefix starts every key unless WithPrefix says otherwise.
const DefaultPrefix = redisengine.DefaultPrefix

// ErrConflict is returned (wrapped) by Update when its compare-and-set keeps
// losing to writers in other processes; only users' own algorithms, which
// have no Lua form, can meet it.
var ErrConflict = redisengine.ErrConflict

// Store keeps rate-limit state in Redis. Create it with New; the zero value
// is not usable. A Limiter calls Decide for the built-in algorithms (one
// EVALSHA each) and Update for a user's own; Delete forgets a key. The
// store also implements store.Exporter and store.Importer (Export,
// Import: counting and moving state), store.ServerClocker
// (ServerClock) and leasewire.Runner (RunLease). It is safe for concurrent
// use, and holds no resources of its own: closing the client is the
// caller's business.
type Store struct {
	engine *redisengine.Engine
	client goredis.UniversalClient
}

var (
	_ store.Store         = (*Store)(nil)
	_ store.Decider       = (*Store)(nil)
	_ store.ServerClocker = (*Store)(nil)
	_ leasewire.Runner    = (*Store)(nil)
)

// Option configures a Store: WithPrefix or WithServerClock. The same
// options configure a store/valkey Store, whose keys and scripts are this
// package's.
type Option = redisengine.Option

// WithPrefix sets the prefix of every key the store writes (DefaultPrefix
// otherwise): 1 to 64 bytes without braces, which would move the Cluster
// hash tag. Stores with different prefixes on one server never share
// state; a Redis store and a Valkey store with the same prefix share it.
func WithPrefix(prefix string) Option { return redisengine.WithPrefix(prefix) }

// WithServerClock chooses whose clock the store uses. With on (the
// default), every decision reads the server's TIME inside its script, so
// machines whose clocks disagree still share one timeline; ratelimit.New
// then refuses ratelimit.WithClock with any clock but clock.System, which
// the store would ignore. With off, the store uses the time the limiter
// passes, which is what tests with a fake clock need. The server still
// expires keys by its own real-time clock, so with off each key is kept
// for twice its state's longest TTL of real time: a limiter clock running
// at less than half real-time speed can see state vanish early
// (docs/stores/redis.md, Expiry). On a cluster, each key's time comes from
// the node that holds it.
func WithServerClock(on bool) Option { return redisengine.WithServerClock(on) }

// New returns a store on client. It sends nothing to the server: scripts are
// loaded on first use.
func New(client goredis.UniversalClient, opts ...Option) (*Store, error) {
	if client == nil {
		return nil, fmt.Errorf("redis: nil client: %w", algorithms.ErrInvalidParams)
	}
	e, err := redisengine.New("redis", newBackend(client), opts...)
	if err != nil {
		return nil, err
	}
	return &Store{engine: e, client: client}, nil
}

// Client returns the client the store uses: an escape hatch for what the
// store does not do, such as closing it.
func (s *Store) Client() goredis.UniversalClient { return s.client }

// Decide implements store.Decider: one EVALSHA of alg's Lua form
// (algorithms/forms/lua), atomic on the server, with no retries, on the key
// StateKey names. A composite (algorithms.All) is one script run too. For
// an algorithm without a Lua form (a user's own; a composite with such a
// part, or with a sliding log) it returns an error wrapping
// store.ErrUnsupported without sending anything, and the limiter uses
// Update. A cost outside 1..alg.MaxCost() is ratelimit.ErrInvalidCost; a
// script the server has lost is sent again once, which reloads it.
//
// Concurrent calls share round trips: a call that finds none in flight is
// sent at once, alone; calls that arrive meanwhile go as the next batch,
// in one pipeline, and that batch's decisions of one algorithm on keys one
// script run may touch are one run (docs/stores/redis.md, "Concurrent
// decisions share round trips").
func (s *Store) Decide(ctx context.Context, key store.Key, alg algorithms.Algorithm, req algorithms.Request) (algorithms.Decision, error) {
	return s.engine.Decide(ctx, key, alg, req)
}

// Update implements store.Store for algorithms without a Lua form: it
// reads the key (StateKey with ":u" appended), calls fn, and writes fn's
// result only if the value is still the one read, retrying up to 32 times
// before an error wrapping ErrConflict. Concurrent updates of one key
// within one process wait for each other instead of competing. The stored
// value carries the state's own expiry, so state past its TTL reads as
// missing even before the server expires the key; a value the store did
// not write is ratelimit.ErrCorruptState.
func (s *Store) Update(ctx context.Context, key store.Key, now int64, fn store.UpdateFunc) error {
	return s.engine.Update(ctx, key, now, fn)
}

// Delete implements store.Store: it deletes both keys a decision may
// have written (Decide's and Update's) in one DEL. Deleting a key that
// holds nothing is not an error.
func (s *Store) Delete(ctx context.Context, key store.Key) error {
	return s.engine.Delete(ctx, key)
}

// Export implements store.Exporter: SCAN over the server, every master
// of a cluster client or every shard of a ring, reading each batch of keys
// with one pipeline, and yielding the keys under namespace whose state is
// live at now. A key both paths wrote is yielded once. Each round trip is
// bounded to a second. Through a client of another kind, which may not
// reach every node, it returns an error wrapping store.ErrUnsupported.
func (s *Store) Export(ctx context.Context, namespace string, now int64, yield func(store.Entry) error) error {
	return s.engine.Export(ctx, namespace, now, yield)
}

// Import implements store.Importer: the state of an algorithm with a
// Lua form is written where Decide reads it, in the Lua form's encoding;
// any other state (alg nil or a user's own) goes where Update keeps it.
// A key that already holds live state keeps it, and the key's expiry is
// set as a decision sets it. It reports whether it wrote.
func (s *Store) Import(ctx context.Context, alg algorithms.Algorithm, e store.Entry, now int64) (bool, error) {
	return s.engine.Import(ctx, alg, e, now)
}

// RunLease implements leasewire.Runner: a lease's acquire, extend or release is
// one EVALSHA of leasewire.Lua on the key Update writes, so a lease record
// written by either path is read by the other.
func (s *Store) RunLease(ctx context.Context, key store.Key, now int64, req leasewire.Request) (leasewire.Result, error) {
	return s.engine.RunLease(ctx, key, now, req)
}

// Prefix returns the prefix of the store's keys (see WithPrefix).
func (s *Store) Prefix() string { return s.engine.Prefix() }

// ServerClock implements store.ServerClocker: it reports whether the
// store decides by the server's TIME (see WithServerClock).
func (s *Store) ServerClock() bool { return s.engine.ServerClock() }

// backend runs the engine's commands on a go-redis client.
type backend struct {
	c goredis.UniversalClient
	// detach is set for a client that does not end a call at its
	// context's deadline (created without ContextTimeoutEnabled, so that
	// only its own read and write timeouts bound a call): each call whose
	// context can end then runs on a goroutine of its own, and the caller
	// returns with the context's error when it ends first (see direct).
	detach bool
	// bound, for a plain client that ignores deadlines, hands out the
	// client's clones whose timeouts end a call by its context's
	// deadline, so that such a call needs no goroutine (bounded.go).
	bound *timeouts
}

// newBackend returns the backend for client.
func newBackend(client goredis.UniversalClient) backend {
	b := backend{c: client, detach: ignoresDeadlines(client)}
	if c, ok := client.(*goredis.Client); ok && b.detach {
		b.bound = &timeouts{c: c}
	}
	return b
}

// ignoresDeadlines reports whether c is a go-redis client created without
// ContextTimeoutEnabled. A client of another kind is taken to honour its
// context.
func ignoresDeadlines(c goredis.UniversalClient) bool {
	switch c := c.(type) {
	case *goredis.Client:
		return !c.Options().ContextTimeoutEnabled
	case *goredis.ClusterClient:
		return !c.Options().ContextTimeoutEnabled
	case *goredis.Ring:
		return !c.Options().ContextTimeoutEnabled
	}
	return false
}

// direct returns the client to call under ctx on the caller's goroutine,
// or false when the call must run detached from it (ctxaware.Until): a
// client that honours ctx, or a context that cannot end, is called as it
// is; a plain client that ignores deadlines is called through its clone
// whose read and write timeouts end the call by ctx's deadline (bounded.go);
// any other client that ignores deadlines (a cluster client or a ring,
// which have no such clones), or a context that can end but has no
// deadline, needs the detached call, so that the client never holds a
// caller past its context (the limiter's store budget, one second by
// default). An abandoned detached call runs on until the client's own
// timeouts end it, so it must own everything it reads and writes.
func (b backend) direct(ctx context.Context) (goredis.UniversalClient, bool) {
	if !b.detach || ctx.Done() == nil {
		return b.c, true
	}
	if c := b.bound.within(ctx); c != nil {
		return c, true
	}
	return nil, false
}

func (b backend) EvalSha(ctx context.Context, sha string, keys []string, args []any) (any, error) {
	if c, ok := b.direct(ctx); ok {
		return result(ctx, sendOnce(ctx, c, scriptWords("evalsha", sha, keys, args)...))
	}
	keys, args = slices.Clone(keys), slices.Clone(args)
	return ctxaware.Until(ctx, func(ctx context.Context) (any, error) {
		return result(ctx, sendOnce(ctx, b.c, scriptWords("evalsha", sha, keys, args)...))
	})
}

func (b backend) Eval(ctx context.Context, src string, keys []string, args []any) (any, error) {
	if c, ok := b.direct(ctx); ok {
		return result(ctx, sendOnce(ctx, c, scriptWords("eval", src, keys, args)...))
	}
	keys, args = slices.Clone(keys), slices.Clone(args)
	return ctxaware.Until(ctx, func(ctx context.Context) (any, error) {
		return result(ctx, sendOnce(ctx, b.c, scriptWords("eval", src, keys, args)...))
	})
}

// Pipeline sends calls in one go-redis pipeline: a cluster client or a
// ring splits it by the node each call's key lives on and sends the parts
// at once, and follows MOVED and ASK replies; each command keeps its own
// reply and error. On a client that ignores deadlines and has no clone
// bounded by ctx (direct), the pipeline is detached: when ctx ends first,
// every call gets ctx's error.
func (b backend) Pipeline(ctx context.Context, calls []*redisengine.Call) {
	client, ok := b.direct(ctx)
	if !ok {
		b.pipelineDetached(ctx, calls)
		return
	}
	if onNodes(calls) {
		words, nodes := make([][]any, len(calls)), make([]any, len(calls))
		for i, c := range calls {
			words[i], nodes[i] = c.Command(), c.Node
		}
		for i, cmd := range b.send(ctx, words, nodes) {
			calls[i].Reply, calls[i].Err = result(ctx, cmd)
		}
		return
	}
	if len(calls) == 1 {
		c := calls[0]
		c.Reply, c.Err = result(ctx, sendOnce(ctx, client, c.Command()...))
		return
	}
	pipe := client.Pipeline()
	cmds := make([]*goredis.Cmd, len(calls))
	for i, c := range calls {
		cmds[i] = sendOnce(ctx, pipe, c.Command()...)
	}
	_, _ = pipe.Exec(ctx) // every command's error is its own, read below
	for i, c := range calls {
		c.Reply, c.Err = result(ctx, cmds[i])
	}
}

// pipelineDetached is Pipeline through ctxaware.Until: the pipeline's commands
// are built from copies of the calls' words, and its replies are handed to
// the calls only if they arrive before ctx ends.
func (b backend) pipelineDetached(ctx context.Context, calls []*redisengine.Call) {
	if len(calls) == 1 && calls[0].Node == nil {
		// One command, as Pipeline sends one: no pipeline to build.
		c := calls[0]
		words := slices.Clone(c.Command())
		c.Reply, c.Err = ctxaware.Until(ctx, func(ctx context.Context) (any, error) {
			return result(ctx, sendOnce(ctx, b.c, words...))
		})
		return
	}
	words, nodes := make([][]any, len(calls)), make([]any, len(calls))
	for i, c := range calls {
		words[i], nodes[i] = slices.Clone(c.Command()), c.Node
	}
	cmds, err := ctxaware.Until(ctx, func(ctx context.Context) ([]*goredis.Cmd, error) {
		return b.send(ctx, words, nodes), nil
	})
	for i, c := range calls {
		if err != nil {
			c.Reply, c.Err = nil, err
			continue
		}
		c.Reply, c.Err = result(ctx, cmds[i])
	}
}

// Overlaps says that two pipelines may be in flight at once: go-redis
// sends each on a connection of its own from its pool, under its own
// context.
func (b backend) Overlaps() bool { return true }

// Slot lets any keys share a script run on one server (a plain or a
// failover client), only the keys of one hash slot on a cluster, and no
// two keys on a ring or a client of another kind, whose shard the store
// cannot see.
func (b backend) Slot(key string) int {
	switch b.c.(type) {
	case *goredis.Client:
		return 0
	case *goredis.ClusterClient:
		return redisengine.ClusterSlot(key)
	}
	return -1
}

func (b backend) Del(ctx context.Context, keys ...string) error {
	if c, ok := b.direct(ctx); ok {
		_, err := result(ctx, sendOnce(ctx, c, delWords(keys)...))
		return err
	}
	keys = slices.Clone(keys)
	_, err := ctxaware.Until(ctx, func(ctx context.Context) (any, error) {
		return result(ctx, sendOnce(ctx, b.c, delWords(keys)...))
	})
	return err
}

// once is a go-redis command sent at most once. go-redis sends a command
// again when its attempt failed on the network (a refused dial, a dropped
// connection, a timeout), up to the client's MaxRetries (3 by default)
// with a growing back-off (MinRetryBackoff 10ms to MaxRetryBackoff 1s):
// on a server that refuses connections that cost each call 40-160ms and,
// with the client's five dial attempts 100ms apart, more than the
// limiter's 1s budget, so that the caller saw a timeout instead of
// "connection refused" (issue 29). And a script sent again after its
// connection dropped may have run already: a decision counted twice. So
// every command of the store is sent once whatever MaxRetries says, and
// its error comes back as it is; the limiter's failure policy decides. A
// cluster client still follows MOVED and ASK, which are not retries.
// (go-redis's own commands, such as the HELLO that opens a connection,
// still follow MaxRetries: hence MaxRetries: -1 in the documented options.)
type once struct{ *goredis.Cmd }

// NoRetry tells go-redis not to send the command again.
func (once) NoRetry() bool { return true }

// processor is what sends a command: a client, or a pipeline that queues it.
type processor interface {
	Process(ctx context.Context, cmd goredis.Cmder) error
}

// sendOnce sends (or, on a pipeline, queues) the command words through p,
// at most once (see once), and returns it; its reply and error are read
// from it once sent.
func sendOnce(ctx context.Context, p processor, words ...any) *goredis.Cmd {
	cmd := goredis.NewCmd(ctx, words...)
	_ = p.Process(ctx, once{cmd}) // the error is the command's own, read by the caller
	return cmd
}

// result returns cmd's reply and error once sent under ctx. An error that
// came back when ctx had ended wraps ctx's error as well: a client with
// ContextTimeoutEnabled sets the socket's deadline from ctx, so a call on a
// server that stopped answering ends with the read's "i/o timeout" (which
// go-redis, retrying, used to turn into ctx's error), and callers, the
// limiter's budget and its breaker tell a caller's deadline from a store
// failure by errors.Is(err, context.DeadlineExceeded). The socket's
// deadline may pass a moment before ctx's timer fires: a network timeout
// at or after ctx's deadline is the deadline's.
func result(ctx context.Context, cmd *goredis.Cmd) (any, error) {
	v, err := cmd.Result()
	if err == nil {
		return v, nil
	}
	if cerr := ctx.Err(); cerr != nil {
		if errors.Is(err, cerr) {
			return v, err
		}
		return v, fmt.Errorf("%w: %w", cerr, err)
	}
	var ne net.Error
	if dl, ok := ctx.Deadline(); ok && !time.Now().Before(dl) && errors.As(err, &ne) && ne.Timeout() {
		return v, fmt.Errorf("%w: %w", context.DeadlineExceeded, err)
	}
	return v, err
}

// scriptWords returns the words of EVALSHA or EVAL (name) of script (a
// SHA or a source) with keys and args, as go-redis's EvalSha and Eval
// build them.
func scriptWords(name, script string, keys []string, args []any) []any {
	w := make([]any, 0, 3+len(keys)+len(args))
	w = append(w, name, script, len(keys))
	for _, k := range keys {
		w = append(w, k)
	}
	return append(w, args...)
}

// delWords returns the words of DEL of keys.
func delWords(keys []string) []any {
	w := make([]any, 0, 1+len(keys))
	w = append(w, "del")
	for _, k := range keys {
		w = append(w, k)
	}
	return w
}

func (b backend) NoScript(err error) bool {
	return goredis.HasErrorPrefix(err, "NOSCRIPT") || strings.HasPrefix(err.Error(), "NOSCRIPT")
}

// StateKey returns the name of the key that holds key's state in a store
// whose prefix is prefix: "<prefix>:{<limiter namespace>:<key>}", the
// braces being the Cluster hash tag and braces and '%' in the key escaped
// as %7B, %7D and %25. State written by Update (a user's own algorithm)
// lives under the same name with ":u" appended. Use it to find a key with
// the command-line client; the store names its keys with it.
func StateKey(prefix string, key store.Key) string { return redisengine.StateKey(prefix, key) }

// Package valkey is a ratelimit.Store on Valkey (or Redis), through
// github.com/valkey-io/valkey-go. It accepts a valkey.Client, standalone or
// cluster.
//
// For the built-in algorithms a decision is one EVALSHA of the algorithm's
// Lua form (algorithms/forms/lua), atomic on the server, with no retries: the
// store implements ratelimit.Decider. Decisions made at the same time share
// round trips: what queues while a batch is in flight goes as the next
// batch, in one DoMulti, and the decisions in it of one algorithm run as one
// script (any keys on a standalone server, one hash slot's on a cluster;
// docs/stores/redis.md). Scripts are run by their SHA1; when the
// server has lost them (a restart, SCRIPT FLUSH, a failover), the store
// sends the script itself once, which reloads it. A user's own algorithm
// runs through Update, an optimistic compare-and-set that retries a bounded
// number of times.
//
// The keys, the scripts and their behaviour are those of package
// store/redis (both are client adapters over one engine,
// internal/redisengine), so both stores can share one server and even one
// limiter's keys. docs/stores/redis.md has the details.
package valkey

import (
	"context"
	"fmt"
	"sync"

	vk "github.com/valkey-io/valkey-go"

	"github.com/ratelimitkit/ratelimit"
	"github.com/ratelimitkit/ratelimit/internal/redisengine"
)

// DefaultPrefix starts every key unless WithPrefix says otherwise.
const DefaultPrefix = redisengine.DefaultPrefix

// ErrConflict is returned (wrapped) by Update when its compare-and-set keeps
// losing to writers in other processes; only users' own algorithms, which
// have no Lua form, can meet it.
var ErrConflict = redisengine.ErrConflict

// Store keeps rate-limit state in Valkey. Create it with New; the zero value
// is not usable. Its Decide (one EVALSHA of a built-in algorithm's Lua
// form; ratelimit.ErrUnsupported for others), Update (a bounded optimistic
// compare-and-set, for users' own algorithms) and Delete implement
// ratelimit.Decider and ratelimit.Store; Prefix and ServerClock report its
// options. It is safe for concurrent use, and holds no resources of its own: closing the
// client is the caller's business.
type Store struct {
	*engine
	client vk.Client
}

// engine is the shared engine, embedded under an unexported name: its
// Decide, Update, Delete, Prefix and ServerClock are the Store's.
type engine = redisengine.Engine

var (
	_ ratelimit.Store   = (*Store)(nil)
	_ ratelimit.Decider = (*Store)(nil)
)

// Option configures a Store: WithPrefix or WithServerClock.
type Option = redisengine.Option

// WithPrefix sets the prefix of every key the store writes (DefaultPrefix
// otherwise): 1 to 64 bytes without braces. Stores with different prefixes
// on one server never share state.
func WithPrefix(prefix string) Option { return redisengine.WithPrefix(prefix) }

// WithServerClock chooses whose clock the store uses. With on (the
// default), every decision reads the server's TIME inside its script, so
// machines whose clocks disagree still share one timeline; ratelimit.New
// then refuses ratelimit.WithClock with any clock but clock.System, which
// the store would ignore. With off, the store uses the time the limiter
// passes, which is what tests with a fake clock need. The server still expires keys by its own real-time
// clock, so with off each key is kept for twice its state's longest TTL of
// real time: a limiter clock running at less than half real-time speed
// can see state vanish early (docs/stores/redis.md, Expiry).
// On a cluster, each key's time comes from the node that holds it.
func WithServerClock(on bool) Option { return redisengine.WithServerClock(on) }

// New returns a store on client. It sends nothing to the server: scripts are
// loaded on first use.
func New(client vk.Client, opts ...Option) (*Store, error) {
	if client == nil {
		return nil, fmt.Errorf("valkey: nil client: %w", ratelimit.ErrInvalidParams)
	}
	e, err := redisengine.New("valkey", backend{client}, opts...)
	if err != nil {
		return nil, err
	}
	return &Store{engine: e, client: client}, nil
}

// Client returns the client the store uses: an escape hatch for what the
// store does not do, such as closing it.
func (s *Store) Client() vk.Client { return s.client }

// backend runs the engine's commands on a valkey-go client.
type backend struct{ c vk.Client }

func (b backend) EvalSha(ctx context.Context, sha string, keys []string, args []any) (any, error) {
	return b.c.Do(ctx, b.evalSha(sha, keys, args)).ToAny()
}

func (b backend) Eval(ctx context.Context, src string, keys []string, args []any) (any, error) {
	return b.c.Do(ctx, b.eval(src, keys, args)).ToAny()
}

func (b backend) evalSha(sha string, keys []string, args []any) vk.Completed {
	buf := strs(args)
	c := b.c.B().Evalsha().Sha1(sha).Numkeys(int64(len(keys))).Key(keys...).Arg(*buf...).Build()
	putStrs(buf)
	return c
}

func (b backend) eval(src string, keys []string, args []any) vk.Completed {
	buf := strs(args)
	c := b.c.B().Eval().Script(src).Numkeys(int64(len(keys))).Key(keys...).Arg(*buf...).Build()
	putStrs(buf)
	return c
}

// strsPool holds the buffers strs fills: the command builder copies the
// strings, so a buffer is free again once the command is built.
var strsPool = sync.Pool{New: func() any { return new([]string) }}

// strs returns args as strings (redisengine.AppendStrings) in a pooled buffer,
// which putStrs returns.
func strs(args []any) *[]string {
	buf := strsPool.Get().(*[]string)
	*buf = redisengine.AppendStrings((*buf)[:0], args)
	return buf
}

func putStrs(buf *[]string) {
	clear(*buf)
	strsPool.Put(buf)
}

// Pipeline sends calls with one DoMulti, which a cluster client splits by
// the node each call's key lives on; each command keeps its own reply and
// error. Through it the engine batches concurrent decisions itself, so
// that the decisions of a batch on one key run as one coalesced script
// (valkey-go's own auto-pipelining cannot see which calls share a key).
func (b backend) Pipeline(ctx context.Context, calls []*redisengine.Call) {
	cmds := make(vk.Commands, len(calls))
	for i, c := range calls {
		if c.ByText {
			cmds[i] = b.eval(c.Script.Src, c.Keys, c.Args)
		} else {
			cmds[i] = b.evalSha(c.Script.SHA, c.Keys, c.Args)
		}
	}
	if len(cmds) == 1 {
		calls[0].Reply, calls[0].Err = result(calls[0], b.c.Do(ctx, cmds[0]))
		return
	}
	for i, r := range b.c.DoMulti(ctx, cmds...) {
		calls[i].Reply, calls[i].Err = result(calls[i], r)
	}
}

// result is a call's outcome from its result: for a call whose reply is
// read as integers, an array of integers and error replies as an
// redisengine.IntReply, which boxes no item; otherwise, or for a reply of
// another shape, what ToAny makes of it.
func result(c *redisengine.Call, r vk.ValkeyResult) (any, error) {
	if !c.Ints {
		return r.ToAny()
	}
	m, err := r.ToMessage()
	if err != nil {
		return r.ToAny()
	}
	items, err := m.ToArray()
	if err != nil {
		return r.ToAny()
	}
	var ir redisengine.IntReply
	ir.Ints = make([]int64, len(items))
	for i := range items {
		it := &items[i]
		if it.IsInt64() {
			ir.Ints[i], _ = it.ToInt64()
			continue
		}
		err := it.Error()
		if err == nil || vk.IsValkeyNil(err) {
			return r.ToAny() // neither an integer nor an error reply
		}
		if ir.Errs == nil {
			ir.Errs = make([]error, len(items))
		}
		ir.Errs[i] = err
	}
	return ir, nil
}

// Slot lets any keys share a script run on a standalone (or sentinel)
// client's one primary, and only the keys of one hash slot on a cluster.
func (b backend) Slot(key string) int {
	switch b.c.Mode() {
	case vk.ClientModeStandalone, vk.ClientModeSentinel:
		return 0
	case vk.ClientModeCluster:
		return redisengine.ClusterSlot(key)
	}
	return -1
}

func (b backend) Del(ctx context.Context, keys ...string) error {
	return b.c.Do(ctx, b.c.B().Del().Key(keys...).Build()).Error()
}

func (b backend) NoScript(err error) bool {
	verr, ok := vk.IsValkeyErr(err)
	return ok && verr.IsNoScript()
}

// StateKey returns the name of the key that holds key's state in a store
// whose prefix is prefix: "<prefix>:{<limiter namespace>:<key>}", the
// braces being the Cluster hash tag and braces and '%' in the key escaped
// as %7B, %7D and %25. State written by Update (a user's own algorithm)
// lives under the same name with ":u" appended. Use it to find a key with
// the command-line client; the store names its keys with it.
func StateKey(prefix string, key ratelimit.Key) string { return redisengine.StateKey(prefix, key) }

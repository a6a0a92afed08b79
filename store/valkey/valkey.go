// Package valkey is a store.Store on Valkey (or Redis), through
// github.com/valkey-io/valkey-go. It accepts a valkey.Client, standalone or
// cluster.
//
// For the built-in algorithms a decision is one EVALSHA of the algorithm's
// Lua form (algorithms/forms/lua), atomic on the server, with no retries: the
// store implements store.Decider. Decisions made at the same time share
// round trips: what queues while a batch is in flight goes as the next
// batch, in one DoMulti, and the decisions in it of one algorithm run as one
// script (any keys on a standalone server, any keys of one master on a
// cluster; docs/stores/redis.md). Scripts are run by their SHA1; when the
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

// Store keeps rate-limit state in Valkey (or Redis). Create it with New;
// the zero value is not usable. Its methods behave as store/redis's
// Store's, on the same keys with the same scripts, and their docs there
// have the details: a Limiter calls Decide for the built-in algorithms and
// Update for a user's own; Delete forgets a key; Export and Import count
// and move state; ServerClock and RunLease serve ratelimit.New and the
// lease package. It is safe for concurrent use, and holds no resources of
// its own: closing the client is the caller's business.
type Store struct {
	engine *redisengine.Engine
	client vk.Client
}

var (
	_ store.Store         = (*Store)(nil)
	_ store.Decider       = (*Store)(nil)
	_ store.ServerClocker = (*Store)(nil)
	_ leasewire.Runner    = (*Store)(nil)
)

// Option configures a Store: WithPrefix or WithServerClock. It is
// store/redis's Option, so the options of either package configure both.
type Option = redisengine.Option

// WithPrefix sets the prefix of every key the store writes (DefaultPrefix
// otherwise), as redis.WithPrefix does.
func WithPrefix(prefix string) Option { return redisengine.WithPrefix(prefix) }

// WithServerClock chooses whose clock the store uses: the server's TIME
// (on, the default) or the time the limiter passes (off, for tests with a
// fake clock), as redis.WithServerClock does.
func WithServerClock(on bool) Option { return redisengine.WithServerClock(on) }

// New returns a store on client. It sends nothing to the server: scripts are
// loaded on first use.
func New(client vk.Client, opts ...Option) (*Store, error) {
	if client == nil {
		return nil, fmt.Errorf("valkey: nil client: %w", algorithms.ErrInvalidParams)
	}
	e, err := redisengine.New("valkey", backend{client, newRouter(client)}, opts...)
	if err != nil {
		return nil, err
	}
	return &Store{engine: e, client: client}, nil
}

// Client returns the client the store uses: an escape hatch for what the
// store does not do, such as closing it.
func (s *Store) Client() vk.Client { return s.client }

// Decide implements store.Decider as redis.Store.Decide does; a batch
// goes to the server in one DoMulti.
func (s *Store) Decide(ctx context.Context, key store.Key, alg algorithms.Algorithm, req algorithms.Request) (algorithms.Decision, error) {
	return s.engine.Decide(ctx, key, alg, req)
}

// Update implements store.Store as redis.Store.Update does: a bounded
// optimistic compare-and-set, for algorithms without a Lua form.
func (s *Store) Update(ctx context.Context, key store.Key, now int64, fn store.UpdateFunc) error {
	return s.engine.Update(ctx, key, now, fn)
}

// Delete implements store.Store as redis.Store.Delete does.
func (s *Store) Delete(ctx context.Context, key store.Key) error {
	return s.engine.Delete(ctx, key)
}

// Export implements store.Exporter as redis.Store.Export does, with
// SCAN on every primary the client knows.
func (s *Store) Export(ctx context.Context, namespace string, now int64, yield func(store.Entry) error) error {
	return s.engine.Export(ctx, namespace, now, yield)
}

// Import implements store.Importer as redis.Store.Import does.
func (s *Store) Import(ctx context.Context, alg algorithms.Algorithm, e store.Entry, now int64) (bool, error) {
	return s.engine.Import(ctx, alg, e, now)
}

// RunLease implements leasewire.Runner as redis.Store.RunLease does.
func (s *Store) RunLease(ctx context.Context, key store.Key, now int64, req leasewire.Request) (leasewire.Result, error) {
	return s.engine.RunLease(ctx, key, now, req)
}

// Prefix returns the prefix of the store's keys (see WithPrefix).
func (s *Store) Prefix() string { return s.engine.Prefix() }

// ServerClock implements store.ServerClocker: it reports whether the
// store decides by the server's TIME (see WithServerClock).
func (s *Store) ServerClock() bool { return s.engine.ServerClock() }

// backend runs the engine's commands on a valkey-go client.
type backend struct {
	c vk.Client
	r *router // a cluster's map of slots (cluster.go), or nil
}

func (b backend) EvalSha(ctx context.Context, sha string, keys []string, args []any) (any, error) {
	return b.do(ctx, b.evalSha(sha, keys, args)).ToAny()
}

func (b backend) Eval(ctx context.Context, src string, keys []string, args []any) (any, error) {
	return b.do(ctx, b.eval(src, keys, args)).ToAny()
}

// do sends cmd through ctxaware.Until: valkey-go ends a call at its
// context's deadline, except while the call waits for a connection that
// another call is opening (after a connection broke, or before one of the
// client's connections to a server was first needed), which it waits out
// whatever its own context says: on a server that stopped answering, a
// call with a 250ms deadline waited a second behind one whose deadline was
// a second. So every call whose context can end is sent from a goroutine
// of its own, and its caller returns when its context ends.
func (b backend) do(ctx context.Context, cmd vk.Completed) vk.ValkeyResult {
	r, err := ctxaware.Until(ctx, func(ctx context.Context) (vk.ValkeyResult, error) {
		return b.c.Do(ctx, cmd), nil
	})
	if err != nil {
		return vk.NewErrorResult(err)
	}
	return r
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
	var nodes []any // where each call goes, when one goes to a master itself
	for _, c := range calls {
		if c.Node != nil {
			nodes = make([]any, len(calls))
			for i, c := range calls {
				nodes[i] = c.Node
			}
			break
		}
	}
	if nodes != nil {
		for i, r := range b.doMulti(ctx, cmds, nodes) {
			calls[i].Reply, calls[i].Err = result(calls[i], r)
		}
		return
	}
	if len(cmds) == 1 {
		calls[0].Reply, calls[0].Err = result(calls[0], b.c.Do(ctx, cmds[0]))
		return
	}
	for i, r := range b.c.DoMulti(ctx, cmds...) {
		calls[i].Reply, calls[i].Err = result(calls[i], r)
	}
}

// DetachLone implements redisengine.Detacher: a lone caller's call is
// sent from a goroutine of its own, as do sends the store's other calls.
func (b backend) DetachLone() bool { return true }

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
	return b.do(ctx, b.c.B().Del().Key(keys...).Build()).Error()
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
func StateKey(prefix string, key store.Key) string { return redisengine.StateKey(prefix, key) }

package redisengine

import (
	"cmp"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/maphash"
	"math"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/ratelimitkit/ratelimit/algorithms"
	"github.com/ratelimitkit/ratelimit/algorithms/forms"
	"github.com/ratelimitkit/ratelimit/store"
)

// ErrConflict is returned by Update when its compare-and-set keeps losing
// to writers in other processes.
var ErrConflict = errors.New("ratelimit: too many concurrent updates of one key")

// MaxAttempts bounds the compare-and-set attempts of one Update.
const MaxAttempts = 32

// readScript returns the raw value of KEYS[1] (or nil) and, when ARGV[1] is
// "1", the server's TIME.
var readScript = NewScript("read", `local v = redis.call('GET', KEYS[1])
if ARGV[1] == '1' then
  local t = redis.call('TIME')
  return {v, t[1], t[2]}
end
return {v}
`, 0)

// casScript writes ARGV[3] with a PX of ARGV[4] milliseconds to KEYS[1] when
// it holds ARGV[2] (ARGV[1] == "1") or nothing (ARGV[1] == "0"), and replies
// 1 when it wrote and 0 when it did not.
var casScript = NewScript("cas", `local cur = redis.call('GET', KEYS[1])
if ARGV[1] == '1' then
  if cur ~= ARGV[2] then return 0 end
elseif cur then
  return 0
end
redis.call('SET', KEYS[1], ARGV[3], 'PX', ARGV[4])
return 1
`, 0)

// Engine is a store.Store and store.Decider on a Redis-protocol
// server reached through a Backend. Create it with New; the zero value is
// not usable. It is safe for concurrent use.
type Engine struct {
	name        string // prefixes error messages: "redis" or "valkey"
	prefix      string // starts every key
	serverClock bool   // scripts read the server's TIME
	slack       int64  // ms added to every expiry; see DefaultSlack
	slackArg    any    // slack, boxed once as a script argument
	backend     Backend
	batch       *batcher // nil when the backend does not pipeline
	// With a Router, each node's decisions have a batcher of their own
	// (node → *batcher), so that a node's batches follow each other
	// without waiting for the other nodes' (see batcherFor).
	router Router
	nodes  sync.Map

	seed  maphash.Seed
	locks []chan struct{}

	paramCache sync.Map // *int64 → cachedParams
	paramCount atomic.Int64
	comps      composites
}

// DefaultPrefix starts every key unless WithPrefix says otherwise.
const DefaultPrefix = "rl"

// DefaultSlack is the least slack, in milliseconds, added to every expiry
// of a store on the limiter's clock: the server expires keys by its own
// clock, so a key whose state is still live by a limiter clock running
// behind the server's, or slower (a fake clock in a test), must outlive its
// TTL. The slack added to a key's expiry is the larger of DefaultSlack and
// the longest TTL the key's algorithm gives its state (for Update, the
// state's own TTL), so a key lives at least twice its state's TTL of real
// time: a limiter clock may run at half the server's speed without losing
// live state. The state records its own expiry, so the slack delays only
// the reclaiming of space, never a decision.
const DefaultSlack = 100

// ServerClockSlack is the slack of a store on the server's clock. The
// server counts a key's expiry from its clock in whole milliseconds, which
// may stand up to a millisecond behind the TIME the script read, so without
// it a key could vanish up to a millisecond before its state's TTL passes,
// and a request in that millisecond would be decided on no state.
const ServerClockSlack = 1

// Option configures an Engine; the store packages re-export them.
type Option func(*Engine) error

// WithPrefix sets the prefix of every key the engine writes (DefaultPrefix
// otherwise): 1 to 64 bytes without braces, which would move the hash tag.
// Engines with different prefixes on one server never share state.
func WithPrefix(prefix string) Option {
	return func(e *Engine) error {
		if err := CheckPrefix(e.name, prefix); err != nil {
			return err
		}
		e.prefix = prefix
		return nil
	}
}

// WithServerClock chooses whose clock the engine uses: the server's TIME,
// read inside every script (on, the default), or the time the limiter
// passes (off), which is what tests with a fake clock need.
func WithServerClock(on bool) Option {
	return func(e *Engine) error {
		e.serverClock = on
		return nil
	}
}

// New returns an engine on backend whose errors start with name, such as
// "redis". It sends nothing to the server: scripts are loaded on first use.
func New(name string, backend Backend, opts ...Option) (*Engine, error) {
	e := &Engine{name: name, prefix: DefaultPrefix, serverClock: true, backend: backend}
	for _, opt := range opts {
		if err := opt(e); err != nil {
			return nil, err
		}
	}
	e.slack = DefaultSlack
	if e.serverClock {
		e.slack = ServerClockSlack
	}
	e.slackArg = strconv.FormatInt(e.slack, 10)
	if p, ok := backend.(Pipeliner); ok {
		e.batch = &batcher{p: p, noScript: backend.NoScript, maxFly: flyingFor(p), detach: detachesLone(p)}
		if r, ok := backend.(Router); ok {
			e.batch.router, e.router = r, r
		}
	}
	e.seed = maphash.MakeSeed()
	e.locks = make([]chan struct{}, 256)
	for i := range e.locks {
		e.locks[i] = make(chan struct{}, 1)
	}
	return e, nil
}

// Prefix returns the prefix of the engine's keys.
func (e *Engine) Prefix() string { return e.prefix }

// ServerClock reports whether the engine reads the server's clock.
func (e *Engine) ServerClock() bool { return e.serverClock }

// run runs s by its SHA and, when the server does not have it (after a
// restart or SCRIPT FLUSH), once more by its source, which reloads it.
func (e *Engine) run(ctx context.Context, s *Script, keys []string, args []any) (any, error) {
	r, err := e.backend.EvalSha(ctx, s.SHA, keys, args)
	if err != nil && e.backend.NoScript(err) {
		r, err = e.backend.Eval(ctx, s.Src, keys, args)
	}
	return r, err
}

// Boxed once, so that passing them as script arguments allocates nothing.
var (
	argTrue  any = "1"
	argFalse any = "0"
)

func flag(b bool) any {
	if b {
		return argTrue
	}
	return argFalse
}

// Decide implements store.Decider with one EVALSHA of alg's Lua form,
// atomic on the server, with no retries; a composite (algorithms.All) runs
// the composite Lua form the same way (see decideAll). For an algorithm
// without one (any that is not a built-in, see forms.BuiltinOf, and a
// composite with such a part or a sliding log) it returns an error
// wrapping store.ErrUnsupported without sending anything.
func (e *Engine) Decide(ctx context.Context, key store.Key, alg algorithms.Algorithm, req algorithms.Request) (algorithms.Decision, error) {
	s, sf := Form(alg)
	c, composite := alg.(algorithms.Composite)
	if s == nil && !composite {
		return algorithms.Decision{}, fmt.Errorf("%s: algorithm %s has no Lua form: %w", e.name, alg.Name(), store.ErrUnsupported)
	}
	if req.Cost < 1 || req.Cost > alg.MaxCost() {
		return algorithms.Decision{}, fmt.Errorf("%s: cost %d outside 1..%d for %s: %w", e.name, req.Cost, alg.MaxCost(), alg.Name(), store.ErrInvalidCost)
	}
	if req.Now < 0 || req.Now > algorithms.MaxExact/2 {
		return algorithms.Decision{}, fmt.Errorf("%s: time %d µs since the epoch: %w", e.name, req.Now, store.ErrInvalidTime)
	}
	if req.MaxDelay < 0 || req.MaxDelay > algorithms.MaxExact/2 || req.Act < 0 || req.Act > algorithms.MaxExact {
		return algorithms.Decision{}, fmt.Errorf("%s: reservation max delay %d µs or refund time %d µs out of range: %w",
			e.name, req.MaxDelay, req.Act, store.ErrInvalidTime)
	}
	if err := ctx.Err(); err != nil {
		return algorithms.Decision{}, fmt.Errorf("%s: decide %s for %q: %w", e.name, alg.Name(), key.String(), err)
	}
	if composite {
		return e.decideAll(ctx, key, c, req)
	}
	var f [forms.LuaReplyLen]int64
	if decoded, err := e.decide(ctx, s, StateKey(e.prefix, key), req, alg, sf.ServerArgs(), f[:]); err != nil {
		if decoded {
			return algorithms.Decision{}, fmt.Errorf("%s: decide %s for %q: %w", e.name, alg.Name(), key.String(), err)
		}
		return algorithms.Decision{}, wrap(ctx, e.name, fmt.Sprintf("decide %s for %q", alg.Name(), key.String()), err)
	}
	return decision(f[:]), nil
}

// decision reads a Lua form's reply fields (see algorithms.LuaReply...),
// the first LuaReplyLen of f.
func decision(f []int64) algorithms.Decision {
	return algorithms.Decision{
		Allowed:    f[forms.LuaReplyAllowed] == 1,
		Limit:      f[forms.LuaReplyLimit],
		Remaining:  f[forms.LuaReplyRemaining],
		RetryAfter: f[forms.LuaReplyRetryAfter],
		ResetAfter: f[forms.LuaReplyResetAfter],
		Delay:      f[forms.LuaReplyDelay],
	}
}

// decide runs s for one request on key: batched with concurrent decisions
// when the backend pipelines (see batcher), alone otherwise. It decodes
// the reply into f (Ints); decoded says the error, if any, is Ints's.
func (e *Engine) decide(ctx context.Context, s *Script, key string, req algorithms.Request, alg algorithms.Algorithm, params []int64, f []int64) (decoded bool, err error) {
	c := pendingPool.Get().(*pending)
	c.key[0] = key
	c.args[0] = req.Now
	c.args[1] = req.Cost
	c.args[2] = flag(req.Peek)
	c.args[3] = flag(e.serverClock)
	c.args[5], c.args[4] = e.params(alg, params)
	c.Script, c.Keys, c.Args, c.Ints = s, c.key[:], c.args[:forms.LuaFixedArgs+1], true
	if req.MaxDelay != 0 || req.Refund {
		// A reservation or a refund: the calling convention's optional
		// ARGV[7] to ARGV[9], which the coalesced forms do not take (so
		// it is decided alone, see coalescable).
		c.args[6], c.args[7], c.args[8] = req.MaxDelay, flag(req.Refund), req.Act
		c.Args = c.args[:]
	}
	c.req = req
	if e.batch == nil {
		r, err := e.run(ctx, s, c.Keys, c.Args)
		c.release()
		if err != nil {
			return false, err
		}
		return true, Ints(r, f)
	}
	if err := e.batcherFor(c).do(ctx, c); err != nil {
		// c may still be in a batch in flight: it is never reused.
		return false, err
	}
	switch {
	case c.Err != nil:
		err = c.Err
	case c.ints != nil:
		decoded, err = true, ints(c.ints, nil, f)
	case c.fields != nil:
		decoded, err = true, fields(c.fields, f)
	default:
		decoded, err = true, Ints(c.Reply, f)
	}
	c.release()
	return decoded, err
}

// batcherFor returns the batcher of c's decision: without a Router, the
// engine's one; with one, the batcher of the node that serves c's key (as
// the Router sees it now, which c remembers), made on first use, or the
// engine's one when the Router cannot tell. A cluster's masters each get
// one, as does a master that replaces one after a failover: their number
// is that of the masters the engine has seen.
func (e *Engine) batcherFor(c *pending) *batcher {
	if e.router == nil {
		return e.batch
	}
	n := e.router.Node(c.key[0])
	if n == nil {
		return e.batch
	}
	c.node = n
	if b, ok := e.nodes.Load(n); ok {
		return b.(*batcher)
	}
	b, _ := e.nodes.LoadOrStore(n, &batcher{p: e.batch.p, noScript: e.batch.noScript, router: e.router, maxFly: e.batch.maxFly, detach: e.batch.detach})
	return b.(*batcher)
}

// maxCachedParams bounds the cache of formatted ServerArgs.
const maxCachedParams = 1024

// params returns alg's ServerArgs p packed for a Lua form
// (forms.PackLuaArgs) and the slack of its keys' expiries, both boxed.
// ServerArgs returns the same slice on every call (its doc says so), so
// both are cached by the slice's address.
func (e *Engine) params(alg algorithms.Algorithm, p []int64) (packed, slack any) {
	if len(p) == 0 {
		return "", e.slackFor(alg)
	}
	if v, ok := e.paramCache.Load(&p[0]); ok {
		if c := v.(cachedParams); slices.Equal(c.vals, p) {
			return c.packed, c.slack
		}
	}
	packed, slack = forms.PackLuaArgs(p), e.slackFor(alg)
	if e.paramCount.Load() < maxCachedParams {
		e.paramCount.Add(1)
		e.paramCache.Store(&p[0], cachedParams{vals: slices.Clone(p), packed: packed, slack: slack})
	}
	return packed, slack
}

type cachedParams struct {
	vals          []int64
	packed, slack any
}

// slackFor returns the slack of alg's keys in milliseconds, as a script
// argument: ServerClockSlack on the server's clock, and otherwise the
// larger of DefaultSlack and the longest TTL alg gives its state, which is
// the TTL of a fresh key's state after a request of the largest cost (see
// DefaultSlack).
func (e *Engine) slackFor(alg algorithms.Algorithm) any {
	if e.serverClock {
		return e.slackArg
	}
	slack := e.slack
	if step, err := alg.Decide(nil, algorithms.Request{Now: 0, Cost: alg.MaxCost()}); err == nil && step.TTL > 0 {
		slack = max(slack, TTLMillis(min(step.TTL, algorithms.MaxExact/2)))
	}
	return strconv.FormatInt(slack, 10)
}

// Ints decodes a script's reply of integers into dst, which must have
// exactly its length: an array (a []any, or an IntReply), or a Lua form's
// packed reply (forms.UnpackLuaReply), which the clients hand over as a
// string.
func Ints(r any, dst []int64) error {
	switch v := r.(type) {
	case string:
		return forms.UnpackLuaReply(v, dst)
	case []any:
		return fields(v, dst)
	case IntReply:
		return ints(v.Ints, v.Errs, dst)
	}
	return fmt.Errorf("unexpected script reply %v, want %d integers", r, len(dst))
}

// ints is Ints on an IntReply's items and errors.
func ints(v []int64, errs []error, dst []int64) error {
	if len(v) != len(dst) || slices.ContainsFunc(errs, func(err error) bool { return err != nil }) {
		return fmt.Errorf("unexpected script reply %v (errors %v), want %d integers", v, errs, len(dst))
	}
	copy(dst, v)
	return nil
}

// fields is Ints on a reply already known to be an array.
func fields(arr []any, dst []int64) error {
	r := arr
	if len(arr) != len(dst) {
		return fmt.Errorf("unexpected script reply %v, want %d integers", r, len(dst))
	}
	for i, v := range arr {
		n, ok := v.(int64)
		if !ok {
			return fmt.Errorf("unexpected script reply %v, want %d integers", r, len(dst))
		}
		dst[i] = n
	}
	return nil
}

// lock takes key's in-process lock, so that concurrent Updates of one key
// in one process queue instead of failing each other's compare-and-set.
func (e *Engine) lock(ctx context.Context, k string) (chan struct{}, error) {
	l := e.locks[maphash.String(e.seed, k)%uint64(len(e.locks))]
	select {
	case l <- struct{}{}:
		return l, nil
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

// Update implements store.Store with an optimistic compare-and-set: read
// the value, call fn, and write its result only if the value is still the
// one read, retrying up to MaxAttempts times before an error wrapping
// ErrConflict. Concurrent updates of one key within one process wait for
// each other instead of competing. The limiter uses it only for algorithms
// without a Lua form. The stored value is the
// state's expiry (µs since the epoch, 8 bytes little-endian, on the clock
// fn was given) followed by the state, so that state past its TTL reads as
// missing even when the server has not expired it yet. An expiry outside
// 1..algorithms.MaxExact was not written by Update (TTLs are capped at
// MaxExact/2, times are at most MaxExact/2), so such a value is
// ErrCorruptState, never missing state.
func (e *Engine) Update(ctx context.Context, key store.Key, now int64, fn store.UpdateFunc) error {
	k := StateKey(e.prefix, key) + UpdateSuffix
	what := fmt.Sprintf("update %q", key.String())
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("%s: %s: %w", e.name, what, err)
	}
	l, err := e.lock(ctx, k)
	if err != nil {
		return fmt.Errorf("%s: %s: %w", e.name, what, err)
	}
	defer func() { <-l }()
	keys := []string{k}
	readArgs := []any{flag(e.serverClock)}
	for attempt := 1; ; attempt++ {
		r, err := e.run(ctx, readScript, keys, readArgs)
		if err != nil {
			return wrap(ctx, e.name, what, err)
		}
		arr, ok := r.([]any)
		if !ok || len(arr) == 0 || (e.serverClock && len(arr) != 3) {
			return fmt.Errorf("%s: %s: unexpected reply %v", e.name, what, r)
		}
		t := now
		if e.serverClock {
			t, err = serverTime(arr[1], arr[2])
			if err != nil {
				return fmt.Errorf("%s: %s: %w", e.name, what, err)
			}
		}
		var cur []byte
		old, found := arr[0].(string)
		if found {
			if len(old) < 8 {
				return fmt.Errorf("%s: %s: %w: stored value of %d bytes", e.name, what, algorithms.ErrCorruptState, len(old))
			}
			expires := int64(binary.LittleEndian.Uint64([]byte(old[:8])))
			if expires < 1 || expires > algorithms.MaxExact {
				return fmt.Errorf("%s: %s: %w: stored expiry %d µs since the epoch", e.name, what, algorithms.ErrCorruptState, expires)
			}
			if t < expires {
				cur = []byte(old[8:])
			}
		}
		next, ttl, err := fn(cur, t)
		if err != nil {
			return err
		}
		if next == nil {
			return nil
		}
		ttl = min(max(ttl, 1), algorithms.MaxExact/2)
		val := make([]byte, 8, 8+len(next))
		binary.LittleEndian.PutUint64(val, uint64(t+ttl))
		val = append(val, next...)
		px := TTLMillis(ttl)
		if e.serverClock {
			px += e.slack
		} else {
			px += max(e.slack, px) // see DefaultSlack
		}
		r, err = e.run(ctx, casScript, keys, []any{flag(found), old, string(val), px})
		if err != nil {
			return wrap(ctx, e.name, what, err)
		}
		if n, ok := r.(int64); ok && n == 1 {
			return nil
		}
		if attempt == MaxAttempts {
			return fmt.Errorf("%s: %s: %w: lost %d compare-and-set races to other processes", e.name, what, ErrConflict, attempt)
		}
		// Another process wrote between the read and the write: back off
		// a little, more with each attempt, and try again.
		select {
		case <-time.After(time.Duration(attempt*attempt) * 50 * time.Microsecond):
		case <-ctx.Done():
			return fmt.Errorf("%s: %s: %w", e.name, what, ctx.Err())
		}
	}
}

func serverTime(sec, usec any) (int64, error) {
	s, ok1 := sec.(string)
	u, ok2 := usec.(string)
	if !ok1 || !ok2 {
		return 0, fmt.Errorf("unexpected TIME reply %v %v", sec, usec)
	}
	a, err1 := strconv.ParseInt(s, 10, 64)
	b, err2 := strconv.ParseInt(u, 10, 64)
	if err := errors.Join(err1, err2); err != nil {
		return 0, fmt.Errorf("unexpected TIME reply: %w", err)
	}
	return a*1_000_000 + b, nil
}

// Delete implements store.Store: it deletes every key of the decision.
func (e *Engine) Delete(ctx context.Context, key store.Key) error {
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("%s: delete %q: %w", e.name, key.String(), err)
	}
	k := StateKey(e.prefix, key)
	if err := e.backend.Del(ctx, k, k+UpdateSuffix); err != nil {
		return wrap(ctx, e.name, fmt.Sprintf("delete %q", key.String()), err)
	}
	return nil
}

// stateScript replies with the raw state of a decision: {"1", value} for
// the Lua forms' string, {"1", {member, score, ...}} for the sliding log's
// sorted set, {"2", value} for the key Update writes, or {} when there is
// none.
var stateScript = NewScript("state", `for i = 1, 2 do
  local t = redis.call('TYPE', KEYS[i])['ok']
  if t == 'string' then return {tostring(i), redis.call('GET', KEYS[i])} end
  if t == 'zset' then return {tostring(i), redis.call('ZRANGE', KEYS[i], 0, -1, 'WITHSCORES')} end
end
return {}
`, 0)

// StateReader returns a function that reads a key's state from e in the
// Go form's encoding, with the time its TTL passes (µs since the epoch, on the clock that decided), or a nil state
// when the key holds none: what the conformance suite's Harness.State asks
// for, so that tests hold every write of a Lua form to the Go form's. The
// Lua forms' doubles become little-endian int64 fields, and the sliding
// log's members become (time, cost) entries in the order the Go form keeps
// them: by time, then by when they were added (their sequence number),
// after the header (-1, total) when the "y:" member holds the total.
// It is not a method so that the stores, which embed the Engine, do not
// offer it; their tests reach it.
func StateReader(e *Engine) func(ctx context.Context, key store.Key) ([]byte, int64, error) {
	return func(ctx context.Context, key store.Key) ([]byte, int64, error) { return state(ctx, e, key) }
}

func state(ctx context.Context, e *Engine, key store.Key) ([]byte, int64, error) {
	k := StateKey(e.prefix, key)
	r, err := e.run(ctx, stateScript, []string{k, k + UpdateSuffix}, nil)
	if err != nil {
		return nil, 0, wrap(ctx, e.name, fmt.Sprintf("read state of %q", key.String()), err)
	}
	return decodeState(e, key, r)
}

// decodeState decodes stateScript's reply r for key.
func decodeState(e *Engine, key store.Key, r any) ([]byte, int64, error) {
	arr, _ := r.([]any)
	if len(arr) == 0 {
		return nil, 0, nil
	}
	bad := fmt.Errorf("%s: read state of %q: unexpected reply %v", e.name, key.String(), r)
	which, _ := arr[0].(string)
	if len(arr) != 2 || (which != "1" && which != "2") {
		return nil, 0, bad
	}
	if zset, ok := arr[1].([]any); ok {
		return logState(zset, bad)
	}
	raw, ok := arr[1].(string)
	switch {
	case !ok || len(raw) < 8 || (which == "1" && len(raw)%8 != 0):
		return nil, 0, bad
	case which == "2":
		return []byte(raw[8:]), int64(binary.LittleEndian.Uint64([]byte(raw[:8]))), nil
	}
	vals := make([]byte, 0, len(raw)-8)
	for i := 8; i < len(raw); i += 8 {
		vals = binary.LittleEndian.AppendUint64(vals, uint64(int64(math.Float64frombits(binary.LittleEndian.Uint64([]byte(raw[i:]))))))
	}
	return vals, int64(math.Float64frombits(binary.LittleEndian.Uint64([]byte(raw[:8])))), nil
}

// logState decodes the sliding log's sorted set, {member, score, ...}.
func logState(zset []any, bad error) ([]byte, int64, error) {
	type entry struct{ at, seq, cost int64 }
	var entries []entry
	expires, total := int64(-1), int64(-1)
	for i := 0; i+1 < len(zset); i += 2 {
		m, _ := zset[i].(string)
		score, _ := zset[i+1].(string)
		if x, ok := strings.CutPrefix(m, "x:"); ok {
			v, err := strconv.ParseInt(x, 10, 64)
			if err != nil {
				return nil, 0, bad
			}
			expires = v
			continue
		}
		if y, ok := strings.CutPrefix(m, "y:"); ok {
			// y:<total>:<seq>:<newest>: the total is the Go form's header.
			t, _, _ := strings.Cut(y, ":")
			v, err := strconv.ParseInt(t, 10, 64)
			if err != nil {
				return nil, 0, bad
			}
			total = v
			continue
		}
		seq, cost, ok := strings.Cut(m, ":")
		s, err1 := strconv.ParseInt(seq, 10, 64)
		c, err2 := strconv.ParseInt(cost, 10, 64)
		at, err3 := strconv.ParseFloat(score, 64)
		if !ok || errors.Join(err1, err2, err3) != nil {
			return nil, 0, bad
		}
		entries = append(entries, entry{int64(at), s, c})
	}
	if expires < 0 {
		return nil, 0, bad
	}
	slices.SortFunc(entries, func(a, b entry) int { return cmp.Or(cmp.Compare(a.at, b.at), cmp.Compare(a.seq, b.seq)) })
	state := make([]byte, 0, 16*len(entries)+16)
	if total >= 0 {
		state = binary.LittleEndian.AppendUint64(state, math.MaxUint64) // the header's time, -1
		state = binary.LittleEndian.AppendUint64(state, uint64(total))
	}
	for _, e := range entries {
		state = binary.LittleEndian.AppendUint64(state, uint64(e.at))
		state = binary.LittleEndian.AppendUint64(state, uint64(e.cost))
	}
	return state, expires, nil
}

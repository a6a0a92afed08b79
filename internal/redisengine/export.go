package redisengine

import (
	"context"
	"encoding/binary"
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"

	"github.com/ratelimitkit/ratelimit/algorithms"
	"github.com/ratelimitkit/ratelimit/algorithms/forms"
	"github.com/ratelimitkit/ratelimit/store"
)

// Scanner is implemented by Backends that can enumerate keys: SCAN on a
// standalone server, and on every master of a cluster (each key is held
// by one master, so each is seen once). Scan calls fn with batches of key
// names matching the glob pattern match; fn may be called from several
// goroutines at once, one per master, and may run commands on the Backend.
// A Backend whose client cannot reach every master returns an error
// wrapping store.ErrUnsupported.
type Scanner interface {
	Scan(ctx context.Context, match string, fn func(keys []string) error) error
}

// ScanBatch is the COUNT hint of every SCAN.
const ScanBatch = 1000

// globEscape escapes the glob characters of a SCAN pattern.
func globEscape(s string) string {
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		switch c := s[i]; c {
		case '*', '?', '[', ']', '\\':
			b.WriteByte('\\')
			b.WriteByte(c)
		default:
			b.WriteByte(c)
		}
	}
	return b.String()
}

// parseStateKey is the inverse of StateKey for a key name under prefix,
// with or without UpdateSuffix.
func parseStateKey(prefix, name string) (key store.Key, update, ok bool) {
	rest, ok := strings.CutPrefix(name, prefix+":{")
	if !ok {
		return key, false, false
	}
	if r, found := strings.CutSuffix(rest, "}"+UpdateSuffix); found {
		rest, update = r, true
	} else if r, found := strings.CutSuffix(rest, "}"); found {
		rest = r
	} else {
		return key, false, false
	}
	key, ok = store.ParseKey(rest)
	if !ok {
		return key, false, false
	}
	key.ID = unescapeID(key.ID)
	return key, update, true
}

// idEscapes inverts the escape of StateKey's id.
var idEscapes = strings.NewReplacer("%7B", "{", "%7D", "}", "%25", "%")

// unescapeID returns the id StateKey escaped into s.
func unescapeID(s string) string {
	if strings.IndexByte(s, '%') < 0 {
		return s
	}
	return idEscapes.Replace(s)
}

// timeScript replies with the server's TIME.
var timeScript = NewScript("time", `return redis.call('TIME')`, 0)

// clock returns now, or the server's time when the engine reads it.
func (e *Engine) clock(ctx context.Context, now int64) (int64, error) {
	if !e.serverClock {
		return now, nil
	}
	r, err := e.run(ctx, timeScript, nil, nil)
	if err != nil {
		return 0, wrap(ctx, e.name, "read the server's clock", err)
	}
	arr, _ := r.([]any)
	if len(arr) != 2 {
		return 0, fmt.Errorf("%s: unexpected TIME reply %v", e.name, r)
	}
	return serverTime(arr[0], arr[1])
}

// ExportTimeout bounds each round trip of Export (and so of
// statefile.Count): one SCAN, one pipeline of state reads, the read of the
// server's clock. A server that hangs fails an export within about one
// ExportTimeout, however many keys it holds, and a slow but live one is
// not cut off part way through a long export.
const ExportTimeout = time.Second

// Bounded runs call with a context that ends ExportTimeout from now, and
// returns its error or, when the time passes first, an error wrapping
// context.DeadlineExceeded, without waiting for call: a
// client that does not honour the context's deadline (go-redis without
// ContextTimeoutEnabled) goes on in call's goroutine until its own read
// timeout, and its outcome is dropped. call must not touch what the caller
// reads after Bounded returns early.
func Bounded(ctx context.Context, call func(context.Context) error) error {
	ctx, cancel := context.WithTimeout(ctx, ExportTimeout)
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- call(ctx) }()
	select {
	case err := <-done:
		return err
	case <-ctx.Done():
		return fmt.Errorf("no reply within %v: %w", ExportTimeout, ctx.Err())
	}
}

// exportScript is stateScript for a key name SCAN returned: ARGV[1] is "2"
// when the name is the Update key, and then, when the decision's Lua forms'
// key exists too, it replies {}: that key's own name yields the state,
// once.
var exportScript = NewScript("export", `if ARGV[1] == '2' and redis.call('EXISTS', KEYS[1]) == 1 then return {} end
`+stateScript.Src, 0)

// argUpdate is exportScript's ARGV[1] for an Update key's name.
var argUpdate any = "2"

// Export implements store.Exporter with SCAN over every master, reading
// each batch of keys SCAN returns with one pipeline of scripts, each
// reading a key's state as StateReader does (which prefers the Lua forms'
// key to the Update key when a decision has both, so such a key is yielded
// once): two round trips per ScanBatch keys. Keys whose state has expired
// by now (the server's clock when the engine reads it, taken once at the
// start) are skipped. Each round trip is bounded by ExportTimeout.
func (e *Engine) Export(ctx context.Context, namespace string, now int64, yield func(store.Entry) error) error {
	sc, ok := e.backend.(Scanner)
	if !ok {
		return fmt.Errorf("%s: the client cannot scan keys: %w", e.name, store.ErrUnsupported)
	}
	if e.serverClock {
		var t int64
		err := Bounded(ctx, func(ctx context.Context) error {
			var err error
			t, err = e.clock(ctx, now)
			return err
		})
		if err != nil {
			return fmt.Errorf("%s: export: %w", e.name, err)
		}
		now = t
	}
	match := globEscape(e.prefix) + ":{*"
	if namespace != "" {
		match = globEscape(e.prefix) + ":{" + globEscape(namespace) + ":*"
	}
	// fn may run on one goroutine per master; yield is called from one at
	// a time.
	yields := make(chan struct{}, 1)
	return sc.Scan(ctx, match, func(names []string) error {
		entries, err := e.readStates(ctx, namespace, now, names)
		if err != nil {
			return err
		}
		for _, en := range entries {
			select {
			case yields <- struct{}{}:
			case <-ctx.Done():
				return ctx.Err()
			}
			err = yield(en)
			<-yields
			if err != nil {
				return err
			}
		}
		return nil
	})
}

// readStates reads the live states of the keys names (as SCAN returned
// them) under namespace, with one pipeline of exportScript, or one call
// per key on a backend that is not a Pipeliner.
func (e *Engine) readStates(ctx context.Context, namespace string, now int64, names []string) ([]store.Entry, error) {
	keys := make([]store.Key, 0, len(names))
	calls := make([]*Call, 0, len(names))
	for _, name := range names {
		key, update, ok := parseStateKey(e.prefix, name)
		if !ok || (namespace != "" && key.Namespace != namespace) {
			continue
		}
		k := StateKey(e.prefix, key)
		c := &Call{Script: exportScript, Keys: []string{k, k + UpdateSuffix}, Args: []any{argFalse}}
		if update {
			c.Args[0] = argUpdate
		}
		keys = append(keys, key)
		calls = append(calls, c)
	}
	if len(calls) == 0 {
		return nil, nil
	}
	// The calls are this goroutine's again only when Bounded returns the
	// pipeline's own outcome.
	err := Bounded(ctx, func(ctx context.Context) error {
		p, ok := e.backend.(Pipeliner)
		if !ok {
			for _, c := range calls {
				c.Reply, c.Err = e.run(ctx, c.Script, c.Keys, c.Args)
			}
			return nil
		}
		p.Pipeline(ctx, calls)
		var again []*Call // the server had not cached the script
		for _, c := range calls {
			if c.Err != nil && e.backend.NoScript(c.Err) {
				c.ByText = true
				again = append(again, c)
			}
		}
		if len(again) > 0 {
			p.Pipeline(ctx, again)
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("%s: export %d keys: %w", e.name, len(calls), err)
	}
	out := make([]store.Entry, 0, len(calls))
	for i, c := range calls {
		if c.Err != nil {
			return nil, wrap(ctx, e.name, fmt.Sprintf("export %q", keys[i].String()), c.Err)
		}
		st, expires, err := decodeState(e, keys[i], c.Reply)
		if err != nil {
			return nil, err
		}
		if st == nil || expires <= now {
			continue
		}
		out = append(out, store.Entry{Key: keys[i], State: st, Expires: expires})
	}
	return out, nil
}

// importScript writes a state unless the decision's keys hold live state:
//
//	KEYS[1]  the Lua forms' key, KEYS[2] the Update key
//	ARGV[1]  now, ARGV[2] "1" to read the server's TIME instead
//	ARGV[3]  the state's expiry (µs), ARGV[4] the slack (ms)
//	ARGV[5]  "s": SET KEYS[1] to ARGV[6]; "u": SET KEYS[2] to ARGV[6];
//	         "z": a sorted set at KEYS[1] of the expiry member and
//	         ARGV[6..] as score, member pairs
//
// It replies 1 when it wrote, 0 when it did not. State it cannot read is
// kept, as live.
var importScript = NewScript("import", `local now = tonumber(ARGV[1])
if ARGV[2] == '1' then
  local t = redis.call('TIME')
  now = tonumber(t[1]) * 1000000 + tonumber(t[2])
end
local expires = tonumber(ARGV[3])
if expires <= now then return 0 end
-- The key's expiry, as a decision sets it: the TTL left in ms, rounded up,
-- at least 1, plus the slack.
local px = math.max(math.floor((expires - now + 999) / 1000), 1) + tonumber(ARGV[4])
for i = 1, 2 do
  local t = redis.call('TYPE', KEYS[i])['ok']
  if t == 'string' then
    local v = redis.call('GET', KEYS[i])
    if #v < 8 then return 0 end
    local x
    if i == 1 then x = struct.unpack('<d', v) else x = struct.unpack('<i8', v) end
    if x > now then return 0 end
  elseif t == 'zset' then
    local head = redis.call('ZRANGE', KEYS[i], 0, 0)
    local x = head[1] and tonumber(string.match(head[1], '^x:(%d+)$'))
    if not x or x > now then return 0 end
  elseif t ~= 'none' then
    return 0
  end
end
local kind = ARGV[5]
if kind == 'u' then
  redis.call('SET', KEYS[2], ARGV[6], 'PX', px)
  return 1
end
redis.call('DEL', KEYS[1])
if kind == 's' then
  redis.call('SET', KEYS[1], ARGV[6], 'PX', px)
  return 1
end
redis.call('ZADD', KEYS[1], '-inf', 'x:' .. ARGV[3])
for i = 6, #ARGV, 2 do
  redis.call('ZADD', KEYS[1], ARGV[i], ARGV[i + 1])
end
redis.call('PEXPIRE', KEYS[1], px)
return 1
`, 0)

// slidingLog is the built-in whose Lua form keeps a sorted set.
var slidingLog = forms.BuiltinOf(algorithms.SlidingLog(1, time.Second))

// Import implements store.Importer. The state of an algorithm with a
// Lua form is written in that form's encoding (the inverse of StateReader:
// the expiry and the Go form's fields as doubles; the sliding log's entries
// as sorted-set members); any other state goes where Update keeps it. The
// key's expiry is set as a decision sets it: the TTL left, rounded up to
// milliseconds, plus the slack.
func (e *Engine) Import(ctx context.Context, alg algorithms.Algorithm, en store.Entry, now int64) (bool, error) {
	what := fmt.Sprintf("import %q", en.Key.String())
	if err := ctx.Err(); err != nil {
		return false, fmt.Errorf("%s: %s: %w", e.name, what, err)
	}
	if !e.serverClock && en.Expires <= now {
		return false, nil
	}
	k := StateKey(e.prefix, en.Key)
	args := []any{now, flag(e.serverClock), en.Expires, e.slackArg}
	s, _ := Form(alg)
	if c, ok := alg.(algorithms.Composite); ok && e.compositeArgs(c) != nil {
		s = allScript // the composite Lua form's state: doubles, as luaState writes
	}
	switch {
	case s == nil:
		val := binary.LittleEndian.AppendUint64(make([]byte, 0, 8+len(en.State)), uint64(en.Expires))
		args = append(args, "u", string(append(val, en.State...)))
	case forms.BuiltinOf(alg) == slidingLog:
		members, err := logMembers(en.State)
		if err != nil {
			return false, fmt.Errorf("%s: %s: %w", e.name, what, err)
		}
		args = append(args, "z")
		args = append(args, members...)
	default:
		packed, err := luaState(en.State, en.Expires)
		if err != nil {
			return false, fmt.Errorf("%s: %s: %w", e.name, what, err)
		}
		args = append(args, "s", packed)
	}
	r, err := e.run(ctx, importScript, []string{k, k + UpdateSuffix}, args)
	if err != nil {
		return false, wrap(ctx, e.name, what, err)
	}
	n, ok := r.(int64)
	if !ok {
		return false, fmt.Errorf("%s: %s: unexpected reply %v", e.name, what, r)
	}
	return n == 1, nil
}

// luaState is the inverse of state for a Lua form's string: the expiry,
// then each little-endian int64 field of the Go form's state, as
// little-endian doubles. A field may be -1: the header mark of a sliding
// log that is a composite's part.
func luaState(st []byte, expires int64) (string, error) {
	if len(st)%8 != 0 {
		return "", fmt.Errorf("%w: %d bytes, not a multiple of 8", algorithms.ErrCorruptState, len(st))
	}
	b := binary.LittleEndian.AppendUint64(make([]byte, 0, 8+len(st)), math.Float64bits(float64(expires)))
	for i := 0; i < len(st); i += 8 {
		v := int64(binary.LittleEndian.Uint64(st[i:]))
		if v < -1 || v > algorithms.MaxExact {
			return "", fmt.Errorf("%w: field %d is %d", algorithms.ErrCorruptState, i/8, v)
		}
		b = binary.LittleEndian.AppendUint64(b, math.Float64bits(float64(v)))
	}
	return string(b), nil
}

// logMembers is the inverse of logState: the sliding log's header (-1,
// total), when it has one, as the "y:total:seq:newest" member, and its
// (time, cost) entries as score, member pairs, the members "seq:cost"
// numbered in the log's order, which is by time.
func logMembers(st []byte) ([]any, error) {
	if len(st)%16 != 0 {
		return nil, fmt.Errorf("%w: sliding log of %d bytes", algorithms.ErrCorruptState, len(st))
	}
	total := int64(-1)
	if len(st) >= 16 && binary.LittleEndian.Uint64(st) == math.MaxUint64 {
		total = int64(binary.LittleEndian.Uint64(st[8:]))
		if total < 0 || total > algorithms.MaxExact {
			return nil, fmt.Errorf("%w: sliding log total %d", algorithms.ErrCorruptState, total)
		}
		st = st[16:]
	}
	n := len(st) / 16
	out := make([]any, 0, 2*n+2)
	newest := int64(-1)
	for i := range n {
		at := int64(binary.LittleEndian.Uint64(st[16*i:]))
		cost := int64(binary.LittleEndian.Uint64(st[16*i+8:]))
		if at < 0 || at > algorithms.MaxExact || cost <= 0 || cost > algorithms.MaxExact || at < newest {
			return nil, fmt.Errorf("%w: sliding log entry %d at %d of cost %d", algorithms.ErrCorruptState, i, at, cost)
		}
		newest = at
		out = append(out, strconv.FormatInt(at, 10), strconv.Itoa(i+1)+":"+strconv.FormatInt(cost, 10))
	}
	if total >= 0 && n > 0 {
		out = append(out, "-inf", "y:"+strconv.FormatInt(total, 10)+":"+strconv.Itoa(n)+":"+strconv.FormatInt(newest, 10))
	}
	return out, nil
}

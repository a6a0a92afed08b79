// Package redisengine is the store engine the Redis and Valkey stores
// share: an Engine implements store.Store and store.Decider over a
// Backend, the few commands a store's client must run. It holds everything
// else once: the options, key encoding, running the algorithms' Lua forms
// (algorithms/forms/lua) and decoding their replies, TTLs and slack, and the
// optimistic Update for algorithms without a Lua form. A store package is
// its client's Backend, its options and its docs.
package redisengine

import (
	"context"
	"crypto/sha1"
	"encoding/hex"
	"errors"
	"fmt"
	"strconv"
	"strings"

	"github.com/ratelimitkit/ratelimit/algorithms"
	"github.com/ratelimitkit/ratelimit/algorithms/forms"
	"github.com/ratelimitkit/ratelimit/store"
)

// Backend is the little a store needs from its client. Script arguments
// are strings or int64s; replies are decoded into int64, string, nil, or
// []any of those.
type Backend interface {
	// EvalSha runs the cached script with the given SHA1 (EVALSHA).
	EvalSha(ctx context.Context, sha string, keys []string, args []any) (any, error)
	// Eval runs the script's source (EVAL), which also caches it on the
	// server that runs it.
	Eval(ctx context.Context, src string, keys []string, args []any) (any, error)
	// Del deletes keys, which share one hash slot.
	Del(ctx context.Context, keys ...string) error
	// NoScript reports whether err is the server's NOSCRIPT error.
	NoScript(err error) bool
}

// Script is a Lua script and its SHA1.
type Script struct {
	// Name is the algorithm's name, or what the script is for.
	Name string
	// Src is the script's source.
	Src string
	// SHA is the hex SHA1 of Src, as EVALSHA wants it.
	SHA string
	// Args is how many ServerArgs an algorithm's form takes.
	Args int
	// Many is the algorithm's coalesced form (forms.ManyLua), which
	// decides several requests on one key in one run, or nil.
	Many *Script
	// Node is the node form of a coalesced form (on Many's script): the
	// same decisions for keys of any slots one cluster node serves, in one
	// run that declares no keys (see Router).
	Node *Script

	sha, src any // SHA and Src, boxed once for Call.Command
}

// NewScript returns src with its SHA1.
func NewScript(name, src string, args int) *Script {
	sum := sha1.Sum([]byte(src))
	sha := hex.EncodeToString(sum[:])
	return &Script{Name: name, Src: src, SHA: sha, Args: args, sha: sha, src: src}
}

// luaForms are the Lua forms of the built-in algorithms, by registry entry.
var luaForms = map[*forms.Builtin]*Script{}

func init() {
	for _, b := range forms.Builtins() {
		if src, ok := b.Lua(); ok {
			s := NewScript(b.Name, src, b.Args)
			if many, ok := forms.ManyLua(b.Name); ok {
				s.Many = NewScript(b.Name+" (many)", many, b.Args)
				if node, ok := nodeForm(b.Name, many); ok {
					s.Many.Node = NewScript(b.Name+" (node)", node, b.Args)
				}
			}
			luaForms[b] = s
		}
	}
}

// Form returns the Lua form of alg, or nil when alg has none: it is not a
// built-in algorithm (forms.BuiltinOf, which goes by the algorithm's
// type, never its name), or the built-in has no Lua form.
func Form(alg algorithms.Algorithm) (*Script, forms.ServerForm) {
	b := forms.BuiltinOf(alg)
	if b == nil {
		return nil, nil
	}
	s := luaForms[b]
	sf, ok := alg.(forms.ServerForm)
	if s == nil || !ok || len(sf.ServerArgs()) != s.Args {
		return nil, nil
	}
	return s, sf
}

// Forms returns the Lua forms of the built-in algorithms.
func Forms() []*Script {
	out := make([]*Script, 0, len(luaForms))
	for _, s := range luaForms {
		out = append(out, s)
	}
	return out
}

// AppendStrings appends script arguments (strings and int64s), converted
// to strings, to dst, for clients that take only strings.
func AppendStrings(dst []string, args []any) []string {
	for _, a := range args {
		switch v := a.(type) {
		case string:
			dst = append(dst, v)
		case int64:
			dst = append(dst, strconv.FormatInt(v, 10))
		default:
			dst = append(dst, fmt.Sprint(v))
		}
	}
	return dst
}

// Key encoding.
//
// A decision's keys are
//
//	<prefix>:{<namespace>:<escaped id>}          state of a Lua form
//	<prefix>:{<namespace>:<escaped id>}:u        state written by Update
//
// The braces are the Redis Cluster hash tag: only the part between them
// picks the slot, so every key of one decision lies in one slot. The
// namespace holds no braces (store.Key guarantees it) and the id is
// escaped so that it holds none either: '%', '{' and '}' become %25, %7B and
// %7D. The escape is injective, so distinct Keys give distinct names.

// UpdateSuffix ends the name of the key Update writes.
const UpdateSuffix = ":u"

// StateKey returns the name of key's state under prefix.
func StateKey(prefix string, key store.Key) string {
	id := key.ID
	n := 0
	for i := 0; i < len(id); i++ {
		if c := id[i]; c == '{' || c == '}' || c == '%' {
			n++
		}
	}
	var b strings.Builder
	b.Grow(len(prefix) + len(key.Namespace) + len(id) + 2*n + 4)
	b.WriteString(prefix)
	b.WriteString(":{")
	b.WriteString(key.Namespace)
	b.WriteByte(':')
	if n == 0 {
		b.WriteString(id)
	} else {
		for i := 0; i < len(id); i++ {
			switch c := id[i]; c {
			case '{':
				b.WriteString("%7B")
			case '}':
				b.WriteString("%7D")
			case '%':
				b.WriteString("%25")
			default:
				b.WriteByte(c)
			}
		}
	}
	b.WriteByte('}')
	return b.String()
}

// HashTag returns the part of a Redis key that picks its cluster slot, by
// the server's rule: the bytes between the first '{' and the next '}', when
// that is not empty; the whole key otherwise.
func HashTag(key string) string {
	i := strings.IndexByte(key, '{')
	if i < 0 {
		return key
	}
	j := strings.IndexByte(key[i+1:], '}')
	if j <= 0 {
		return key
	}
	return key[i+1 : i+1+j]
}

// ClusterSlot returns the Redis Cluster hash slot of key: the CRC16
// (XMODEM) of its HashTag, modulo 16384.
func ClusterSlot(key string) int {
	tag := HashTag(key)
	var crc uint16
	for i := 0; i < len(tag); i++ {
		crc = crc<<8 ^ crcTable[byte(crc>>8)^tag[i]]
	}
	return int(crc) % 16384
}

// crcTable is the CRC16 XMODEM table (polynomial 0x1021).
var crcTable = func() (t [256]uint16) {
	for i := range t {
		c := uint16(i) << 8
		for range 8 {
			if c&0x8000 != 0 {
				c = c<<1 ^ 0x1021
			} else {
				c <<= 1
			}
		}
		t[i] = c
	}
	return t
}()

// CheckPrefix reports whether prefix may start the stores' keys: 1 to 64
// bytes without braces (which would move the hash tag).
func CheckPrefix(name, prefix string) error {
	switch {
	case prefix == "" || len(prefix) > 64:
		return fmt.Errorf("%w: %s: key prefix %q must be 1 to 64 bytes", algorithms.ErrInvalidParams, name, prefix)
	case strings.ContainsAny(prefix, "{}"):
		return fmt.Errorf("%w: %s: key prefix %q must not contain braces", algorithms.ErrInvalidParams, name, prefix)
	}
	return nil
}

// TTLMillis converts a TTL in microseconds into the milliseconds of PX or
// PEXPIRE: rounded up, and at least 1.
func TTLMillis(us int64) int64 {
	if us <= 1000 {
		return 1
	}
	return (us + 999) / 1000
}

// Error wrapping.

// wrap prefixes a backend error with the store's name and what it was
// doing, keeping the backend error reachable, adding ctx's error when ctx
// has ended, and ErrCorruptState when a script found state it cannot read.
func wrap(ctx context.Context, name, what string, err error) error {
	msg := err.Error()
	if strings.HasPrefix(msg, forms.LuaErrCorrupt) || strings.HasPrefix(msg, "WRONGTYPE") {
		return fmt.Errorf("%s: %s: %w: %w", name, what, algorithms.ErrCorruptState, err)
	}
	if cerr := ctx.Err(); cerr != nil && !errors.Is(err, cerr) {
		return fmt.Errorf("%s: %s: %w (%w)", name, what, err, cerr)
	}
	return fmt.Errorf("%s: %s: %w", name, what, err)
}

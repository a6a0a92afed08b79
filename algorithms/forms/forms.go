package forms

//go:generate go run ../internal/formgen -dir ..

import (
	"embed"
	"io/fs"

	"github.com/ratelimitkit/ratelimit/algorithms"
	"github.com/ratelimitkit/ratelimit/algorithms/internal/builtin"
)

//go:embed lua sql
var forms embed.FS

// Lua returns the Lua form of the built-in algorithm with the given name,
// and false when there is none.
func Lua(name string) (string, bool) { return form("lua/" + name + ".lua") }

// ManyLua returns the coalesced Lua form of the built-in algorithm with
// the given name (lua/many/<name>.lua), which decides several requests on
// one key in one run, and false when there is none; ManyLua("all") is the
// composite form's (see CompositeLua).
//
// The coalesced Lua forms (lua/many/<name>.lua, read with ManyLua), one
// per generated form, decide the requests of several keys, with one
// algorithm, in one EVALSHA: each key's in order, each exactly as the
// single form decides it run right after the one before on that key (on
// the server's clock, all at the one TIME the script reads):
//
//	KEYS       the keys, each holding the single form's state
//	ARGV[1]    server clock, as ARGV[4] of a Lua form (see LuaReplyAllowed)
//	then for each key k, ARGV[3k-1 .. 3k+1]:
//	  slack    as ARGV[5] there
//	  params   the algorithm's ServerArgs, packed as ARGV[6] there
//	  requests its requests, in order, packed into one string of three
//	           little-endian doubles each: now, cost, and peek (1 or 0)
//
// The reply has one item per key, in order: LuaReplyLen integers per
// request, in order (the fields a Lua form packs into its reply), or, when the key's state cannot be read, the
// single form's CORRUPT error reply (or the server's WRONGTYPE), which
// clients read as an error in the array and which fails that key's requests as it would fail each of them run one by
// one, and no other key's. Each key is written once, as the last request
// that stored anything left it, with that request's expiry.
func ManyLua(name string) (string, bool) { return form("lua/many/" + name + ".lua") }

// SQL returns the SQL form of the built-in algorithm with the given name,
// and false when there is none.
func SQL(name string) (string, bool) { return form("sql/" + name + ".sql") }

func form(path string) (string, bool) {
	b, err := fs.ReadFile(forms, path)
	if err != nil {
		return "", false
	}
	return string(b), true
}

// CompositeLua returns the composite Lua form (lua/all.lua): the script
// that decides a composite (All) of built-in algorithms (see
// Builtin.Composable) with one EVALSHA, on one key:
//
//	KEYS[1]  the key that holds every part's state
//	ARGV[1..5]  now, cost, peek, server clock and slack, as a Lua form takes them (see LuaReplyAllowed)
//	ARGV[6]  the parts: their algorithm names, in order, separated by
//	         spaces, a newline, then each part's ID and ServerArgs, in
//	         order, packed into one string (PackLuaArgs of their
//	         concatenation; CompositeForm returns both)
//
// The reply is an array of LuaReplyLen integers per part, in order (the fields a Lua form packs into its reply): each
// part's own decision, which Combine turns into the composite's. The state
// is a string of little-endian doubles: the latest of the parts' expiries,
// then -1 and, for each part that has state, its ID, its expiry, its
// state's length in bytes and its fields, so that read as int64 fields
// after the first it is the composite's Go form state (see Composite). The key's PX is the
// latest expiry's. The script holds each generated form's decide as a
// function of (now, cost, peek, live, state, args) returning the decision,
// the TTL and the next state, and calls every part's as a peek, then, when
// all admit and the request is not a peek, for real, writing the key only
// when every part admits again. Its coalesced form, lua/many/all.lua (read
// with ManyLua("all")), decides several keys' composite requests as the
// coalesced forms do (see ManyLua), with each key's parts (ARGV[6] above)
// as its params, and LuaReplyLen integers per part per request in its reply.
func CompositeLua() string { s, _ := form("lua/all.lua"); return s }

// CompositeSQL returns the composite SQL form (sql/all.sql), which defines
// ratelimit_all_<version> (CompositeSQLFunction).
//
// The composite SQL form (sql/all.sql, read with CompositeSQL) decides a
// composite (All) of algorithms whose SQL forms are generated:
//
//	ratelimit_all_<version>(
//	    state  bigint[],  -- the key's live state, or NULL
//	    now_us bigint, cost bigint, peek boolean,
//	    args   bigint[],  -- each part's ID and ServerArgs, in order
//	    parts  text[])    -- the parts' algorithm names, in order
//	RETURNS ratelimit_all_step
//
//	CREATE TYPE ratelimit_all_step AS (
//	    next_state bigint[], ttl bigint, decisions bigint[])
//
// state is the composite's Go form state (see Composite) as int64 fields:
// -1, then for each part with state its ID, its expiry, its length in
// bytes and its fields. decisions
// holds six elements per part, [allowed (1 or 0), limit, remaining,
// retry_after, reset_after, delay], which Combine turns into the
// composite's decision. It calls each part's form through
// ratelimit_all_part_<version>, a dispatch on the name, as a peek and then, when all
// admit and the request is not a peek, for real; next_state is NULL unless
// every part admits.
func CompositeSQL() string { s, _ := form("sql/all.sql"); return s }

// ServerForm is implemented by the built-in algorithms, which have
// server-side forms (a script for Redis and Valkey, a function for
// PostgreSQL, under lua/ and sql/ in this package, generated from the Go
// form in package algorithms): it gives the numbers a store passes to
// them. A store finds an algorithm's forms by BuiltinOf, by Go type, so a
// user's algorithm that has a ServerArgs method is still run through
// Update.
type ServerForm interface {
	algorithms.Algorithm
	// ServerArgs are the integer parameters passed to the server-side form,
	// in the order the form documents. The returned slice must not be
	// modified.
	ServerArgs() []int64
}

// InPlaceDecider is implemented by algorithms whose state is large enough
// that copying it before every decision would cost more than the decision:
// the built-in sliding log. A store that holds state in its own memory (the
// memory store) calls DecideInPlace on its stored state instead of Decide on
// a copy.
//
// DecideInPlace is Decide with two promises: it writes into state's memory
// only when it returns a nil error and a non-nil Next (a denied request, a
// peek or an error leaves state exactly as it was), and the Next it returns
// is the caller's to keep, whether it shares state's memory (at any offset)
// or was allocated because state had no room to grow. Other stores call
// Decide, which makes the same decisions.
type InPlaceDecider interface {
	algorithms.Algorithm
	DecideInPlace(state []byte, req algorithms.Request) (algorithms.Step, error)
}

// ToDecider is implemented by the built-in algorithms: Decide with the
// Step's Next and TTL and the Decision's fields returned as separate
// results, so that a store
// deciding in process (the memory store) copies no Step and needs no memory
// of its own to receive the decision (a pointer passed through an interface
// would be moved to the heap), and the results travel in registers (a
// returned Decision would be copied through memory, twice, in moves wider
// than the writes that made it, which stall). The Decision's Parts would
// be nil.
//
// DecideTo makes InPlaceDecider's promises: it writes into state's memory
// only when it returns a nil error and a non-nil next (a denied request, a
// peek or an error leaves state exactly as it was), so that a store can
// decide on the state where it keeps it. For an algorithm whose state is a
// few integers, a non-nil state has room for the next one, which DecideTo
// then writes there; for one that is also an InPlaceDecider (the sliding
// log, whose state grows), next may be anywhere in state's memory or new
// memory, the caller's to keep either way.
type ToDecider interface {
	algorithms.Algorithm
	DecideTo(state []byte, req algorithms.Request) (next []byte, ttl int64, allowed bool, limit, remaining, retryAfter, resetAfter, delay int64, err error)
}

// CompositeForm returns the names of parts' algorithms and, for each part
// in order, its ID (PartIDs, the key of its state in the
// composite's) followed by its ServerArgs, as the composite server forms
// take them (see CompositeLua and CompositeSQL), and false when a part
// has no composite server form: it is not a built-in, or its built-in is
// not Composable.
func CompositeForm(c algorithms.Composite) (names []string, args []int64, ok bool) {
	ids := PartIDs(c)
	if len(ids) != len(c.Parts()) {
		return nil, nil, false // an invalid composite
	}
	for i, p := range c.Parts() {
		b := BuiltinOf(p)
		sf, isSF := p.(ServerForm)
		if b == nil || !isSF || !b.Composable() {
			return nil, nil, false
		}
		names = append(names, b.Name)
		args = append(args, ids[i])
		args = append(args, sf.ServerArgs()...)
	}
	return names, args, true
}

// PartIDs returns, for each part of c in order, the ID under which c
// keeps the part's state: the part's name (algorithms.Named, or the
// default that Composite.PartNames reports) hashed (FNV-64a, its top 48
// bits), times 16, plus a number that says which built-in algorithm the
// part is (1 fixed window, 2 sliding log, 3 sliding window, 4 token
// bucket, 5 GCRA, 6 leaky bucket; 0 for a user's algorithm). IDs are below
// 2^52, exact in every form's arithmetic; the composite server forms take
// them with the parts' parameters (CompositeForm). It returns nil for a
// composite whose Validate fails.
func PartIDs(c algorithms.Composite) []int64 { return builtin.PartIDs(c) }

// PartKind returns the built-in algorithm a part ID (PartIDs) says its
// part is: the algorithm's Name, or "" for a user's algorithm or a number
// that names none.
func PartKind(id int64) string { return builtin.PartKind(id) }

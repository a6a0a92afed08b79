package forms

import (
	"encoding/binary"
	"math"
)

// The Lua forms (lua/*.lua, read with Lua) share one calling convention, so
// that a store runs any of them the same way, with one EVALSHA (or EVAL) per
// decision:
//
//	KEYS[1]  the key that holds the decision's state; a script touches no
//	         other key, so a decision stays in one Redis Cluster hash slot
//	ARGV[1]  now: the limiter's time, microseconds since the Unix epoch
//	ARGV[2]  cost: at least 1 and at most the algorithm's MaxCost
//	ARGV[3]  peek: "1" to decide without writing, "0" otherwise
//	ARGV[4]  server clock: "1" to read the server's TIME instead of ARGV[1]
//	ARGV[5]  slack: milliseconds added to every PX and PEXPIRE, so that a
//	         key outlives its state when ARGV[1] comes from a clock that may
//	         run behind the server's; "1" with the server clock, since the
//	         server counts expiries from its clock in whole milliseconds
//	ARGV[6]  the algorithm's ServerArgs, in order, packed into one string
//	         of little-endian doubles (Lua's struct.pack "<dd..."; every
//	         value is an integer below MaxExact), so that the server parses
//	         one argument instead of five; see PackLuaArgs
//
// The reply is an array of LuaReplyLen integers, indexed by the LuaReply
// constants: the fields of Decision in declaration order, with allowed as 1
// or 0.
//
// Every script but the sliding log's is generated from the Go form by
// internal/formgen. A script computes exactly what the algorithm's Decide
// computes: the same fields, the same integer arithmetic (floor and ceiling
// divisions are exact, with a correction step after the division in
// doubles, since every value stays below MaxExact), and the same double
// operations in the same order where the Go form uses floats (the sliding
// window's weighted estimate and its retry search, the rate algorithms'
// rescale and GCRA's fraction rescale).
//
// State is kept in a form native to the server. Each fixed-size state is a
// string of little-endian doubles (Lua's struct.pack "<ddd" or "<dddd"; every
// value is an integer below MaxExact, which a double holds exactly): when the
// state's TTL passes, then the Go form's fields in order. Packing and
// unpacking them costs the server far less than formatting and parsing
// decimals. A value of the wrong length, or a field that is negative, above
// MaxExact or NaN, is corrupt. The sliding log is a sorted set scored by time
// whose members "seq:cost" stay unique even for two requests in the same
// microsecond, plus two members scored -inf: "x:<expires>" and
// "y:<total>:<seq>:<newest>", which let a decision read only the entries
// that leave the window (see lua/sliding_log.lua).
//
// Every write sets the key's expiry in the same script (PX or PEXPIRE, in
// milliseconds: the TTL in microseconds rounded up, at least 1, plus the
// slack). The state records when its TTL passes on the clock that decided,
// and a script treats state past that time as missing, as Decide treats nil
// state, whether or not the server has expired the key yet: correctness
// never depends on the key's expiry. A peek writes nothing, and neither does
// a denied request. State a script cannot read is answered with an error
// reply whose message starts with "CORRUPT".
const (
	LuaReplyAllowed    = iota // 1 when admitted, 0 when denied
	LuaReplyLimit             // Decision.Limit
	LuaReplyRemaining         // Decision.Remaining
	LuaReplyRetryAfter        // Decision.RetryAfter, µs
	LuaReplyResetAfter        // Decision.ResetAfter, µs
	LuaReplyDelay             // Decision.Delay, µs
	LuaReplyLen               // the number of fields in a reply
)

// LuaFixedArgs is the number of ARGV entries before an algorithm's packed
// ServerArgs in a Lua form's calling convention: now, cost, peek, server
// clock and slack.
const LuaFixedArgs = 5

// PackLuaArgs packs an algorithm's ServerArgs into the string a Lua form
// takes as ARGV[6]: each value as a little-endian IEEE 754 double.
func PackLuaArgs(args []int64) string {
	b := make([]byte, 8*len(args))
	for i, v := range args {
		binary.LittleEndian.PutUint64(b[8*i:], math.Float64bits(float64(v)))
	}
	return string(b)
}

// The composite Lua form (lua/all.lua, read with CompositeLua) decides a
// composite (All) of algorithms whose Lua forms are generated (see
// Builtin.Composable) with one EVALSHA, on one key:
//
//	KEYS[1]  the key that holds every part's state
//	ARGV[1..5]  now, cost, peek, server clock and slack, as above
//	ARGV[6]  every part's ServerArgs, in order, packed into one string
//	         (PackLuaArgs of their concatenation; CompositeForm returns it)
//	ARGV[7…] the parts' algorithm names, in order
//
// The reply is LuaReplyLen integers per part, in order, as above: each
// part's own decision, which Combine turns into the composite's. The state
// is a string of little-endian doubles: the latest of the parts' expiries,
// then for each part its expiry, its state's length in bytes (0 when it
// has none) and its fields, so that read as int64 fields after the first
// it is the composite's Go form state (see Composite). The key's PX is the
// latest expiry's. The script holds each generated form's decide as a
// function of (now, cost, peek, live, state, args) returning the decision,
// the TTL and the next state, and calls every part's as a peek, then, when
// all admit and the request is not a peek, for real, writing the key only
// when every part admits again.

// The coalesced Lua forms (lua/many/<name>.lua, read with ManyLua), one
// per generated form, decide the requests of several keys, with one
// algorithm, in one EVALSHA: each key's in order, each exactly as the
// single form decides it run right after the one before on that key (on
// the server's clock, all at the one TIME the script reads):
//
//	KEYS       the keys, each holding the single form's state
//	ARGV[1]    server clock, as ARGV[4] above
//	then for each key k, ARGV[3k-1 .. 3k+1]:
//	  slack    as ARGV[5] above
//	  params   the algorithm's ServerArgs, packed as ARGV[6] above
//	  requests its requests, in order, packed into one string of three
//	           little-endian doubles each: now, cost, and peek (1 or 0)
//
// The reply has one item per key, in order: LuaReplyLen integers per
// request, in order, as above, or, when the key's state cannot be read, the
// single form's CORRUPT error reply (or the server's WRONGTYPE), which
// clients read as an error in the array and which fails that key's requests as it would fail each of them run one by
// one, and no other key's. Each key is written once, as the last request
// that stored anything left it, with that request's expiry.

// LuaErrCorrupt starts the message of the error a Lua form replies with when
// the stored state cannot be read.
const LuaErrCorrupt = "CORRUPT"

package forms

import (
	"encoding/binary"
	"fmt"
	"math"

	"github.com/ratelimitkit/ratelimit/algorithms"
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
//	ARGV[7]  max_delay (optional, 0 when absent): Request.MaxDelay, µs
//	ARGV[8]  refund (optional): "1" for Request.Refund, "0" otherwise
//	ARGV[9]  act (optional, 0 when absent): Request.Act, µs
//
// A store sends ARGV[7] to ARGV[9] only for a reservation or a refund, so
// that an ordinary decision's call stays as short as it was.
//
// The reply is one string of LuaReplyLen little-endian IEEE 754 doubles
// (Lua's struct.pack "<dddddd"), indexed by the LuaReply constants: the
// fields of Decision in declaration order, with allowed as 1 or 0, each an
// integer of magnitude below MaxExact. One bulk string costs the server
// less to reply with than an array of integers, and the client less to
// read; UnpackLuaReply reads it. (The coalesced and composite forms, whose
// replies hold several decisions and error items, reply with arrays of
// integers; see ManyLua.)
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
// a denied request nor a refund that gives nothing back. State a script cannot read is answered with an error
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

// UnpackLuaReply reads a Lua form's reply, as the client hands over a bulk
// string, into dst, which must have LuaReplyLen fields: each double as the
// integer it holds. A reply of another length, or a field that is not an
// integer of magnitude at most MaxExact, is an error and leaves dst as it
// was.
func UnpackLuaReply(reply string, dst []int64) error {
	if len(reply) != 8*LuaReplyLen || len(dst) != LuaReplyLen {
		return fmt.Errorf("ratelimit: Lua reply of %d bytes into %d fields, want %d bytes into %d", len(reply), len(dst), 8*LuaReplyLen, LuaReplyLen)
	}
	var f [LuaReplyLen]int64
	for i := range f {
		v := math.Float64frombits(binary.LittleEndian.Uint64([]byte(reply[8*i : 8*i+8])))
		if !(v >= -algorithms.MaxExact && v <= algorithms.MaxExact) || v != math.Trunc(v) {
			return fmt.Errorf("ratelimit: Lua reply field %d is %v, want an integer of magnitude at most 2^53", i, v)
		}
		f[i] = int64(v)
	}
	copy(dst, f[:])
	return nil
}

// LuaErrCorrupt starts the message of the error a Lua form replies with when
// the stored state cannot be read.
const LuaErrCorrupt = "CORRUPT"

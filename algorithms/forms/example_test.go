package forms_test

import (
	"encoding/binary"
	"fmt"
	"math"

	"github.com/ratelimitkit/ratelimit/algorithms/forms"
)

// A store that runs a Lua form itself reads its reply, the bulk string the
// script packs, with UnpackLuaReply. Here the reply is built by hand as
// struct.pack('<dddddd', 1, 100, 99, 0, 600000, 0) builds it: admitted,
// limit 100, 99 remaining, reset after 0.6 s.
func ExampleUnpackLuaReply() {
	var reply []byte
	for _, v := range []float64{1, 100, 99, 0, 600_000, 0} {
		reply = binary.LittleEndian.AppendUint64(reply, math.Float64bits(v))
	}
	var f [forms.LuaReplyLen]int64
	if err := forms.UnpackLuaReply(string(reply), f[:]); err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println("allowed:", f[forms.LuaReplyAllowed] == 1, "remaining:", f[forms.LuaReplyRemaining], "reset after µs:", f[forms.LuaReplyResetAfter])
	// Output: allowed: true remaining: 99 reset after µs: 600000
}

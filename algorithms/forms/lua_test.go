package forms_test

import (
	"encoding/binary"
	"math"
	"slices"
	"testing"

	"github.com/ratelimitkit/ratelimit/algorithms"
	"github.com/ratelimitkit/ratelimit/algorithms/forms"
)

// packed is a Lua form's reply as struct.pack('<dddddd', ...) writes it.
func packed(v ...float64) string {
	var b []byte
	for _, x := range v {
		b = binary.LittleEndian.AppendUint64(b, math.Float64bits(x))
	}
	return string(b)
}

// TestUnpackLuaReply reads a packed reply field by field and refuses one of
// the wrong length or with a field that is not an exact integer, leaving
// the destination as it was.
func TestUnpackLuaReply(t *testing.T) {
	f := make([]int64, forms.LuaReplyLen)
	if err := forms.UnpackLuaReply(packed(1, 100, 99, 0, 10_000, -algorithms.MaxExact), f); err != nil {
		t.Fatal(err)
	}
	if want := []int64{1, 100, 99, 0, 10_000, -algorithms.MaxExact}; !slices.Equal(f, want) {
		t.Fatalf("got %v, want %v", f, want)
	}
	before := slices.Clone(f)
	for _, bad := range []struct {
		name  string
		reply string
		dst   []int64
	}{
		{"short", packed(1, 2, 3, 4, 5), f},
		{"long", packed(1, 2, 3, 4, 5, 6, 7), f},
		{"empty", "", f},
		{"a fraction", packed(1, 2, 3.5, 4, 5, 6), f},
		{"NaN", packed(1, 2, 3, math.NaN(), 5, 6), f},
		{"infinite", packed(1, 2, 3, 4, math.Inf(1), 6), f},
		{"beyond 2^53", packed(1, 2, 3, 4, 5, 2*algorithms.MaxExact), f},
		{"a short destination", packed(1, 2, 3, 4, 5, 6), f[:3]},
	} {
		if err := forms.UnpackLuaReply(bad.reply, bad.dst); err == nil {
			t.Errorf("%s: no error", bad.name)
		}
		if !slices.Equal(f, before) {
			t.Fatalf("%s: destination changed to %v", bad.name, f)
		}
	}
}

package redisengine

import (
	"encoding/binary"
	"math"
	"testing"

	"github.com/ratelimitkit/ratelimit/store"
)

// FuzzParseStateKey checks that parseStateKey inverts StateKey, with and
// without the Update suffix, for any id.
func FuzzParseStateKey(f *testing.F) {
	for _, id := range []string{"u", "{}", "%7B", "a:b:c", "\x00\xff", "%%{"} {
		f.Add(id)
	}
	f.Fuzz(func(t *testing.T, id string) {
		if id == "" {
			return
		}
		k := store.Key{Namespace: "api.v1:gcra", ID: id}
		for _, suffix := range []string{"", UpdateSuffix} {
			got, update, ok := parseStateKey("rl", StateKey("rl", k)+suffix)
			if !ok || got != k || update != (suffix != "") {
				t.Fatalf("parseStateKey(StateKey(%q)%s) = %q, %v, %v; want the key back", k.String(), suffix, got.String(), update, ok)
			}
		}
	})
}

// TestLuaState checks that luaState writes what state reads back: the
// expiry, then each field as a double; and rejects what no algorithm
// stores.
func TestLuaState(t *testing.T) {
	st := binary.LittleEndian.AppendUint64(nil, 7)
	st = binary.LittleEndian.AppendUint64(st, 1<<53)
	packed, err := luaState(st, 99)
	if err != nil {
		t.Fatal(err)
	}
	for i, want := range []float64{99, 7, 1 << 53} {
		if got := math.Float64frombits(binary.LittleEndian.Uint64([]byte(packed[8*i:]))); got != want {
			t.Errorf("luaState double %d = %v, want %v", i, got, want)
		}
	}
	if _, err := luaState([]byte{1, 2, 3}, 1); err == nil {
		t.Error("luaState of 3 bytes: no error")
	}
	if _, err := luaState(binary.LittleEndian.AppendUint64(nil, 1<<53+1), 1); err == nil {
		t.Error("luaState of a field above MaxExact: no error")
	}
	if _, err := logMembers(make([]byte, 16)); err == nil {
		t.Error("logMembers of an entry of cost 0: no error")
	}
}

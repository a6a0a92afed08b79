package redisengine

import (
	"strings"
	"testing"

	"github.com/ratelimitkit/ratelimit/store"
)

// unescape inverts the escape of StateKey's id.
func unescape(s string) string { return unescapeID(s) }

func checkKey(t *testing.T, prefix string, k store.Key) {
	t.Helper()
	name := StateKey(prefix, k)
	tag := HashTag(name)
	if tag == name {
		t.Fatalf("StateKey(%q, %q) = %q has no hash tag", prefix, k, name)
	}
	if got := HashTag(name + UpdateSuffix); got != tag {
		t.Fatalf("hash tag of the update key %q = %q, want the state key's %q (rule: one decision, one slot)", name+UpdateSuffix, got, tag)
	}
	if !strings.HasSuffix(name, "}") || strings.Count(name, "{") != 1 || strings.Count(name, "}") != 1 {
		t.Fatalf("StateKey(%q, %q) = %q: want exactly one pair of braces, at the end", prefix, k, name)
	}
	want := prefix + ":{" + k.Namespace + ":"
	if !strings.HasPrefix(name, want) {
		t.Fatalf("StateKey(%q, %q) = %q, want prefix %q", prefix, k, name, want)
	}
	if id := unescape(name[len(want) : len(name)-1]); id != k.ID {
		t.Fatalf("StateKey(%q, %q) = %q does not decode back to the id (got %q)", prefix, k, name, id)
	}
}

func TestStateKey(t *testing.T) {
	for _, id := range []string{"u", "{user}", "a}b{c", "}{", "{}", "%7B", "%", "with space", "\x00\xff", "ünï-🔑", strings.Repeat("}", 512)} {
		checkKey(t, "rl", store.Key{Namespace: "api:gcra", ID: id})
	}
	if a, b := StateKey("rl", store.Key{Namespace: "n:a", ID: "{"}), StateKey("rl", store.Key{Namespace: "n:a", ID: "%7B"}); a == b {
		t.Errorf("ids %q and %q share the key %q", "{", "%7B", a)
	}
}

func FuzzStateKey(f *testing.F) {
	f.Add("rl", "api:gcra", "{user}")
	f.Add("p", "n:x", "%7D}")
	f.Fuzz(func(t *testing.T, prefix, ns, id string) {
		if CheckPrefix("test", prefix) != nil || strings.ContainsAny(ns, "{}") || ns == "" || id == "" {
			return
		}
		checkKey(t, prefix, store.Key{Namespace: ns, ID: id})
	})
}

func TestTTLMillis(t *testing.T) {
	for _, c := range []struct{ us, ms int64 }{{-5, 1}, {0, 1}, {1, 1}, {999, 1}, {1000, 1}, {1001, 2}, {1999, 2}, {2000, 2}, {1e9 + 1, 1e6 + 1}} {
		if got := TTLMillis(c.us); got != c.ms {
			t.Errorf("TTLMillis(%d) = %d, want %d", c.us, got, c.ms)
		}
	}
}

func TestCheckPrefix(t *testing.T) {
	for _, p := range []string{"", "a{b", "}", strings.Repeat("p", 65)} {
		if CheckPrefix("redis", p) == nil {
			t.Errorf("CheckPrefix(%q) = nil, want an error", p)
		}
	}
	if err := CheckPrefix("redis", "rl:prod"); err != nil {
		t.Errorf("CheckPrefix(rl:prod) = %v", err)
	}
}

// TestClusterSlot holds ClusterSlot to the values CLUSTER KEYSLOT gives.
func TestClusterSlot(t *testing.T) {
	for key, want := range map[string]int{
		"123456789":         12739, // CRC16 XMODEM's check value, 0x31C3
		"foo":               12182,
		"rl:{foo}":          12182,
		"a{foo}b{bar}":      12182,
		"{}foo":             ClusterSlot("{}foo"), // no tag: the whole key
		"rl:{ns:id}":        ClusterSlot("ns:id"),
		"rl:{ns:id}" + ":u": ClusterSlot("ns:id"),
	} {
		if got := ClusterSlot(key); got != want {
			t.Errorf("ClusterSlot(%q) = %d, want %d", key, got, want)
		}
	}
}

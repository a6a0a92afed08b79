package redisengine

import (
	"context"
	"encoding/binary"
	"fmt"
	"math"
	"strings"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/ratelimitkit/ratelimit/algorithms"
	"github.com/ratelimitkit/ratelimit/algorithms/forms"
	"github.com/ratelimitkit/ratelimit/internal/testserver"
)

// TestNodeFormWriteFails checks the node form when a write fails part way
// through a run (as the write of a key whose read deleted it, expired, in a
// migrating slot does): the keys decided before it keep their decisions and
// their state, and the key whose write failed and every key after it get
// NotLocal, with nothing written for them. A slack that makes the write's
// PX negative is what fails the write here, on the standalone server.
func TestNodeFormWriteFails(t *testing.T) {
	c := goredis.NewClient(&goredis.Options{Addr: testserver.RedisAddr(t)})
	t.Cleanup(func() { c.Close() })
	ctx := context.Background()
	alg := algorithms.GCRA(10, time.Second, 10)
	s, sf := Form(alg)
	if s.Many == nil || s.Many.Node == nil {
		t.Fatal("gcra has no node form")
	}
	packed := forms.PackLuaArgs(sf.ServerArgs())
	prefix := fmt.Sprintf("rltest-node-%d", time.Now().UnixNano())
	keys := []string{prefix + ":a", prefix + ":b", prefix + ":c"}
	var reqs []byte
	now := time.Now().UnixMicro()
	for range keys {
		for _, f := range []float64{float64(now), 1, 0} {
			reqs = binary.LittleEndian.AppendUint64(reqs, math.Float64bits(f))
		}
	}
	args := []any{"0", string(reqs)}
	for i := range keys {
		slack := "1000"
		if i == 1 {
			slack = "-100000000" // b's write fails
		}
		args = append(args, slack, packed, int64(1))
	}
	for _, k := range keys {
		args = append(args, k)
	}
	r, err := c.Eval(ctx, s.Many.Node.Src, nil, args...).Result()
	if err != nil {
		t.Fatalf("node form: %v", err)
	}
	items, ok := r.([]any)
	if !ok || len(items) != forms.LuaReplyLen+2 {
		t.Fatalf("node form replied %v, want a's %d fields and two error items", r, forms.LuaReplyLen)
	}
	if allowed, _ := items[forms.LuaReplyAllowed].(int64); allowed != 1 {
		t.Errorf("a: allowed %v, want 1 (reply %v)", items[forms.LuaReplyAllowed], r)
	}
	for i, k := range keys[1:] {
		err, _ := items[forms.LuaReplyLen+i].(error)
		if err == nil || !strings.HasPrefix(err.Error(), NotLocal) {
			t.Errorf("%s: item %v, want a %s error", k, items[forms.LuaReplyLen+i], NotLocal)
		}
	}
	n, err := c.Exists(ctx, keys...).Result()
	if err != nil {
		t.Fatal(err)
	}
	if n != 1 || c.Exists(ctx, keys[0]).Val() != 1 {
		t.Errorf("%d of the keys exist, want a alone", n)
	}
	c.Del(ctx, keys...)
}

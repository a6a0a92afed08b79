package redis_test

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"reflect"
	"strconv"
	"strings"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/ratelimitkit/ratelimit/algorithms"
	"github.com/ratelimitkit/ratelimit/algorithms/forms"
	"github.com/ratelimitkit/ratelimit/internal/walk"
)

// luaDecide runs alg's Lua form on key directly, with the request's time.
func luaDecide(ctx context.Context, c goredis.UniversalClient, alg algorithms.Algorithm, key string, req algorithms.Request) (algorithms.Decision, error) {
	src, _ := forms.Lua(alg.Name())
	peek := "0"
	if req.Peek {
		peek = "1"
	}
	reply, err := c.Eval(ctx, src, []string{key}, req.Now, req.Cost, peek, "0", "600000",
		forms.PackLuaArgs(alg.(forms.ServerForm).ServerArgs())).Text()
	if err != nil {
		return algorithms.Decision{}, err
	}
	var v [forms.LuaReplyLen]int64
	if err := forms.UnpackLuaReply(reply, v[:]); err != nil {
		return algorithms.Decision{}, err
	}
	return algorithms.Decision{
		Allowed: v[forms.LuaReplyAllowed] == 1, Limit: v[forms.LuaReplyLimit],
		Remaining: v[forms.LuaReplyRemaining], RetryAfter: v[forms.LuaReplyRetryAfter],
		ResetAfter: v[forms.LuaReplyResetAfter], Delay: v[forms.LuaReplyDelay],
	}, nil
}

// TestSlidingLogLuaEqualsGo holds the sliding log's Lua form to its Go form
// directly, on random sequences the conformance suite's differential test
// does not reach: clocks that step backwards, limits changed between
// requests, and logs longer than the entries the script reads with its
// header, so that runs of expired entries and retry times reach past them.
func TestSlidingLogLuaEqualsGo(t *testing.T) {
	c := standalone(t)
	ctx := context.Background()
	const ms = time.Millisecond
	fam := []algorithms.Algorithm{algorithms.SlidingLog(40, 300*ms), algorithms.SlidingLog(25, time.Second), algorithms.SlidingLog(3, 100*ms)}
	steps := []int64{0, 0, 1, 7, 1000, 13000, 33333, 99999, 142857, 299999, 300000, 1000000, -1, -5000, -150000}
	for seed := uint64(1); seed <= 6; seed++ {
		rng := rand.New(rand.NewPCG(seed, 0x10a))
		key := uniquePrefix() + ":log"
		w := walk.New(rng, fam, steps, 6, 5)
		var state []byte
		var expires int64
		for i := 0; i < 1500; i++ {
			alg, req := w.Next()
			now := req.Now
			// State past its TTL decides as none, but stays stored until
			// a write replaces it: a clock stepping back finds it again.
			cur := state
			if now >= expires {
				cur = nil
			}
			want, err := alg.Decide(bytes.Clone(cur), req)
			if err != nil {
				t.Fatalf("seed %d step %d: Go form: %v", seed, i, err)
			}
			got, err := luaDecide(ctx, c, alg, key, req)
			if err != nil {
				t.Fatalf("seed %d step %d: %v, %+v: Lua form: %v", seed, i, alg, req, err)
			}
			if !reflect.DeepEqual(got, want.Decision) {
				t.Fatalf("seed %d step %d: %v, %+v: Lua %+v, Go %+v", seed, i, alg, req, got, want.Decision)
			}
			if want.Next != nil {
				state, expires = want.Next, now+want.TTL
			}
		}
	}
}

// TestSlidingLogLuaLegacy checks that a log written before the script kept
// its "y:" member (entries and "x:expires" only) is read in full and decided
// as the Go form decides the same log, and that the script then writes the
// member.
func TestSlidingLogLuaLegacy(t *testing.T) {
	c := standalone(t)
	ctx := context.Background()
	const now = 1_900_000_000_000_000
	alg := algorithms.SlidingLog(5, time.Second)
	legacy := []int64{now - 500_000, 2, now - 100, 1} // (time, cost) pairs
	for _, req := range []algorithms.Request{
		{Now: now, Cost: 1}, {Now: now, Cost: 3}, {Now: now, Cost: 1, Peek: true}, {Now: now - 300, Cost: 2},
	} {
		key := uniquePrefix() + ":legacy"
		members := []goredis.Z{{Score: negInf(), Member: "x:" + strconv.FormatInt(now+999_900, 10)}}
		for i := 0; i < len(legacy); i += 2 {
			members = append(members, goredis.Z{Score: float64(legacy[i]), Member: fmt.Sprintf("%d:%d", i/2+1, legacy[i+1])})
		}
		if err := c.ZAdd(ctx, key, members...).Err(); err != nil {
			t.Fatal(err)
		}
		c.Expire(ctx, key, time.Minute)
		want, err := alg.Decide(int64s(legacy), req)
		if err != nil {
			t.Fatal(err)
		}
		got, err := luaDecide(ctx, c, alg, key, req)
		if err != nil {
			t.Fatalf("%+v on a legacy log: %v", req, err)
		}
		if !reflect.DeepEqual(got, want.Decision) {
			t.Errorf("%+v on a legacy log: Lua %+v, Go %+v", req, got, want.Decision)
		}
		all, err := c.ZRange(ctx, key, 0, -1).Result()
		if err != nil {
			t.Fatal(err)
		}
		hasY := strings.Contains(strings.Join(all, " "), "y:")
		if hasY != (want.Next != nil) {
			t.Errorf("%+v on a legacy log: members %v after the decision, want a y: member only when admitted", req, all)
		}
	}
}

// TestSlidingLogLuaCorrupt checks that sorted sets the script cannot have
// written are CORRUPT errors.
func TestSlidingLogLuaCorrupt(t *testing.T) {
	c := standalone(t)
	ctx := context.Background()
	const now = 1_900_000_000_000_000
	alg := algorithms.SlidingLog(5, time.Second)
	x := goredis.Z{Score: negInf(), Member: "x:" + strconv.FormatInt(now+500_000, 10)}
	for _, members := range [][]goredis.Z{
		{{Score: float64(now), Member: "1:1"}},                                                                      // no expiry member
		{x, {Score: negInf(), Member: "y:garbage"}},                                                                 // an unreadable total
		{x, {Score: negInf(), Member: "y:0:1:" + strconv.FormatInt(now, 10)}},                                       // a total of 0 with a live entry
		{x, {Score: negInf(), Member: "y:9:1:" + strconv.FormatInt(now, 10)}, {Score: float64(now), Member: "1:1"}}, // a total above its entries
		{x, {Score: negInf(), Member: "y:1:1:" + strconv.FormatInt(now, 10)}, {Score: float64(now), Member: "1:0"}}, // an entry of cost 0
		{x, {Score: float64(now), Member: "seq"}},                                                                   // a legacy member without its cost
	} {
		key := uniquePrefix() + ":corrupt"
		if err := c.ZAdd(ctx, key, members...).Err(); err != nil {
			t.Fatal(err)
		}
		c.Expire(ctx, key, time.Minute)
		_, err := luaDecide(ctx, c, alg, key, algorithms.Request{Now: now, Cost: 1})
		if err == nil || !strings.HasPrefix(err.Error(), forms.LuaErrCorrupt) {
			t.Errorf("sliding_log on %v: error %v, want %s", members, err, forms.LuaErrCorrupt)
		}
		var re goredis.Error
		if err != nil && !errors.As(err, &re) {
			t.Errorf("sliding_log on %v: error %v is not a Redis error reply", members, err)
		}
	}
}

func negInf() float64 { return math.Inf(-1) }

// int64s is the Go form's encoding of fields: little-endian int64s.
func int64s(v []int64) []byte {
	var b []byte
	for _, x := range v {
		b = binary.LittleEndian.AppendUint64(b, uint64(x))
	}
	return b
}

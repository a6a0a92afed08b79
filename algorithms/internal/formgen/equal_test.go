package main

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"path/filepath"
	"reflect"
	"slices"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	goredis "github.com/redis/go-redis/v9"

	"github.com/ratelimitkit/ratelimit/algorithms"
	"github.com/ratelimitkit/ratelimit/algorithms/forms"
	"github.com/ratelimitkit/ratelimit/internal/testserver"
	"github.com/ratelimitkit/ratelimit/internal/walk"
)

// TestLuaEqualsGo runs the generated Lua forms on a real Redis server and
// holds them to the Go forms directly, the way store/postgres's
// TestSQLFormsEqualGoForms holds the SQL forms: random sequences with
// clocks that step backwards (by up to 3 s), readings out of order (one
// request in eight is read up to 3 s before the clock, which then goes on
// from where it was), parameters switched between requests (the
// float rescales), costs above one and peeks, comparing the decision, the
// state written (field by field), its TTL, and that nothing is written when
// the Go form writes nothing.
func TestLuaEqualsGo(t *testing.T) {
	c := goredis.NewClient(&goredis.Options{Addr: testserver.RedisAddr(t)})
	defer c.Close()
	ctx := context.Background()
	const ms = time.Millisecond
	families := [][]algorithms.Algorithm{
		{algorithms.FixedWindow(7, 300*ms), algorithms.FixedWindow(3, 100*ms)},
		{algorithms.SlidingWindow(7, 300*ms), algorithms.SlidingWindow(13, 700*ms), algorithms.SlidingWindow(1000, 999*ms)},
		{algorithms.TokenBucket(3, 100*ms, 7), algorithms.TokenBucket(7, time.Second, 5), algorithms.TokenBucket(1000, 3*time.Second, 11)},
		{algorithms.LeakyBucket(3, 100*ms, 7), algorithms.LeakyBucket(7, time.Second, 5), algorithms.LeakyBucket(999, 7*time.Second, 13)},
		{algorithms.GCRA(3, 100*ms, 7), algorithms.GCRA(7, time.Second, 5), algorithms.GCRA(1000, 3*time.Second, 11)},
	}
	steps := []int64{0, 0, 1, 7, 1000, 13000, 33333, 99999, 142857, 299999, 300000, 1000000, -1, -5000, -300000, -1_000_000, -3_000_000}
	key := fmt.Sprintf("formgen-equal-%d-%d", time.Now().UnixNano(), rand.Int64())
	defer c.Del(ctx, key)
	for _, fam := range families {
		t.Run(fam[0].Name(), func(t *testing.T) {
			src, ok := forms.Lua(fam[0].Name())
			if !ok {
				t.Fatal("no Lua form")
			}
			script := goredis.NewScript(src)
			for seed := uint64(1); seed <= 4; seed++ {
				rng := rand.New(rand.NewPCG(seed, 0x1a))
				w := walk.New(rng, fam, steps, 4, 3)
				var stored []byte // the state last written
				var expires int64 // when it stops being live
				c.Del(ctx, key)
				for i := 0; i < 300; i++ {
					alg, req := w.Next()
					if rng.IntN(8) == 0 {
						// A reading older than the state: a request that read
						// the clock, then waited for the key.
						req.Now -= rng.Int64N(3_000_001)
					}
					state := stored
					if req.Now >= expires {
						state = nil // what a store hands the Go form for an expired key
					}
					want, err := alg.Decide(slices.Clone(state), req)
					if err != nil {
						t.Fatalf("seed %d step %d: Go form: %v", seed, i, err)
					}
					before, _ := c.Get(ctx, key).Bytes()
					peek := "0"
					if req.Peek {
						peek = "1"
					}
					// A slack of an hour: the key must not expire in real
					// time while the simulated clock wanders.
					reply, err := script.Run(ctx, c, []string{key}, req.Now, req.Cost, peek, "0", "3600000",
						forms.PackLuaArgs(alg.(forms.ServerForm).ServerArgs())).Text()
					var r [forms.LuaReplyLen]int64
					if err == nil {
						err = forms.UnpackLuaReply(reply, r[:])
					}
					if err != nil {
						t.Fatalf("seed %d step %d: Lua form: %v", seed, i, err)
					}
					got := algorithms.Decision{Allowed: r[forms.LuaReplyAllowed] == 1, Limit: r[forms.LuaReplyLimit],
						Remaining: r[forms.LuaReplyRemaining], RetryAfter: r[forms.LuaReplyRetryAfter],
						ResetAfter: r[forms.LuaReplyResetAfter], Delay: r[forms.LuaReplyDelay]}
					where := fmt.Sprintf("seed %d step %d: %v with state %v, %+v", seed, i, alg, fields(state), req)
					if !reflect.DeepEqual(got, want.Decision) {
						t.Fatalf("%s:\nLua %+v\nGo  %+v", where, got, want.Decision)
					}
					after, err := c.Get(ctx, key).Bytes()
					if err != nil && !errors.Is(err, goredis.Nil) {
						t.Fatal(err)
					}
					if want.Next == nil {
						if !bytes.Equal(before, after) {
							t.Fatalf("%s: the Lua form wrote state, the Go form nothing", where)
						}
						continue
					}
					wantStored := append([]int64{req.Now + want.TTL}, fields(want.Next)...)
					if got := doubles(after); !slices.Equal(got, wantStored) {
						t.Fatalf("%s: Lua stored %v, want [expires+fields] %v (TTL %d)", where, got, wantStored, want.TTL)
					}
					ttl, err := c.PTTL(ctx, key).Result()
					if err != nil {
						t.Fatal(err)
					}
					if px := (want.TTL+999)/1000 + 3600000; ttl > time.Duration(px)*time.Millisecond || ttl < time.Duration(px-2000)*time.Millisecond {
						t.Fatalf("%s: key expiry %v, want about %d ms", where, ttl, px)
					}
					stored, expires = want.Next, req.Now+want.TTL
				}
			}
		})
	}
}

// TestLuaCorruptState checks that state a generated Lua form cannot read is
// an error reply starting with CORRUPT, as it is ErrCorruptState in Go.
func TestLuaCorruptState(t *testing.T) {
	c := goredis.NewClient(&goredis.Options{Addr: testserver.RedisAddr(t)})
	defer c.Close()
	ctx := context.Background()
	now := int64(1_900_000_000_000_000)
	cases := []struct {
		alg    algorithms.Algorithm
		stored []float64 // expires, then the fields
	}{
		{algorithms.FixedWindow(3, time.Second), []float64{float64(now + 1), 1}},
		{algorithms.FixedWindow(3, time.Second), []float64{float64(now + 1), -1, 0}},
		{algorithms.SlidingWindow(3, time.Second), []float64{float64(now + 1), 1, math.NaN(), 0}},
		{algorithms.TokenBucket(3, time.Second, 3), []float64{float64(now + 1), 1, 2, 0}},
		{algorithms.LeakyBucket(3, time.Second, 3), []float64{float64(now + 1), 1, 2, 1 << 60}},
		{algorithms.GCRA(3, time.Second, 3), []float64{float64(now + 1), 1, 5, 3}},
	}
	key := fmt.Sprintf("formgen-corrupt-%d", time.Now().UnixNano())
	defer c.Del(ctx, key)
	for _, tc := range cases {
		b := make([]byte, 8*len(tc.stored))
		for i, f := range tc.stored {
			binary.LittleEndian.PutUint64(b[8*i:], math.Float64bits(f))
		}
		if err := c.Set(ctx, key, b, time.Minute).Err(); err != nil {
			t.Fatal(err)
		}
		src, _ := forms.Lua(tc.alg.Name())
		err := goredis.NewScript(src).Run(ctx, c, []string{key}, now, 1, "0", "0", "0",
			forms.PackLuaArgs(tc.alg.(forms.ServerForm).ServerArgs())).Err()
		if err == nil || len(err.Error()) < len(forms.LuaErrCorrupt) || err.Error()[:len(forms.LuaErrCorrupt)] != forms.LuaErrCorrupt {
			t.Errorf("%v on stored %v: error %v, want one starting with %s", tc.alg, tc.stored, err, forms.LuaErrCorrupt)
		}
	}
}

// fields decodes the Go form's state: little-endian int64s.
func fields(b []byte) []int64 {
	v := make([]int64, len(b)/8)
	for i := range v {
		v[i] = int64(binary.LittleEndian.Uint64(b[8*i:]))
	}
	return v
}

// doubles decodes a Lua form's stored state: little-endian doubles, each an
// integer.
func doubles(b []byte) []int64 {
	v := make([]int64, len(b)/8)
	for i := range v {
		v[i] = int64(math.Float64frombits(binary.LittleEndian.Uint64(b[8*i:])))
	}
	return v
}

// TestGoldenLoads loads the translator's golden output for testdata/toy
// into real servers: the Lua with SCRIPT LOAD (which compiles it) and the
// SQL inside a transaction that is rolled back, so that output the servers
// cannot parse fails here and not only in a store.
func TestGoldenLoads(t *testing.T) {
	ctx := context.Background()
	files, err := Generate(filepath.Join("testdata", "toy"), "")
	if err != nil {
		t.Fatal(err)
	}
	c := goredis.NewClient(&goredis.Options{Addr: testserver.RedisAddr(t)})
	defer c.Close()
	if err := c.ScriptLoad(ctx, string(files["lua/counter.lua"])).Err(); err != nil {
		t.Errorf("SCRIPT LOAD lua/counter.lua: %v", err)
	}
	conn, err := pgx.Connect(ctx, testserver.PostgresURL(t))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	tx, err := conn.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(ctx)
	if _, err := tx.Exec(ctx, "CREATE SCHEMA formgen_golden; SET LOCAL search_path = formgen_golden"); err != nil {
		t.Fatal(err)
	}
	if _, err := tx.Exec(ctx, string(files["sql/counter.sql"])); err != nil {
		t.Errorf("sql/counter.sql: %v", err)
	}
}

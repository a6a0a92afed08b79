package redis_test

import (
	"context"
	"encoding/binary"
	"fmt"
	"math"
	"os"
	"strings"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/ratelimitkit/ratelimit/algorithms"
	"github.com/ratelimitkit/ratelimit/algorithms/forms"
	"github.com/ratelimitkit/ratelimit/internal/redisengine"
	"github.com/ratelimitkit/ratelimit/internal/testserver"
)

// TestClusterRunCost isolates what one script run of the SDK's GCRA costs
// a server, per run and per key, on a cluster master and on a standalone
// server: for k keys a run (1 to 32), it sends, from one goroutine, runs of
// the node form (the keys of several slots of one master, at the end of
// ARGV, as store/redis and store/valkey send a master's decisions), of the
// coalesced form on k keys of one hash slot of the same master (declared in
// KEYS), and of the coalesced form on k keys of a private standalone
// server, each run deciding one request on each of its keys, with
// BenchmarkCluster's limit (no run reaches it, so each writes its key), on
// the server's clock, as the stores send them. Each contender gets 400 runs
// a round, 7 rounds, interleaved; the table has the medians over the
// rounds of the server's CPU time per run (INFO cpu: connections included)
// and its time inside the script (INFO commandstats), in microseconds. It
// runs only with RATELIMIT_BENCH_RUNCOST=1 and a cluster
// (RATELIMIT_REDIS_CLUSTER_ADDRS); RATELIMIT_BENCH_RUNCOST_NODE and
// RATELIMIT_BENCH_RUNCOST_MANY (name=file.lua,...) add node forms and
// coalesced forms of one's own to compare, and RATELIMIT_BENCH_RUNCOST_ALONE
// leaves the cluster's rows out.
func TestClusterRunCost(t *testing.T) {
	if os.Getenv("RATELIMIT_BENCH_RUNCOST") == "" {
		t.Skip("set RATELIMIT_BENCH_RUNCOST=1 to measure the node form's cost per run and per key")
	}
	const (
		rounds = 7
		runs   = 400
		pool   = 4000 // keys per contender, used in turn
	)
	ctx := context.Background()
	addrs := clusterAddrs(t)
	cc := goredisCluster(t)
	master := goredis.NewClient(&goredis.Options{Addr: addrs[0]})
	defer master.Close()
	private := testserver.StartRedis(t)
	alone := goredis.NewClient(&goredis.Options{Addr: private.Addr()})
	defer alone.Close()

	onMaster := func(key string) bool {
		n, err := cc.MasterForKey(ctx, key)
		if err != nil {
			t.Fatal(err)
		}
		return n.Options().Addr == addrs[0]
	}
	p := prefix()
	var tag string
	for i := 0; tag == ""; i++ {
		if k := fmt.Sprintf("{%s-t%d}", p, i); onMaster(k) {
			tag = k
		}
	}
	var nodeKeys, slotKeys, aloneKeys []string
	for i := 0; len(nodeKeys) < pool; i++ {
		if k := fmt.Sprintf("%s:n%d", p, i); onMaster(k) {
			nodeKeys = append(nodeKeys, k)
		}
	}
	for i := range pool {
		slotKeys = append(slotKeys, fmt.Sprintf("%s:%d", tag, i))
		aloneKeys = append(aloneKeys, fmt.Sprintf("%s:a%d", p, i))
	}

	// BenchmarkCluster's limit, on the server's clock, with the store's
	// slack on it: each run reads TIME, and a key lives a millisecond past
	// its state, as the store writes it.
	alg := algorithms.GCRA(rate, time.Second, burst)
	clockFlag, slackArg := "1", int64(redisengine.ServerClockSlack)
	s, sf := redisengine.Form(alg)
	if s == nil || s.Many == nil || s.Many.Node == nil {
		t.Fatal("GCRA has no node form")
	}
	packed := forms.PackLuaArgs(sf.ServerArgs())
	many := goredis.NewScript(s.Many.Src)
	node := goredis.NewScript(s.Many.Node.Src)
	type variant struct {
		name   string
		script *goredis.Script
	}
	variants := []variant{{"node", node}}
	var manyVariants []variant
	// RATELIMIT_BENCH_RUNCOST_NODE=name=file.lua,... adds node forms to
	// compare (the same calling convention), and
	// RATELIMIT_BENCH_RUNCOST_MANY coalesced forms (run standalone).
	for _, env := range []string{"RATELIMIT_BENCH_RUNCOST_NODE", "RATELIMIT_BENCH_RUNCOST_MANY"} {
		for _, f := range strings.Split(os.Getenv(env), ",") {
			name, file, ok := strings.Cut(f, "=")
			if !ok {
				continue
			}
			src, err := os.ReadFile(file)
			if err != nil {
				t.Fatal(err)
			}
			v := variant{name, goredis.NewScript(string(src))}
			if strings.HasSuffix(env, "NODE") {
				variants = append(variants, v)
			} else {
				manyVariants = append(manyVariants, v)
			}
		}
	}

	// args builds a run's ARGV for keys (the coalesced form's; the node
	// form's, the keys after it, when node).
	args := func(keys []string, node bool) []any {
		var a []any
		now := time.Now().UnixMicro()
		reqs := make([]byte, 0, 24*len(keys))
		for range keys {
			reqs = binary.LittleEndian.AppendUint64(reqs, math.Float64bits(float64(now)))
			reqs = binary.LittleEndian.AppendUint64(reqs, math.Float64bits(1))
			reqs = binary.LittleEndian.AppendUint64(reqs, 0)
		}
		a = append(a, clockFlag, string(reqs))
		for range keys {
			a = append(a, slackArg, packed, int64(1))
		}
		if node {
			for _, k := range keys {
				a = append(a, k)
			}
		}
		return a
	}
	type contender struct {
		name   string
		c      *goredis.Client
		script *goredis.Script
		keys   []string
		node   bool
	}
	cs := []contender{
		{"standalone-many", alone, many, aloneKeys, false},
	}
	for _, v := range manyVariants {
		cs = append(cs, contender{v.name, alone, v.script, aloneKeys, false})
	}
	if os.Getenv("RATELIMIT_BENCH_RUNCOST_ALONE") == "" {
		cs = append(cs, contender{"slot-many", master, many, slotKeys, false})
		for _, v := range variants {
			cs = append(cs, contender{v.name, master, v.script, nodeKeys, true})
		}
	}
	ks := []int{1, 4, 16, 32}
	var out strings.Builder
	fmt.Fprintf(&out, "\n| keys a run | contender | server CPU µs/run | in script µs/run | CPU µs/key |\n|---:|---|---:|---:|---:|\n")
	for _, k := range ks {
		cpu := make([][]float64, len(cs))
		in := make([][]float64, len(cs))
		at := make([]int, len(cs))
		one := func(i int) (float64, float64) {
			c := cs[i]
			u0, _ := commandStats(t, c.c)
			cpu0 := serverCPU(t, c.c)
			for range runs {
				keys := make([]string, k)
				for j := range keys {
					keys[j] = c.keys[at[i]%len(c.keys)]
					at[i]++
				}
				var err error
				if c.node {
					err = c.script.Run(ctx, c.c, nil, args(keys, true)...).Err()
				} else {
					err = c.script.Run(ctx, c.c, keys, args(keys, false)...).Err()
				}
				if err != nil {
					t.Fatalf("%s: %v", c.name, err)
				}
			}
			cpu1 := serverCPU(t, c.c)
			u1, _ := commandStats(t, c.c)
			return (cpu1 - cpu0) / runs, (u1 - u0) / runs
		}
		for i := range cs {
			one(i) // warm up: scripts, keys' state
		}
		for r := range rounds {
			for j := range cs {
				i := (j + r) % len(cs)
				a, b := one(i)
				cpu[i] = append(cpu[i], a)
				in[i] = append(in[i], b)
			}
		}
		for i, c := range cs {
			m := median(cpu[i])
			fmt.Fprintf(&out, "| %d | %s | %.1f | %.1f | %.2f |\n", k, c.name, m, median(in[i]), m/float64(k))
		}
	}
	t.Log(out.String())
}

package redis_test

import (
	"context"
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"
	vk "github.com/valkey-io/valkey-go"

	"github.com/ratelimitkit/ratelimit/algorithms"
	"github.com/ratelimitkit/ratelimit/algorithms/forms"
	"github.com/ratelimitkit/ratelimit/bench/internal/handforms"
	"github.com/ratelimitkit/ratelimit/internal/testserver"
)

// formAlgs are the algorithms whose Lua form is generated, with limits no
// run reaches, so that every call admits and writes its state.
var formAlgs = []algorithms.Algorithm{
	algorithms.FixedWindow(1_000_000_000, time.Second),
	algorithms.SlidingWindow(1_000_000_000, time.Second),
	algorithms.TokenBucket(rate, time.Second, burst),
	algorithms.LeakyBucket(rate, time.Second, burst),
	algorithms.GCRA(rate, time.Second, burst),
}

// evalFunc runs one EVALSHA of a form for key.
type evalFunc func(ctx context.Context, key string) error

// formScript loads src on c and returns a function that runs it with the
// calling convention of algorithms/forms/lua.go, as the stores call it: the
// caller's clock, cost 1, no peek, no slack.
func formScript(tb testing.TB, c *goredis.Client, src, prefix string, alg algorithms.Algorithm) evalFunc {
	// Run is EVALSHA, falling back to EVAL (which loads the script) when
	// the server answers NOSCRIPT, as the stores do.
	script := goredis.NewScript(src)
	if err := script.Load(context.Background(), c).Err(); err != nil {
		tb.Fatalf("SCRIPT LOAD %s: %v", alg.Name(), err)
	}
	packed := forms.PackLuaArgs(alg.(forms.ServerForm).ServerArgs())
	return func(ctx context.Context, key string) error {
		reply, err := script.Run(ctx, c, []string{prefix + key}, time.Now().UnixMicro(), 1, "0", "0", "0", packed).Text()
		var r [forms.LuaReplyLen]int64
		if err == nil {
			err = forms.UnpackLuaReply(reply, r[:])
		}
		if err == nil && r[forms.LuaReplyAllowed] != 1 {
			err = fmt.Errorf("%s: reply %v, want an admitted decision", alg.Name(), r)
		}
		return err
	}
}

// runEval makes n calls with exactly callers goroutines, on one hot key or
// on nKeys keys in turn, and returns calls per second and the failures.
func runEval(eval evalFunc, n, callers int, hot bool) (float64, int64, error) {
	ctx := context.Background()
	var next, failures atomic.Int64
	var first atomic.Value
	var wg sync.WaitGroup
	start := time.Now()
	for range callers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				i := next.Add(1) - 1
				if i >= int64(n) {
					return
				}
				key := keys[0]
				if !hot {
					key = keys[i%nKeys]
				}
				if err := eval(ctx, key); err != nil {
					failures.Add(1)
					first.CompareAndSwap(nil, err)
				}
			}
		}()
	}
	wg.Wait()
	var err error
	if e, ok := first.Load().(error); ok {
		err = e
	}
	return float64(n) / time.Since(start).Seconds(), failures.Load(), err
}

// valkeyScript is formScript through valkey-go, the client store/valkey uses.
func valkeyScript(tb testing.TB, c vk.Client, src, prefix string, alg algorithms.Algorithm) evalFunc {
	script := vk.NewLuaScript(src)
	packed := forms.PackLuaArgs(alg.(forms.ServerForm).ServerArgs())
	return func(ctx context.Context, key string) error {
		now := strconv.FormatInt(time.Now().UnixMicro(), 10)
		reply, err := script.Exec(ctx, c, []string{prefix + key}, []string{now, "1", "0", "0", "0", packed}).ToString()
		var r [forms.LuaReplyLen]int64
		if err == nil {
			err = forms.UnpackLuaReply(reply, r[:])
		}
		if err == nil && r[forms.LuaReplyAllowed] != 1 {
			err = fmt.Errorf("%s: reply %v, want an admitted decision", alg.Name(), r)
		}
		return err
	}
}

// cpuUsec returns the CPU time the server process has used, user and
// system, in microseconds (INFO cpu). On a server only this test talks to,
// the difference over a run is what the run cost the server, however often
// the machine's other work preempted it.
func cpuUsec(tb testing.TB, c *goredis.Client) float64 {
	info, err := c.Info(context.Background(), "cpu").Result()
	if err != nil {
		tb.Fatalf("INFO cpu: %v", err)
	}
	var sum float64
	for _, line := range strings.Split(info, "\n") {
		k, v, _ := strings.Cut(strings.TrimSpace(line), ":")
		if k == "used_cpu_user" || k == "used_cpu_sys" {
			x, err := strconv.ParseFloat(v, 64)
			if err != nil {
				tb.Fatalf("INFO cpu: %s: %v", line, err)
			}
			sum += x * 1e6
		}
	}
	return sum
}

// TestFormsReport measures the generated Lua forms (forms.Lua) against
// the hand-written ones they replaced (bench/internal/handforms) by EVALSHA
// throughput on the same server from one process: for each server, shape
// and algorithm, rounds that run both forms one after the other (who goes
// first alternates), so that drifting load hits both alike. The servers are
// a private redis-server this test starts, and the shared Redis and
// Valkey servers the environment names, through
// go-redis and valkey-go respectively; only this test talks to the
// private server, so INFO cpu also gives each form's server CPU per call.
// It prints, per row, the median calls/s of each form and the median and
// range of the per-round ratio generated ÷ hand-written (for server CPU:
// hand-written ÷ generated, so that above 1 means the generated form is
// cheaper). It runs only with RATELIMIT_BENCH_FORMS=1 (=alone: only the
// script-alone table).
func TestFormsReport(t *testing.T) {
	if os.Getenv("RATELIMIT_BENCH_FORMS") == "" {
		t.Skip("set RATELIMIT_BENCH_FORMS=1 to compare the generated Lua forms with the hand-written ones")
	}
	const (
		rounds  = 11
		n       = 3000
		callers = 32
	)
	private := testserver.StartRedis(t)
	if os.Getenv("RATELIMIT_BENCH_FORMS") == "alone" {
		pc := goredis.NewClient(&goredis.Options{Addr: private.Addr()})
		defer pc.Close()
		var out strings.Builder
		scriptAlone(t, pc, &out)
		t.Log(out.String())
		return
	}
	type server struct {
		name  string
		make  func(src, prefix string, alg algorithms.Algorithm) evalFunc
		stats *goredis.Client // nil: no exact server CPU (a shared server)
	}
	goClient := func(addr string) *goredis.Client {
		c := goredis.NewClient(&goredis.Options{Addr: addr, PoolSize: poolSz, MinIdleConns: callers})
		t.Cleanup(func() { c.Close() })
		return c
	}
	pc, rc := goClient(private.Addr()), goClient(redisAddr(t))
	vc := valkeyClient(t)
	servers := []server{
		{"private redis-server, go-redis", func(src, p string, a algorithms.Algorithm) evalFunc { return formScript(t, pc, src, p, a) }, pc},
		{"shared Redis, go-redis", func(src, p string, a algorithms.Algorithm) evalFunc { return formScript(t, rc, src, p, a) }, nil},
		{"shared Valkey, valkey-go", func(src, p string, a algorithms.Algorithm) evalFunc { return valkeyScript(t, vc, src, p, a) }, nil},
	}
	shapes := []struct {
		name string
		hot  bool
	}{{"hot key", true}, {"10,000 keys", false}}
	var out strings.Builder
	fmt.Fprintf(&out, "\nEVALSHA, %d callers, %d calls per form per round, %d rounds; ratio = generated ÷ hand-written calls/s; CPU ratio = hand-written ÷ generated server CPU µs per call (private server, INFO cpu)\n\n", callers, n, rounds)
	fmt.Fprintf(&out, "| server | keys | algorithm | generated calls/s | hand-written calls/s | ratio median | ratio range | generated µs/call | hand-written µs/call | CPU ratio median | CPU ratio range |\n|---|---|---|---:|---:|---:|---|---:|---:|---:|---|\n")
	for _, srv := range servers {
		for _, sh := range shapes {
			for _, alg := range formAlgs {
				src, ok := forms.Lua(alg.Name())
				if !ok {
					t.Fatalf("no Lua form for %s", alg.Name())
				}
				p := prefix()
				forms := []evalFunc{
					srv.make(src, p+":gen:", alg),
					srv.make(handforms.Lua(alg.Name()), p+":hand:", alg),
				}
				for _, f := range forms {
					if _, _, err := runEval(f, 300, callers, sh.hot); err != nil { // warm up
						t.Fatal(err)
					}
				}
				var rates, usecs [2][]float64
				var ratios, cpuRatios []float64
				for r := range rounds {
					var rate, usec [2]float64
					for j := range forms {
						i := (j + r) % 2
						var u0 float64
						if srv.stats != nil {
							u0 = cpuUsec(t, srv.stats)
						}
						v, failed, err := runEval(forms[i], n, callers, sh.hot)
						if failed > 0 {
							t.Fatalf("%s %s %s: %d calls failed: %v", srv.name, sh.name, alg.Name(), failed, err)
						}
						if srv.stats != nil {
							usec[i] = (cpuUsec(t, srv.stats) - u0) / float64(n)
						}
						rate[i] = v
					}
					for i := range 2 {
						rates[i] = append(rates[i], rate[i])
						usecs[i] = append(usecs[i], usec[i])
					}
					ratios = append(ratios, rate[0]/rate[1])
					if srv.stats != nil {
						cpuRatios = append(cpuRatios, usec[1]/usec[0])
					}
				}
				cpu := "| – | – | – | – |"
				if srv.stats != nil {
					cpu = fmt.Sprintf("| %.2f | %.2f | %.3f | %.3f–%.3f |", median(usecs[0]), median(usecs[1]),
						median(cpuRatios), slices.Min(cpuRatios), slices.Max(cpuRatios))
				}
				row := fmt.Sprintf("| %s | %s | %s | %.0f | %.0f | %.3f | %.3f–%.3f %s\n", srv.name, sh.name, alg.Name(),
					median(rates[0]), median(rates[1]), median(ratios), slices.Min(ratios), slices.Max(ratios), cpu)
				t.Log(row)
				out.WriteString(row)
			}
		}
	}
	scriptAlone(t, pc, &out)
	t.Log(out.String())
}

// loopScript wraps a form's source in a script that runs it n times on one
// key (the form's own return ends each run) and returns the server's
// microseconds for all of them: the cost of the script alone, without the
// client, the network or the command's parsing.
func loopScript(src string) *goredis.Script {
	return goredis.NewScript(`local form = function(KEYS, ARGV)
` + src + `
end
local n = tonumber(ARGV[7])
local t0 = redis.call('TIME')
for i = 1, n do
  form(KEYS, ARGV)
end
local t1 = redis.call('TIME')
return (t1[1] - t0[1]) * 1000000 + (t1[2] - t0[2])`)
}

// scriptAlone adds to out, for the private server, the server CPU per run
// of each form alone (loopScript; INFO cpu before and after), on one key
// whose state each run reads and writes. Rounds interleave the two forms as
// above; the ratio is hand-written ÷ generated µs per run, above 1 when the
// generated form is cheaper.
func scriptAlone(t *testing.T, c *goredis.Client, out *strings.Builder) {
	const (
		rounds = 21
		n      = 20000
	)
	ctx := context.Background()
	fmt.Fprintf(out, "\nThe script alone on the private server: %d runs of a form inside one EVAL, server CPU (INFO cpu), %d rounds; ratio = hand-written ÷ generated µs per run\n\n", n, rounds)
	fmt.Fprintf(out, "| algorithm | generated µs/run | hand-written µs/run | ratio median | ratio range |\n|---|---:|---:|---:|---|\n")
	for _, alg := range formAlgs {
		src, _ := forms.Lua(alg.Name())
		scripts := []*goredis.Script{loopScript(src), loopScript(handforms.Lua(alg.Name()))}
		p := prefix()
		packed := forms.PackLuaArgs(alg.(forms.ServerForm).ServerArgs())
		run := func(i, n int) float64 {
			// The time moves by 1 µs per call of the loop script: the
			// state stays live and every run admits and writes.
			now := time.Now().UnixMicro()
			u0 := cpuUsec(t, c)
			if err := scripts[i].Run(ctx, c, []string{fmt.Sprintf("%s:%d", p, i)}, now, 1, "0", "0", "0", packed, n).Err(); err != nil {
				t.Fatalf("%s: %v", alg.Name(), err)
			}
			return (cpuUsec(t, c) - u0) / float64(n)
		}
		run(0, 1000)
		run(1, 1000)
		var us [2][]float64
		var ratios []float64
		for r := range rounds {
			var u [2]float64
			for j := range 2 {
				i := (j + r) % 2
				u[i] = run(i, n)
				us[i] = append(us[i], u[i])
			}
			ratios = append(ratios, u[1]/u[0])
		}
		row := fmt.Sprintf("| %s | %.3f | %.3f | %.3f | %.3f–%.3f |\n", alg.Name(), median(us[0]), median(us[1]),
			median(ratios), slices.Min(ratios), slices.Max(ratios))
		t.Log(row)
		out.WriteString(row)
	}
}

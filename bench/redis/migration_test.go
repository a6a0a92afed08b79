package redis_test

import (
	"context"
	"fmt"
	"net"
	"os"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/ratelimitkit/ratelimit"
	"github.com/ratelimitkit/ratelimit/algorithms"
	"github.com/ratelimitkit/ratelimit/clock"
	rlredis "github.com/ratelimitkit/ratelimit/store/redis"
)

// redirects counts the MOVED, ASK and NOSCRIPT replies that a cluster
// client's node connections receive (the cluster client follows the first
// two and the store answers the third), through a hook on every node.
type redirects struct{ moved, ask, noscript atomic.Int64 }

func (r *redirects) count(err error) {
	if err == nil {
		return
	}
	switch msg := err.Error(); {
	case strings.HasPrefix(msg, "MOVED "):
		r.moved.Add(1)
	case strings.HasPrefix(msg, "ASK "):
		r.ask.Add(1)
	case strings.HasPrefix(msg, "NOSCRIPT"):
		r.noscript.Add(1)
	}
}

func (r *redirects) DialHook(next goredis.DialHook) goredis.DialHook { return next }

func (r *redirects) ProcessHook(next goredis.ProcessHook) goredis.ProcessHook {
	return func(ctx context.Context, cmd goredis.Cmder) error {
		err := next(ctx, cmd)
		r.count(cmd.Err())
		return err
	}
}

func (r *redirects) ProcessPipelineHook(next goredis.ProcessPipelineHook) goredis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []goredis.Cmder) error {
		err := next(ctx, cmds)
		for _, c := range cmds {
			r.count(c.Err())
		}
		return err
	}
}

// clusterNode is one master of the cluster, addressed directly.
type clusterNode struct {
	addr string
	id   string
	c    *goredis.Client
}

// migrate moves every key of slot from src to dst the way redis-cli
// --cluster reshard does: IMPORTING on dst, MIGRATING on src, MIGRATE of the
// slot's keys in batches, then the slot assigned to dst on every master.
func migrate(ctx context.Context, slot int, src, dst clusterNode, all []clusterNode) error {
	if err := dst.c.Do(ctx, "CLUSTER", "SETSLOT", slot, "IMPORTING", src.id).Err(); err != nil {
		return fmt.Errorf("SETSLOT IMPORTING on %s: %w", dst.addr, err)
	}
	if err := src.c.Do(ctx, "CLUSTER", "SETSLOT", slot, "MIGRATING", dst.id).Err(); err != nil {
		return fmt.Errorf("SETSLOT MIGRATING on %s: %w", src.addr, err)
	}
	host, port, _ := net.SplitHostPort(dst.addr)
	for {
		keys, err := src.c.ClusterGetKeysInSlot(ctx, slot, 100).Result()
		if err != nil {
			return fmt.Errorf("GETKEYSINSLOT on %s: %w", src.addr, err)
		}
		if len(keys) == 0 {
			break
		}
		args := []any{"MIGRATE", host, port, "", 0, 5000, "KEYS"}
		for _, k := range keys {
			args = append(args, k)
		}
		if err := src.c.Do(ctx, args...).Err(); err != nil {
			return fmt.Errorf("MIGRATE from %s: %w", src.addr, err)
		}
	}
	for _, n := range append([]clusterNode{dst, src}, all...) {
		if err := n.c.Do(ctx, "CLUSTER", "SETSLOT", slot, "NODE", dst.id).Err(); err != nil {
			return fmt.Errorf("SETSLOT NODE on %s: %w", n.addr, err)
		}
	}
	return nil
}

// BenchmarkClusterMigration measures what decisions on one hot key see while
// the key's hash slot moves to the next master of a Redis Cluster every
// 100 ms (MIGRATING/IMPORTING, MIGRATE, SETSLOT NODE: what a resharding
// does to each slot once), against the same workload with no migration, in interleaved
// rounds: 32 callers, GCRA with a limit of 20,000 per hour on the limiter's
// frozen clock (WithServerClock(false)), 40,000 requests a round on a new
// key, so that exactly 20,000 must be admitted whatever happens to the slot.
// It reports, per round kind, the medians over the rounds of decisions/s,
// p99 latency, failed calls, over- and under-admission, slot moves, and the
// MOVED, ASK and NOSCRIPT replies the cluster client's node connections
// received (counted by a hook; the cluster client follows MOVED and ASK,
// the store answers NOSCRIPT by sending the script's source).
//
// It moves slots, so it runs only on a cluster of its own: with
// RATELIMIT_BENCH_MIGRATE=1, which bash bench/run.sh rediscost sets for the
// cluster it starts. Run it with -benchtime 1x.
func BenchmarkClusterMigration(b *testing.B) {
	if os.Getenv("RATELIMIT_BENCH_MIGRATE") == "" {
		b.Skip("moves hash slots: set RATELIMIT_BENCH_MIGRATE=1 only for a cluster of its own (bash bench/run.sh rediscost)")
	}
	addrs := strings.Split(os.Getenv("RATELIMIT_REDIS_CLUSTER_ADDRS"), ",")
	if len(addrs) < 2 || addrs[0] == "" {
		b.Fatal("RATELIMIT_REDIS_CLUSTER_ADDRS must name at least two masters")
	}
	ctx := context.Background()
	var nodes []clusterNode
	for _, a := range addrs {
		c := goredis.NewClient(&goredis.Options{Addr: a})
		b.Cleanup(func() { c.Close() })
		id, err := c.Do(ctx, "CLUSTER", "MYID").Text()
		if err != nil {
			b.Fatalf("CLUSTER MYID on %s: %v", a, err)
		}
		nodes = append(nodes, clusterNode{a, id, c})
	}
	var seen redirects
	cc := goredis.NewClusterClient(&goredis.ClusterOptions{Addrs: addrs, PoolSize: poolSz})
	cc.OnNewNode(func(n *goredis.Client) { n.AddHook(&seen) })
	b.Cleanup(func() { cc.Close() })
	const limit, requests, callers, rounds = 20000, 40000, 32, 5
	frozen := clock.NewFake(time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC))
	s, err := rlredis.New(cc, rlredis.WithPrefix(prefix()), rlredis.WithServerClock(false))
	if err != nil {
		b.Fatal(err)
	}
	lim, err := ratelimit.New(s, algorithms.GCRA(limit, time.Hour, limit), ratelimit.WithClock(frozen))
	if err != nil {
		b.Fatal(err)
	}
	// owner returns the master that holds slot.
	owner := func(slot int) clusterNode {
		ranges, err := nodes[0].c.ClusterSlots(ctx).Result()
		if err != nil {
			b.Fatal(err)
		}
		for _, r := range ranges {
			if slot >= r.Start && slot <= r.End {
				for _, n := range nodes {
					if n.addr == r.Nodes[0].Addr {
						return n
					}
				}
			}
		}
		b.Fatalf("no master in RATELIMIT_REDIS_CLUSTER_ADDRS holds slot %d", slot)
		return clusterNode{}
	}
	type outcome struct {
		rate, p99, failures, over, under, moves, moved, ask, noscript float64
	}
	// round decides requests times on a new key, moving its slot back and
	// forth all along when move is set.
	round := func(r int, move bool) outcome {
		key := fmt.Sprintf("hot-%d-%t", r, move)
		if _, err := lim.Allow(ctx, key); err != nil { // the key exists, and its slot is known
			b.Fatal(err)
		}
		var redisKey string
		for _, n := range nodes {
			ks, err := n.c.Keys(ctx, "*"+key+"*").Result()
			if err != nil {
				b.Fatal(err)
			}
			if len(ks) > 0 {
				redisKey = ks[0]
			}
		}
		if redisKey == "" {
			b.Fatalf("no key for %q on any master", key)
		}
		slot, err := nodes[0].c.ClusterKeySlot(ctx, redisKey).Result()
		if err != nil {
			b.Fatal(err)
		}
		m0, a0, n0 := seen.moved.Load(), seen.ask.Load(), seen.noscript.Load()
		var admitted, failures atomic.Int64
		var next atomic.Int64
		next.Store(1) // the first request is above
		admitted.Store(1)
		done := make(chan struct{})
		var moves int
		var moveErr error
		var mwg sync.WaitGroup
		if move {
			mwg.Add(1)
			go func() {
				defer mwg.Done()
				for {
					select {
					case <-done:
						return
					case <-time.After(100 * time.Millisecond):
					}
					src := owner(int(slot))
					dst := nodes[(slices.IndexFunc(nodes, func(n clusterNode) bool { return n.id == src.id })+1)%len(nodes)]
					if err := migrate(ctx, int(slot), src, dst, nodes); err != nil {
						moveErr = err
						return
					}
					moves++
				}
			}()
		}
		lat := make([][]time.Duration, callers)
		var wg sync.WaitGroup
		start := time.Now()
		for c := range callers {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for next.Add(1) <= requests {
					t0 := time.Now()
					d, err := lim.Allow(ctx, key)
					lat[c] = append(lat[c], time.Since(t0))
					switch {
					case err != nil:
						if failures.Add(1) == 1 {
							b.Logf("a decision during the round failed: %v", err)
						}
					case d.Allowed:
						admitted.Add(1)
					}
				}
			}()
		}
		wg.Wait()
		elapsed := time.Since(start)
		close(done)
		mwg.Wait()
		if moveErr != nil {
			b.Fatalf("moving slot %d: %v", slot, moveErr)
		}
		all := slices.Concat(lat...)
		slices.Sort(all)
		a := admitted.Load()
		if failures.Load() == 0 && a != limit {
			b.Errorf("round %d (moving: %t): %d requests admitted %d, want exactly %d", r, move, requests, a, limit)
		}
		return outcome{
			rate:     float64(len(all)) / elapsed.Seconds(),
			p99:      float64(all[len(all)*99/100].Microseconds()),
			failures: float64(failures.Load()),
			over:     float64(max(a-limit, 0)),
			under:    float64(max(limit-a-failures.Load(), 0)),
			moves:    float64(moves),
			moved:    float64(seen.moved.Load() - m0),
			ask:      float64(seen.ask.Load() - a0),
			noscript: float64(seen.noscript.Load() - n0),
		}
	}
	var still, moving []outcome
	b.ResetTimer()
	for n := range b.N {
		for r := range rounds {
			i := n*rounds + r
			if r%2 == 0 {
				still, moving = append(still, round(i, false)), append(moving, round(i, true))
			} else {
				moving, still = append(moving, round(i, true)), append(still, round(i, false))
			}
		}
	}
	b.StopTimer()
	var ratio []float64
	for i := range still {
		ratio = append(ratio, moving[i].rate/still[i].rate)
	}
	med := func(os []outcome, f func(outcome) float64) float64 {
		var v []float64
		for _, o := range os {
			v = append(v, f(o))
		}
		return median(v)
	}
	for _, k := range []struct {
		name string
		os   []outcome
	}{{"still", still}, {"moving", moving}} {
		b.ReportMetric(med(k.os, func(o outcome) float64 { return o.rate }), k.name+":dec/s")
		b.ReportMetric(med(k.os, func(o outcome) float64 { return o.p99 }), k.name+":p99-us")
		b.ReportMetric(med(k.os, func(o outcome) float64 { return o.failures }), k.name+":failures")
		b.ReportMetric(med(k.os, func(o outcome) float64 { return o.over }), k.name+":over-admitted")
		b.ReportMetric(med(k.os, func(o outcome) float64 { return o.under }), k.name+":under-admitted")
		b.ReportMetric(med(k.os, func(o outcome) float64 { return o.moves }), k.name+":slot-moves")
		b.ReportMetric(med(k.os, func(o outcome) float64 { return o.moved }), k.name+":MOVED")
		b.ReportMetric(med(k.os, func(o outcome) float64 { return o.ask }), k.name+":ASK")
		b.ReportMetric(med(k.os, func(o outcome) float64 { return o.noscript }), k.name+":NOSCRIPT")
	}
	b.ReportMetric(median(ratio), "moving:x-still")
	b.ReportMetric(slices.Min(ratio), "moving:x-still-min")
	b.ReportMetric(slices.Max(ratio), "moving:x-still-max")
	var maxOver, sumFail float64
	for _, o := range append(still, moving...) {
		maxOver = max(maxOver, o.over)
		sumFail += o.failures
	}
	b.ReportMetric(maxOver, "max-over-admitted")
	b.ReportMetric(sumFail, "failures-total")
}

// BenchmarkClusterMigrationKeys is BenchmarkClusterMigration on many keys,
// whose decisions the store sends as one script run per master and batch
// (redisengine's node form), while slots move under them: 32 callers send
// 1,000 requests to each of 64 keys, round robin (GCRA, limit 500 per hour
// per key, the limiter's frozen clock: exactly 32,000 must be admitted),
// while every 50 ms the slot of one of 8 of the keys, in turn, moves to the
// next master. It reports the same figures per round, over 3 rounds. It
// moves slots, so it runs only with RATELIMIT_BENCH_MIGRATE=1 (bash
// bench/run.sh cluster). Run it with -benchtime 1x.
func BenchmarkClusterMigrationKeys(b *testing.B) {
	if os.Getenv("RATELIMIT_BENCH_MIGRATE") == "" {
		b.Skip("moves hash slots: set RATELIMIT_BENCH_MIGRATE=1 only for a cluster of its own (bash bench/run.sh cluster)")
	}
	addrs := strings.Split(os.Getenv("RATELIMIT_REDIS_CLUSTER_ADDRS"), ",")
	if len(addrs) < 2 || addrs[0] == "" {
		b.Fatal("RATELIMIT_REDIS_CLUSTER_ADDRS must name at least two masters")
	}
	ctx := context.Background()
	var nodes []clusterNode
	for _, a := range addrs {
		c := goredis.NewClient(&goredis.Options{Addr: a})
		b.Cleanup(func() { c.Close() })
		id, err := c.Do(ctx, "CLUSTER", "MYID").Text()
		if err != nil {
			b.Fatalf("CLUSTER MYID on %s: %v", a, err)
		}
		nodes = append(nodes, clusterNode{a, id, c})
	}
	var seen redirects
	cc := goredis.NewClusterClient(&goredis.ClusterOptions{Addrs: addrs, PoolSize: poolSz})
	cc.OnNewNode(func(n *goredis.Client) { n.AddHook(&seen) })
	b.Cleanup(func() { cc.Close() })
	const nkeys, moving, limit, perKey, callers, rounds = 64, 8, 500, 1000, 32, 3
	frozen := clock.NewFake(time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC))
	owner := func(slot int) clusterNode {
		ranges, err := nodes[0].c.ClusterSlots(ctx).Result()
		if err != nil {
			b.Fatal(err)
		}
		for _, r := range ranges {
			if slot >= r.Start && slot <= r.End {
				for _, n := range nodes {
					if n.addr == r.Nodes[0].Addr {
						return n
					}
				}
			}
		}
		b.Fatalf("no master in RATELIMIT_REDIS_CLUSTER_ADDRS holds slot %d", slot)
		return clusterNode{}
	}
	var fails, overs, unders, allMoves []float64
	var moved, ask int64
	for r := range rounds {
		p := prefix()
		s, err := rlredis.New(cc, rlredis.WithPrefix(p), rlredis.WithServerClock(false))
		if err != nil {
			b.Fatal(err)
		}
		lim, err := ratelimit.New(s, algorithms.GCRA(limit, time.Hour, limit), ratelimit.WithClock(frozen))
		if err != nil {
			b.Fatal(err)
		}
		var admitted, failures, next atomic.Int64
		for k := range nkeys { // every key exists, and its slot is known
			if _, err := lim.Allow(ctx, fmt.Sprintf("k%d", k)); err != nil {
				b.Fatal(err)
			}
			admitted.Add(1)
		}
		var slots []int
		for k := range moving {
			var redisKey string
			for _, n := range nodes {
				ks, err := n.c.Keys(ctx, p+":*:k"+fmt.Sprint(k)+"}").Result()
				if err != nil {
					b.Fatal(err)
				}
				if len(ks) > 0 {
					redisKey = ks[0]
				}
			}
			if redisKey == "" {
				b.Fatalf("no key k%d under %s on any master", k, p)
			}
			slot, err := nodes[0].c.ClusterKeySlot(ctx, redisKey).Result()
			if err != nil {
				b.Fatal(err)
			}
			slots = append(slots, int(slot))
		}
		m0, a0 := seen.moved.Load(), seen.ask.Load()
		done := make(chan struct{})
		var moves int
		var moveErr error
		var mwg sync.WaitGroup
		mwg.Add(1)
		go func() {
			defer mwg.Done()
			for i := 0; ; i++ {
				select {
				case <-done:
					return
				case <-time.After(50 * time.Millisecond):
				}
				slot := slots[i%len(slots)]
				src := owner(slot)
				dst := nodes[(slices.IndexFunc(nodes, func(n clusterNode) bool { return n.id == src.id })+1)%len(nodes)]
				if err := migrate(ctx, slot, src, dst, nodes); err != nil {
					moveErr = err
					return
				}
				moves++
			}
		}()
		var wg sync.WaitGroup
		for range callers {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for {
					i := next.Add(1) - 1
					if i >= nkeys*(perKey-1) {
						return
					}
					d, err := lim.Allow(ctx, fmt.Sprintf("k%d", i%nkeys))
					switch {
					case err != nil:
						if failures.Add(1) == 1 {
							b.Logf("a decision during the round failed: %v", err)
						}
					case d.Allowed:
						admitted.Add(1)
					}
				}
			}()
		}
		wg.Wait()
		close(done)
		mwg.Wait()
		if moveErr != nil {
			b.Fatalf("moving slots: %v", moveErr)
		}
		a := admitted.Load()
		if failures.Load() == 0 && a != nkeys*limit {
			b.Errorf("round %d: %d requests admitted %d, want exactly %d", r, nkeys*perKey, a, nkeys*limit)
		}
		fails = append(fails, float64(failures.Load()))
		overs = append(overs, float64(max(a-nkeys*limit, 0)))
		unders = append(unders, float64(max(nkeys*limit-a-failures.Load(), 0)))
		allMoves = append(allMoves, float64(moves))
		moved += seen.moved.Load() - m0
		ask += seen.ask.Load() - a0
	}
	b.ReportMetric(slices.Max(fails), "max-failures")
	b.ReportMetric(slices.Max(overs), "max-over-admitted")
	b.ReportMetric(slices.Max(unders), "max-under-admitted")
	b.ReportMetric(median(allMoves), "slot-moves")
	b.ReportMetric(float64(moved), "MOVED")
	b.ReportMetric(float64(ask), "ASK")
}

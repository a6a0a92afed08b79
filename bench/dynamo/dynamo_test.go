// Package dynamo_test benchmarks the DynamoDB store against a bare
// UpdateItem ADD on the same endpoint, with 16 concurrent callers on one hot
// key and on 10,000 keys. It counts the DynamoDB requests the store makes
// per decision through a wrapper around the real client, and checks that a
// hot key shared by 16 callers never admits more than its limit.
//
// It needs a DynamoDB endpoint in RATELIMIT_DYNAMODB_ENDPOINT and skips
// without one:
//
//	bash bench/run.sh dynamo
package dynamo_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/ratelimitkit/ratelimit"
	"github.com/ratelimitkit/ratelimit/algorithms"
	"github.com/ratelimitkit/ratelimit/clock"
	"github.com/ratelimitkit/ratelimit/store/dynamo"
)

// callers is the number of concurrent callers in every benchmark.
const callers = 16

// manyKeys is the number of distinct keys in the many-key benchmarks.
const manyKeys = 10_000

var keys = func() []string {
	k := make([]string, manyKeys)
	for i := range k {
		k[i] = fmt.Sprintf("user-%05d", i)
	}
	return k
}()

// counter wraps the real client and counts every request the store makes,
// and the capacity units the endpoint reports consumed for them: it asks
// for them (ReturnConsumedCapacity TOTAL) on every request.
type counter struct {
	dynamo.Client
	n atomic.Int64

	mu         sync.Mutex
	readUnits  float64
	writeUnits float64
}

// usage is what a counter has counted.
type usage struct {
	requests              int64
	readUnits, writeUnits float64
}

func (c *counter) snapshot() usage {
	c.mu.Lock()
	defer c.mu.Unlock()
	return usage{c.n.Load(), c.readUnits, c.writeUnits}
}

func (u usage) minus(v usage) usage {
	return usage{u.requests - v.requests, u.readUnits - v.readUnits, u.writeUnits - v.writeUnits}
}

func (c *counter) add(units *float64, cc *types.ConsumedCapacity) {
	if cc == nil || cc.CapacityUnits == nil {
		return
	}
	c.mu.Lock()
	*units += *cc.CapacityUnits
	c.mu.Unlock()
}

func (c *counter) GetItem(ctx context.Context, in *dynamodb.GetItemInput, opts ...func(*dynamodb.Options)) (*dynamodb.GetItemOutput, error) {
	c.n.Add(1)
	in.ReturnConsumedCapacity = types.ReturnConsumedCapacityTotal
	out, err := c.Client.GetItem(ctx, in, opts...)
	if err == nil {
		c.add(&c.readUnits, out.ConsumedCapacity)
	}
	return out, err
}

func (c *counter) PutItem(ctx context.Context, in *dynamodb.PutItemInput, opts ...func(*dynamodb.Options)) (*dynamodb.PutItemOutput, error) {
	c.n.Add(1)
	in.ReturnConsumedCapacity = types.ReturnConsumedCapacityTotal
	out, err := c.Client.PutItem(ctx, in, opts...)
	if err == nil {
		c.add(&c.writeUnits, out.ConsumedCapacity)
	}
	return out, err
}

func (c *counter) DeleteItem(ctx context.Context, in *dynamodb.DeleteItemInput, opts ...func(*dynamodb.Options)) (*dynamodb.DeleteItemOutput, error) {
	c.n.Add(1)
	in.ReturnConsumedCapacity = types.ReturnConsumedCapacityTotal
	out, err := c.Client.DeleteItem(ctx, in, opts...)
	if err == nil {
		c.add(&c.writeUnits, out.ConsumedCapacity)
	}
	return out, err
}

// server is the endpoint and table shared by the benchmarks of one run.
var server struct {
	once   sync.Once
	client *dynamodb.Client
	table  string
	err    error
}

func setup(b *testing.B) (*dynamodb.Client, string) {
	b.Helper()
	endpoint := os.Getenv("RATELIMIT_DYNAMODB_ENDPOINT")
	if endpoint == "" {
		b.Skip("RATELIMIT_DYNAMODB_ENDPOINT is not set: run with scripts/with-servers.sh")
	}
	server.once.Do(func() {
		cfg := aws.Config{Region: "us-east-1", Credentials: credentials.NewStaticCredentialsProvider("test", "test", "")}
		server.client = dynamodb.NewFromConfig(cfg, func(o *dynamodb.Options) {
			o.BaseEndpoint = aws.String(endpoint)
		})
		server.table = fmt.Sprintf("ratelimit-bench-%d", time.Now().UnixNano())
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		_, server.err = dynamo.CreateTable(ctx, server.client, server.table)
	})
	if server.err != nil {
		b.Fatalf("CreateTable: %v", server.err)
	}
	return server.client, server.table
}

// parallel runs b.N calls of fn from callers goroutines and returns how
// many failed.
func parallel(b *testing.B, fn func(i int) error) int64 {
	b.ResetTimer()
	failed := run(b, 0, b.N, fn)
	b.StopTimer()
	return failed
}

// run calls fn(i) for i in [from, to) from callers goroutines and returns
// how many calls failed, reporting the first failure.
func run(b *testing.B, from, to int, fn func(i int) error) int64 {
	var next, failed atomic.Int64
	next.Store(int64(from))
	var wg sync.WaitGroup
	for g := 0; g < callers; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				i := int(next.Add(1)) - 1
				if i >= to {
					return
				}
				if err := fn(i); err != nil {
					if failed.Add(1) == 1 {
						b.Error(err)
					}
				}
			}
		}()
	}
	wg.Wait()
	return failed.Load()
}

// A fixture is a store and limiter that live across the rounds of one
// benchmark, as in a long-running process: its cache is warm after the
// first round.
type fixture struct {
	counter *counter
	lim     *ratelimit.Limiter
	warm    bool // every key has been decided once
}

var fixtures sync.Map // name → *fixture

func getFixture(b *testing.B, name string, opts ...dynamo.Option) *fixture {
	client, table := setup(b)
	if f, ok := fixtures.Load(name); ok {
		return f.(*fixture)
	}
	c := &counter{Client: client}
	s, err := dynamo.New(c, append([]dynamo.Option{dynamo.WithTable(table)}, opts...)...)
	if err != nil {
		b.Fatal(err)
	}
	// A limit nothing reaches admits everything, so that every decision
	// writes, and an hour's window outlives the run, so that decisions on
	// a key seen before work on live state.
	lim, err := ratelimit.New(s, algorithms.FixedWindow(1e9, time.Hour), ratelimit.WithName(name))
	if err != nil {
		b.Fatal(err)
	}
	f := &fixture{counter: c, lim: lim}
	fixtures.Store(name, f)
	return f
}

// workloads are the key patterns of the throughput benchmarks.
var workloads = []struct {
	name string
	key  func(i int) string
}{
	{"hot-key", func(int) string { return "hot" }},
	// A stride coprime to 10,000 spreads even a short run over all keys.
	{"10k-keys", func(i int) string { return keys[(i*7919)%manyKeys] }},
}

// Interleaved rounds of BenchmarkStoreVsAdd: each round runs roundCalls
// decisions and roundCalls baseline ADDs, alternating which side goes first.
const (
	rounds     = 9
	roundCalls = 1024
)

// BenchmarkStoreVsAdd measures decisions through the store with 16 callers,
// on one hot key and spread over 10,000 keys, against the baseline of a
// bare UpdateItem that ADDs one to a counter (the cheapest write DynamoDB
// offers: no condition, no expiry) with the same callers and keys on the
// same endpoint. It runs 9 interleaved rounds of 1,024 calls per side,
// alternating which side goes first, and reports the median of the
// per-round throughput ratios (the store's decisions/s ÷ the ADDs/s of the
// same round) with the smallest and largest, the medians of both rates,
// the store's DynamoDB requests per decision, and the write and read
// capacity units per decision that the endpoint reports
// (ReturnConsumedCapacity TOTAL on every request the store sends). Run it
// with -benchtime 1x: one iteration is every round.
//
// The store and its cache live across the rounds, as in a long-running
// process, and the 10,000 keys all hold live state before the first round.
func BenchmarkStoreVsAdd(b *testing.B) {
	for _, w := range workloads {
		b.Run(w.name, func(b *testing.B) {
			client, table := setup(b)
			f := getFixture(b, w.name)
			ctx := context.Background()
			decide := func(i int) error {
				d, err := f.lim.Allow(ctx, w.key(i))
				if err == nil && !d.Allowed {
					err = fmt.Errorf("lim.Allow denied with a limit nothing reaches")
				}
				return err
			}
			one := &types.AttributeValueMemberN{Value: "1"}
			add := func(i int) error {
				_, err := client.UpdateItem(ctx, &dynamodb.UpdateItemInput{
					TableName:                 &table,
					Key:                       map[string]types.AttributeValue{dynamo.AttrKey: &types.AttributeValueMemberB{Value: []byte("baseline-" + w.key(i))}},
					UpdateExpression:          aws.String("ADD #n :one"),
					ExpressionAttributeNames:  map[string]string{"#n": "n"},
					ExpressionAttributeValues: map[string]types.AttributeValue{":one": one},
				})
				return err
			}
			if w.name == "10k-keys" && !f.warm {
				// Steady state: every key has live state, which the
				// store's cache knows, as after the process has run a
				// while. The warm-up is neither timed nor counted.
				if failed := run(b, 0, manyKeys, func(i int) error { _, err := f.lim.Allow(ctx, keys[i]); return err }); failed > 0 {
					b.Fatalf("%d warm-up decisions failed", failed)
				}
				f.warm = true
			}
			// Warm both sides (connections, the hot key's state) first.
			run(b, 0, roundCalls, decide)
			run(b, 0, roundCalls, add)
			before := f.counter.snapshot()
			var failed int64
			var ratios, storeRates, addRates []float64
			timed := func(from int, fn func(int) error) float64 {
				t0 := time.Now()
				failed += run(b, from, from+roundCalls, fn)
				return float64(roundCalls) / time.Since(t0).Seconds()
			}
			b.ResetTimer()
			for n := 0; n < b.N; n++ {
				for r := 0; r < rounds; r++ {
					from := (n*rounds + r + 1) * roundCalls
					var sr, ar float64
					if r%2 == 0 {
						sr, ar = timed(from, decide), timed(from, add)
					} else {
						ar, sr = timed(from, add), timed(from, decide)
					}
					ratios, storeRates, addRates = append(ratios, sr/ar), append(storeRates, sr), append(addRates, ar)
				}
			}
			b.StopTimer()
			used := f.counter.snapshot().minus(before)
			decisions := float64(b.N * rounds * roundCalls)
			b.ReportMetric(float64(used.requests)/decisions, "requests/decision")
			b.ReportMetric(used.writeUnits/decisions, "WCU/decision")
			b.ReportMetric(used.readUnits/decisions, "RCU/decision")
			b.ReportMetric(median(storeRates), "decisions/s")
			b.ReportMetric(median(addRates), "adds/s")
			b.ReportMetric(median(ratios), "ratio-median")
			b.ReportMetric(slices.Min(ratios), "ratio-min")
			b.ReportMetric(slices.Max(ratios), "ratio-max")
			b.ReportMetric(float64(failed), "errors")
		})
	}
}

// median returns the median of vs.
func median(vs []float64) float64 {
	s := slices.Clone(vs)
	slices.Sort(s)
	return s[len(s)/2]
}

// BenchmarkColdCache measures decisions spread over 10,000 keys that already
// hold state, by a store created afresh (empty cache) for every round: the
// worst case, a process that has just started. Each first decision on a key
// costs two requests: on DynamoDB a failed conditional create, which returns
// the item, and the write; on endpoints that do not return the item with a
// failed condition (dynalite), a read and the write, once the store has seen
// that (its first failed guess costs three).
func BenchmarkColdCache(b *testing.B) {
	client, table := setup(b)
	// Give every key live state first.
	warm := getFixture(b, "cold")
	ctx := context.Background()
	if failed := run(b, 0, manyKeys, func(i int) error { _, err := warm.lim.Allow(ctx, keys[i]); return err }); failed > 0 {
		b.Fatalf("%d warm-up decisions failed", failed)
	}
	fixtures.Delete("cold")
	f := getFixture(b, "cold")
	fixtures.Delete("cold")
	_, _ = client, table
	failed := parallel(b, func(i int) error {
		_, err := f.lim.Allow(ctx, keys[i%manyKeys])
		return err
	})
	used := f.counter.snapshot()
	b.ReportMetric(float64(used.requests)/float64(b.N), "requests/decision")
	b.ReportMetric(used.writeUnits/float64(b.N), "WCU/decision")
	b.ReportMetric(used.readUnits/float64(b.N), "RCU/decision")
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "decisions/s")
	b.ReportMetric(float64(failed), "errors")
}

// BenchmarkOverAdmission sends b.N requests from 16 callers to one fresh
// key with a limit of 50, on a clock that stands still, and reports how
// many more than min(b.N, 50) were admitted: it must be zero. "two-stores"
// splits the callers over two stores on the same table, as two processes
// would be, so that conditional writes really conflict.
func BenchmarkOverAdmission(b *testing.B) {
	const limit = 50
	for _, stores := range []int{1, 2} {
		name := "one-store"
		if stores == 2 {
			name = "two-stores"
		}
		b.Run(name, func(b *testing.B) {
			client, table := setup(b)
			fc := clock.NewFake(time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC))
			alg := algorithms.FixedWindow(limit, time.Hour)
			var lims []*ratelimit.Limiter
			var counters []*counter
			for i := 0; i < stores; i++ {
				c := &counter{Client: client}
				s, err := dynamo.New(c, dynamo.WithTable(table), dynamo.WithMaxConflicts(1000))
				if err != nil {
					b.Fatal(err)
				}
				lim, err := ratelimit.New(s, alg, ratelimit.WithClock(fc), ratelimit.WithName("overadmit"))
				if err != nil {
					b.Fatal(err)
				}
				lims, counters = append(lims, lim), append(counters, c)
			}
			key := "round-" + strconv.FormatUint(rand.Uint64(), 36)
			var admitted atomic.Int64
			ctx := context.Background()
			failed := parallel(b, func(i int) error {
				d, err := lims[i%stores].Allow(ctx, key)
				if err == nil && d.Allowed {
					admitted.Add(1)
				}
				return err
			})
			want := int64(min(b.N, limit))
			if failed == 0 && admitted.Load() != want {
				b.Errorf("%d requests from %d callers admitted %d, want exactly %d", b.N, callers, admitted.Load(), want)
			}
			var requests int64
			for _, c := range counters {
				requests += c.n.Load()
			}
			b.ReportMetric(float64(admitted.Load()-want), "over-admitted")
			b.ReportMetric(float64(requests)/float64(b.N), "requests/decision")
			b.ReportMetric(float64(failed), "errors")
		})
	}
}

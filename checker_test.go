package ratelimit_test

import (
	"context"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	goredis "github.com/redis/go-redis/v9"
	vk "github.com/valkey-io/valkey-go"

	"github.com/ratelimitkit/ratelimit/algorithms"
	"github.com/ratelimitkit/ratelimit/algorithms/forms"
	"github.com/ratelimitkit/ratelimit/conformance"
	"github.com/ratelimitkit/ratelimit/internal/testserver"
	"github.com/ratelimitkit/ratelimit/store"
	"github.com/ratelimitkit/ratelimit/store/dynamo"
	"github.com/ratelimitkit/ratelimit/store/memory"
	"github.com/ratelimitkit/ratelimit/store/postgres"
	rlredis "github.com/ratelimitkit/ratelimit/store/redis"
	"github.com/ratelimitkit/ratelimit/store/valkey"
)

// The model-based checker (conformance.Check, docs/checker.md) over every
// built-in store, with the root package's options (conformance's
// DefaultOptionSets), two instances of each shared store as two
// processes, and the limiter's clock on every store (the server clock off).

// checkerStore is a store kind the checker runs on: a harness whose Store
// and Twin are two instances (two clients) on one backend and prefix.
type checkerStore struct {
	name    string
	harness func(t *testing.T) conformance.Harness
}

func checkerStores() []checkerStore {
	return []checkerStore{
		{"memory", func(t *testing.T) conformance.Harness {
			s, err := memory.New()
			if err != nil {
				t.Fatal(err)
			}
			// One process's memory: the second "instance" is the same store.
			return conformance.Harness{Store: s, Twin: func(*testing.T) store.Store { return s }}
		}},
		{"redis", func(t *testing.T) conformance.Harness {
			prefix := uniqueName("checker")
			open := func(t *testing.T) store.Store {
				c := goredis.NewClient(&goredis.Options{Addr: testserver.RedisAddr(t), ContextTimeoutEnabled: true})
				t.Cleanup(func() { c.Close() })
				s, err := rlredis.New(c, rlredis.WithPrefix(prefix), rlredis.WithServerClock(false))
				if err != nil {
					t.Fatal(err)
				}
				return s
			}
			// Redis expires keys by its own clock: the checker keeps the
			// fake clocks from running slower.
			return conformance.Harness{Store: open(t), Twin: open, RealTimeExpiry: true}
		}},
		{"valkey", func(t *testing.T) conformance.Harness {
			prefix := uniqueName("checker")
			open := func(t *testing.T) store.Store {
				c, err := vk.NewClient(vk.ClientOption{InitAddress: []string{testserver.ValkeyAddr(t)}, DisableCache: true})
				if err != nil {
					t.Fatal(err)
				}
				t.Cleanup(c.Close)
				s, err := valkey.New(c, valkey.WithPrefix(prefix), valkey.WithServerClock(false))
				if err != nil {
					t.Fatal(err)
				}
				return s
			}
			return conformance.Harness{Store: open(t), Twin: open, RealTimeExpiry: true}
		}},
		{"postgres", func(t *testing.T) conformance.Harness {
			table := uniqueName("rl_checker")
			open := func(t *testing.T) store.Store {
				ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
				defer cancel()
				pool, err := pgxpool.New(ctx, testserver.PostgresURL(t))
				if err != nil {
					t.Fatal(err)
				}
				t.Cleanup(pool.Close)
				s, err := postgres.New(pool, postgres.WithTable(table), postgres.WithServerClock(false))
				if err != nil {
					t.Fatal(err)
				}
				return s
			}
			s := open(t)
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			if err := s.(*postgres.Store).Migrate(ctx); err != nil {
				t.Fatalf("store.Migrate: %v", err)
			}
			t.Cleanup(func() { dropPostgres(t, table) })
			return conformance.Harness{Store: s, Twin: open}
		}},
		{"dynamodb", func(t *testing.T) conformance.Harness {
			endpoint := testserver.DynamoDBEndpoint(t)
			client := func() *dynamodb.Client {
				return dynamodb.NewFromConfig(aws.Config{
					Region:      "us-east-1",
					Credentials: credentials.NewStaticCredentialsProvider("test", "test", ""),
				}, func(o *dynamodb.Options) { o.BaseEndpoint = aws.String(endpoint) })
			}
			table := strings.ReplaceAll(uniqueName("ratelimit-checker"), "_", "-")
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			c := client()
			if _, err := dynamo.CreateTable(ctx, c, table); err != nil {
				t.Fatalf("dynamo.CreateTable(%s): %v", table, err)
			}
			t.Cleanup(func() {
				ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
				defer cancel()
				_, _ = c.DeleteTable(ctx, &dynamodb.DeleteTableInput{TableName: &table})
			})
			open := func(t *testing.T) store.Store {
				s, err := dynamo.New(client(), dynamo.WithTable(table))
				if err != nil {
					t.Fatal(err)
				}
				return s
			}
			// A process sees another's Reset or Cancel within the
			// store's staleness bound (dynamo.WithMaxStaleness).
			return conformance.Harness{Store: open(t), Twin: open, Staleness: dynamo.DefaultMaxStaleness}
		}},
	}
}

// dropPostgres drops a checker table and its functions.
func dropPostgres(t *testing.T, table string) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	pool, err := pgxpool.New(ctx, testserver.PostgresURL(t))
	if err != nil {
		return
	}
	defer pool.Close()
	_, _ = pool.Exec(ctx, "DROP TABLE IF EXISTS "+pgx.Identifier{table}.Sanitize())
	for _, b := range forms.Builtins() {
		_, _ = pool.Exec(ctx, "DROP FUNCTION IF EXISTS "+pgx.Identifier{table + "_decide_" + b.Name}.Sanitize())
	}
}

// issue29Open lists the defects of issue 29 still open on this branch, by
// the regression case that checks each, with the branch that fixes it.
// While a defect is open its regression case skips, and the exploration
// (TestChecker) leaves out the part of the space that finds it. When a
// fix is merged, delete its line here: THE ONE PLACE to turn a case on.
var issue29Open = map[string]string{}

// skipOpen skips t while the defect its case checks is open, unless
// RATELIMIT_CHECKER_OPEN is set (to see the open cases fail).
func skipOpen(t *testing.T, name string) {
	t.Helper()
	if branch, open := issue29Open[name]; open && os.Getenv("RATELIMIT_CHECKER_OPEN") == "" {
		t.Skipf("issue 29: %s is open here; fixed on branch %s (delete its line in issue29Open once merged)", name, branch)
	}
}

// openIn reports whether any of the named cases is still open.
func openIn(names ...string) bool {
	for _, n := range names {
		if _, ok := issue29Open[n]; ok {
			return true
		}
	}
	return false
}

// explored is the space TestChecker draws from on the store named:
// everything, less what finds a defect that is still open (issue29Open).
func explored(storeName string) conformance.CheckConfig {
	var cfg conformance.CheckConfig
	if openIn("gcra-older-reading-gives-back-debt", "token-bucket-older-reading-ttl", "leaky-bucket-older-reading-ttl", "composite-older-reading-ttl", "skewed-instances-ttl") {
		cfg.Clocks = []conformance.ClockMode{conformance.ClockMonotonic}
	}
	if openIn("local-quota-reserve-acts-at-once", "local-quota-cancel-takes-a-unit", "local-quota-under-admits") {
		for _, s := range conformance.DefaultOptionSets() {
			if s.LocalQuota == nil {
				cfg.Options = append(cfg.Options, s)
			}
		}
	}
	return cfg
}

// TestChecker runs the checker on every built-in store: by default
// conformance.CheckTraces() traces each (RATELIMIT_CHECKS=1000 for a long
// run; docs/checker.md).
func TestChecker(t *testing.T) {
	for _, s := range checkerStores() {
		t.Run(s.name, func(t *testing.T) {
			conformance.Check(t, s.harness, explored(s.name))
		})
	}
}

// checkerCase is a trace the checker found on the code before a fix, and
// the defect it checks.
type checkerCase struct {
	name   string
	defect string
	trace  conformance.Trace
}

func checkerCases() []checkerCase {
	const ms = time.Millisecond
	type step = conformance.Step
	allow := func(n int) step { return step{Call: conformance.CallAllow, Cost: n} }
	many := func(n int, s step) []step {
		var out []step
		for range n {
			out = append(out, s)
		}
		return out
	}
	cat := func(parts ...[]step) []step {
		var out []step
		for _, p := range parts {
			out = append(out, p...)
		}
		return out
	}
	olderTTL := func(alg algorithms.Algorithm) conformance.Trace {
		// An older reading that still fits is admitted and writes; the
		// key's expiry computed from that older time makes the state
		// expire early, and a full bucket comes back.
		return conformance.Trace{Alg: alg, Options: "none", Instances: 1, Steps: []step{
			allow(1),
			{Call: conformance.CallAllow, Cost: 1, Back: 100 * ms},
			{Call: conformance.CallConcurrent, Cost: 1, Callers: 32},
		}}
	}
	return []checkerCase{
		{"gcra-older-reading-gives-back-debt", "1: GCRA hands back its debt when a reading is older than the stored state",
			conformance.Trace{Alg: algorithms.GCRA(10, time.Second, 5), Options: "none", Instances: 1, Steps: cat(
				[]step{allow(5)},
				many(2, step{Call: conformance.CallReserve, Cost: 5, MaxDelay: 2 * time.Second}),
				[]step{{Call: conformance.CallAllow, Cost: 1, Back: 600 * ms}},
				[]step{{Call: conformance.CallConcurrent, Advance: time.Second, Cost: 1, Callers: 32}},
			)}},
		{"token-bucket-older-reading-ttl", "1: the token bucket's TTL computed from an older reading brings a full bucket back",
			olderTTL(algorithms.TokenBucket(2, 100*ms, 2))},
		{"leaky-bucket-older-reading-ttl", "1: the leaky bucket's TTL computed from an older reading brings an empty queue back",
			olderTTL(algorithms.LeakyBucket(2, 100*ms, 2))},
		{"composite-older-reading-ttl", "1: All(TokenBucket, SlidingLog): the bucket part's TTL from an older reading",
			olderTTL(algorithms.All(algorithms.TokenBucket(2, 100*ms, 2), algorithms.SlidingLog(100, time.Second)))},
		{"skewed-instances-ttl", "1: two processes whose clocks disagree by 41ms, each writing a TTL from its own time",
			conformance.Trace{Alg: algorithms.TokenBucket(50, 100*ms, 20), Options: "none", Instances: 2, Skew: -41 * ms, Steps: func() []step {
				// Each process in turn, one millisecond apart: the one
				// behind writes an expiry from its own time, which the
				// other's reading has passed.
				var out []step
				for i := range 6 {
					out = append(out, step{Call: conformance.CallAllow, Advance: time.Duration(min(i, 1)) * ms, Cost: 10},
						step{Call: conformance.CallAllow, Instance: 1, Cost: 10})
				}
				return out
			}()}},
		{"local-quota-reserve-acts-at-once", "2: a reservation served from a local-quota share is told to act at once",
			conformance.Trace{Alg: algorithms.GCRA(20, time.Second, 20), Options: "local-quota", Instances: 1, Steps: cat(
				[]step{allow(20)},
				many(12, step{Call: conformance.CallReserve, Cost: 1, MaxDelay: 5 * time.Second}),
			)}},
		{"local-quota-cancel-takes-a-unit", "2: Cancel under local quota takes a unit instead of giving one back",
			conformance.Trace{Alg: algorithms.FixedWindow(100, time.Hour), Options: "local-quota-large", Instances: 1, Steps: cat(
				func() []step {
					var out []step
					for range 51 {
						out = append(out, step{Call: conformance.CallReserve, Cost: 1}, step{Call: conformance.CallCancel, Reservation: 1 << 20})
					}
					return out
				}(),
				many(60, allow(1)),
			)}},
		{"local-quota-under-admits", "3: local quota under-admits past its bound N·(S−1) per window",
			conformance.Trace{Alg: algorithms.FixedWindow(50, 100*ms), Options: "local-quota", Instances: 2, Steps: []step{
				{Call: conformance.CallConcurrent, Advance: 200 * ms, Instance: 1, Cost: 3, Callers: 32},
				allow(3),
			}}},
		{"local-quota-log-replaced-share", "found by the checker: a sliding log's share replaced while it held fewer units than a request's cost loses them for the period, every replacement",
			conformance.Trace{Alg: algorithms.SlidingLog(50, 2*time.Second), Options: "local-quota", Instances: 2, Steps: []step{
				{Call: conformance.CallReserve, Cost: 3, MaxDelay: 567 * ms},
				allow(1),
				{Call: conformance.CallConcurrent, Cost: 3, Callers: 32},
				allow(2),
			}}},
		{"wait-below-rate", "5: Wait polls and loses a slot to every late timer",
			conformance.Trace{Alg: algorithms.GCRA(20, time.Second, 1), Options: "none", Instances: 1,
				Steps: many(30, step{Call: conformance.CallWait, Cost: 1, Tick: 20 * ms})}},
		{"reserve-within-max-delay", "5: Reserve books at most two bursts ahead whatever maxDelay says",
			conformance.Trace{Alg: algorithms.TokenBucket(10, time.Second, 1), Options: "none", Instances: 1,
				Steps: many(20, step{Call: conformance.CallReserve, Cost: 1, MaxDelay: 2 * time.Second})}},
		{"dynamo-stale-cache-after-reset", "found by the checker: a DynamoDB store's per-process cache denies on state another process's Reset deleted",
			conformance.Trace{Alg: algorithms.FixedWindow(2, time.Hour), Options: "none", Instances: 2, Steps: []step{
				{Call: conformance.CallAllow, Instance: 1, Cost: 2},
				{Call: conformance.CallAllow, Instance: 1, Cost: 1},
				{Call: conformance.CallReset},
				// Once the store's staleness bound has passed (within it,
				// the denial may stand: Harness.Staleness).
				{Call: conformance.CallAllow, Instance: 1, Cost: 1, Advance: dynamo.DefaultMaxStaleness},
			}}},
		{"dynamo-stale-cache-after-cancel", "found by the checker: a DynamoDB store's per-process cache denies on state another process's Cancel gave back",
			conformance.Trace{Alg: algorithms.FixedWindow(1, time.Hour), Options: "none", Instances: 2, Steps: []step{
				{Call: conformance.CallReserve, Instance: 1, Cost: 1},
				allow(1),
				{Call: conformance.CallCancel},
				// Once the store's staleness bound has passed, in the
				// same window.
				{Call: conformance.CallAllow, Cost: 1, Advance: dynamo.DefaultMaxStaleness},
			}}},
		{"multi-limit-part-added", "4: adding a limit to a multi-limit resets every key's counts",
			conformance.Trace{Alg: algorithms.All(algorithms.FixedWindow(5, time.Hour), algorithms.TokenBucket(10, time.Second, 10)), Options: "none", Instances: 1, Steps: []step{
				allow(5),
				{Call: conformance.CallRebuild, Alg: algorithms.All(algorithms.FixedWindow(5, time.Hour), algorithms.TokenBucket(10, time.Second, 10), algorithms.SlidingLog(1000, 24*time.Hour))},
				allow(1),
			}}},
	}
}

// TestCheckerRegressions replays each trace the checker found on the code
// before issue 29's fixes, on every store.
func TestCheckerRegressions(t *testing.T) {
	stores := checkerStores()
	for _, c := range checkerCases() {
		t.Run(c.name, func(t *testing.T) {
			skipOpen(t, c.name)
			for _, s := range stores {
				t.Run(s.name, func(t *testing.T) {
					t.Logf("defect %s", c.defect)
					conformance.CheckTrace(t, s.harness, conformance.CheckConfig{}, c.trace)
					if testing.Verbose() {
						t.Logf("%s passes on %s", c.name, s.name)
					}
				})
			}
		})
	}
}

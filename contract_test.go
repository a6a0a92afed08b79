package ratelimit_test

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"math/rand/v2"
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

	"github.com/ratelimitkit/ratelimit"
	"github.com/ratelimitkit/ratelimit/algorithms"
	"github.com/ratelimitkit/ratelimit/algorithms/forms"
	"github.com/ratelimitkit/ratelimit/clock"
	"github.com/ratelimitkit/ratelimit/conformance"
	"github.com/ratelimitkit/ratelimit/internal/testserver"
	"github.com/ratelimitkit/ratelimit/store"
	"github.com/ratelimitkit/ratelimit/store/dynamo"
	"github.com/ratelimitkit/ratelimit/store/memory"
	"github.com/ratelimitkit/ratelimit/store/postgres"
	rlredis "github.com/ratelimitkit/ratelimit/store/redis"
	rlvalkey "github.com/ratelimitkit/ratelimit/store/valkey"
)

// stepAlgorithm is a user's algorithm (at most limit units per hour, the
// count as 8 bytes) with one switchable breach of the step contract.
type stepAlgorithm struct {
	defect string
	limit  int64
}

func (a stepAlgorithm) Name() string    { return "step_" + a.defect }
func (a stepAlgorithm) Validate() error { return nil }
func (a stepAlgorithm) MaxCost() int64  { return a.limit }
func (a stepAlgorithm) Decide(state []byte, req algorithms.Request) (algorithms.Step, error) {
	const hour = int64(time.Hour / time.Microsecond)
	var n int64
	if len(state) == 8 {
		n = int64(binary.LittleEndian.Uint64(state))
	}
	d := algorithms.Decision{Allowed: n+req.Cost <= a.limit, Limit: a.limit, ResetAfter: hour}
	if !d.Allowed {
		d.RetryAfter = hour
		if a.defect == "retry0" {
			d.RetryAfter = 0
		}
	}
	d.Remaining = a.limit - n
	st := algorithms.Step{Decision: d}
	switch {
	case req.Peek && a.defect == "peek":
		st.Next, st.TTL = binary.LittleEndian.AppendUint64(nil, uint64(n+req.Cost)), hour
	case d.Allowed && !req.Peek:
		st.Decision.Remaining = a.limit - n - req.Cost
		st.Next, st.TTL = binary.LittleEndian.AppendUint64(nil, uint64(n+req.Cost)), hour
		if a.defect == "ttl0" {
			st.TTL = 0
		}
	}
	if a.defect == "remaining" {
		st.Decision.Remaining = a.limit + 1
	}
	return st, nil
}

// storeKinds are the stores everyStore makes, memory first.
var storeKinds = []string{"memory", "redis", "valkey", "postgres", "dynamo"}

// everyStore returns a fresh store of each kind (storeKinds).
func everyStore(t *testing.T) map[string]store.Store {
	t.Helper()
	stores := map[string]store.Store{}
	for _, kind := range storeKinds {
		stores[kind] = newStoreOf(t, kind)
	}
	return stores
}

// newStoreOf returns a fresh store of the given kind on the configured
// server (keys, a prefix or a table of its own), deciding by the time the
// limiter passes.
func newStoreOf(t *testing.T, kind string) store.Store {
	t.Helper()
	ctx := context.Background()
	prefix := fmt.Sprintf("contract-%d-%08x", time.Now().UnixNano(), rand.Uint32())
	switch kind {
	case "memory":
		return memory.MustNew()
	case "redis":
		rc := goredis.NewClient(&goredis.Options{Addr: testserver.RedisAddr(t)})
		t.Cleanup(func() { rc.Close() })
		rs, err := rlredis.New(rc, rlredis.WithPrefix(prefix), rlredis.WithServerClock(false))
		if err != nil {
			t.Fatal(err)
		}
		return rs
	case "valkey":
		vc, err := vk.NewClient(vk.ClientOption{InitAddress: []string{testserver.ValkeyAddr(t)}, DisableCache: true})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(vc.Close)
		vs, err := rlvalkey.New(vc, rlvalkey.WithPrefix(prefix), rlvalkey.WithServerClock(false))
		if err != nil {
			t.Fatal(err)
		}
		return vs
	case "postgres":
		pool, err := pgxpool.New(ctx, testserver.PostgresURL(t))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(pool.Close)
		table := strings.ReplaceAll(prefix, "-", "_")
		ps, err := postgres.New(pool, postgres.WithTable(table), postgres.WithServerClock(false))
		if err != nil {
			t.Fatal(err)
		}
		if err := ps.Migrate(ctx); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() {
			if _, err := pool.Exec(context.Background(), "DROP TABLE "+pgx.Identifier{table}.Sanitize()+" CASCADE"); err != nil {
				t.Logf("dropping %s: %v", table, err)
			}
		})
		return ps
	case "dynamo":
		dc := dynamodb.NewFromConfig(aws.Config{
			Region:      "us-east-1",
			Credentials: credentials.NewStaticCredentialsProvider("test", "test", ""),
		}, func(o *dynamodb.Options) { o.BaseEndpoint = aws.String(testserver.DynamoDBEndpoint(t)) })
		if _, err := dynamo.CreateTable(ctx, dc, prefix); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() {
			_, _ = dc.DeleteTable(context.Background(), &dynamodb.DeleteTableInput{TableName: aws.String(prefix)})
		})
		ds, err := dynamo.New(dc, dynamo.WithTable(prefix))
		if err != nil {
			t.Fatal(err)
		}
		return ds
	}
	t.Fatalf("unknown store kind %q", kind)
	return nil
}

// TestRunAlgorithmOnEveryStore runs a user's algorithm through
// conformance.RunAlgorithm on every store, as docs/writing-an-algorithm.md
// tells users to.
func TestRunAlgorithmOnEveryStore(t *testing.T) {
	for _, kind := range storeKinds {
		t.Run(kind, func(t *testing.T) {
			conformance.RunAlgorithm(t, stepAlgorithm{"none", 5}, func(t *testing.T) conformance.Harness {
				return conformance.Harness{Store: newStoreOf(t, kind)}
			})
		})
	}
}

// TestStepContractOnEveryStore runs a user's algorithm that breaks the
// step contract in one way on every store: each store must refuse the
// step with the same error, naming the algorithm, and keep the key's state
// as it was; the same algorithm without the defect decides alike on every
// store.
func TestStepContractOnEveryStore(t *testing.T) {
	const limit = 3
	var name string // the store under test, for messages
	ctx := context.Background()
	stores := everyStore(t)
	cases := []struct {
		defect string
		// run makes the calls up to the one that must be refused, and
		// returns its error.
		run  func(t *testing.T, lim *ratelimit.Limiter) error
		want string
		// after checks the key's state after the refusal.
		after func(t *testing.T, lim *ratelimit.Limiter)
	}{
		{"ttl0", func(t *testing.T, lim *ratelimit.Limiter) error {
			_, err := lim.Allow(ctx, "k")
			return err
		}, "TTL 0 µs", func(t *testing.T, lim *ratelimit.Limiter) {
			if d, err := lim.Peek(ctx, "k"); err != nil || d.Remaining != limit {
				t.Errorf("%s: lim.Peek(key) after a refused step = remaining %d, %v; want %d, nil (nothing written)", name, d.Remaining, err, limit)
			}
		}},
		{"peek", func(t *testing.T, lim *ratelimit.Limiter) error {
			_, err := lim.Peek(ctx, "k")
			return err
		}, "new state on a peek", func(t *testing.T, lim *ratelimit.Limiter) {
			for i := range limit {
				if d, err := lim.Allow(ctx, "k"); err != nil || !d.Allowed {
					t.Errorf("%s: lim.Allow(key) #%d after a refused peek = %s, %v; want allowed (the peek consumed nothing)", name, i+1, verdictOf(d.Allowed), err)
				}
			}
		}},
		{"retry0", func(t *testing.T, lim *ratelimit.Limiter) error {
			for range limit {
				if _, err := lim.Allow(ctx, "k"); err != nil {
					return fmt.Errorf("an admission: %w", err)
				}
			}
			_, err := lim.Allow(ctx, "k")
			return err
		}, "denied with retry-after 0 µs", nil},
		{"remaining", func(t *testing.T, lim *ratelimit.Limiter) error {
			_, err := lim.Allow(ctx, "k")
			return err
		}, "remaining 4 outside 0..limit 3", nil},
	}
	for _, c := range cases {
		t.Run(c.defect, func(t *testing.T) {
			alg := stepAlgorithm{c.defect, limit}
			var first string
			for _, name = range storeKinds {
				lim, err := ratelimit.New(stores[name], alg, ratelimit.WithName("contract"))
				if err != nil {
					t.Fatal(err)
				}
				err = c.run(t, lim)
				switch {
				case err == nil:
					t.Errorf("%s: %s step accepted, want an error wrapping ErrInvalidParams", name, c.defect)
					continue
				case !errors.Is(err, ratelimit.ErrInvalidParams) || !strings.Contains(err.Error(), "algorithm step_"+c.defect) || !strings.Contains(err.Error(), c.want):
					t.Errorf("%s: %s step: error %v, want ErrInvalidParams naming algorithm step_%s and saying %q", name, c.defect, err, c.defect, c.want)
				case first == "":
					first = strings.TrimPrefix(err.Error(), "an admission: ")
				case strings.TrimPrefix(err.Error(), "an admission: ") != first:
					t.Errorf("%s: error %q, memory's was %q (rule: identical on every store)", name, err, first)
				}
				if c.after != nil {
					c.after(t, lim)
				}
			}
		})
	}
	t.Run("correct", func(t *testing.T) {
		for name, s := range stores {
			lim, err := ratelimit.New(s, stepAlgorithm{"none", limit}, ratelimit.WithName("contract"))
			if err != nil {
				t.Fatal(err)
			}
			for i := range limit + 1 {
				d, err := lim.Allow(ctx, "k")
				if err != nil || d.Allowed != (i < limit) {
					t.Errorf("%s: lim.Allow(key) #%d = %s, %v; want %s", name, i+1, verdictOf(d.Allowed), err, verdictOf(i < limit))
				}
			}
		}
	})
}

func verdictOf(allowed bool) string {
	if allowed {
		return "allowed"
	}
	return "denied"
}

// TestBuiltinsKeepStepContract runs every built-in algorithm, alone and in
// a composite, through the Update path of the memory store on seeded
// random sequences of time steps (backwards too), costs and peeks: the
// limiter's step check must never refuse a built-in's step.
func TestBuiltinsKeepStepContract(t *testing.T) {
	var algs []algorithms.Algorithm
	for _, b := range forms.Builtins() {
		for _, n := range [][3]int64{{1, 1, 1}, {10, 1, 10}, {7, 60, 3}, {1000, 3600, 1000}} {
			algs = append(algs, b.New(n[0], time.Duration(n[1])*time.Second, n[2]))
		}
	}
	bs := forms.Builtins()
	algs = append(algs, algorithms.All(bs[0].New(5, time.Second, 5), bs[len(bs)-1].New(20, time.Minute, 20)))
	for _, alg := range algs {
		t.Run(fmt.Sprint(alg), func(t *testing.T) {
			c := clock.NewFake(time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC))
			lim, err := ratelimit.New(updateOnlyStore{memory.MustNew()}, alg, ratelimit.WithClock(c))
			if err != nil {
				t.Fatal(err)
			}
			r := rand.New(rand.NewPCG(1, uint64(len(alg.Name()))))
			for i := range 3000 {
				// Mostly small steps, some of a period, a few backwards.
				steps := []time.Duration{0, time.Millisecond, 100 * time.Millisecond, time.Second, time.Minute, -time.Second}
				c.Advance(steps[r.IntN(len(steps))] * time.Duration(1+r.IntN(3)))
				var err error
				if r.IntN(4) == 0 {
					_, err = lim.Peek(context.Background(), "k")
				} else {
					_, err = lim.AllowN(context.Background(), "k", 1+r.IntN(int(alg.MaxCost())))
				}
				if err != nil {
					t.Fatalf("request %d at %v: %v", i, c.Now(), err)
				}
			}
		})
	}
}

// updateOnlyStore hides a store's Decider, so the limiter uses Update.
type updateOnlyStore struct{ store.Store }

// TestBrokenStepIsNotTheStoresFault checks that a step refused for
// breaking the contract is the algorithm's fault, not the store's: FailOpen
// still denies it (admitting would hide the bug), and the circuit breaker
// does not open on it, so the limiter keeps asking the store.
func TestBrokenStepIsNotTheStoresFault(t *testing.T) {
	ctx := context.Background()
	lim, err := ratelimit.New(memory.MustNew(), stepAlgorithm{defect: "ttl0", limit: 3},
		ratelimit.WithFailurePolicy(ratelimit.FailOpen), ratelimit.WithCircuitBreaker(1, time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	for i := range 3 {
		d, err := lim.Allow(ctx, "k")
		if !errors.Is(err, ratelimit.ErrInvalidParams) || errors.Is(err, ratelimit.ErrCircuitOpen) || d.Allowed {
			t.Fatalf("lim.Allow(k) #%d with a step of TTL 0, FailOpen and a breaker of 1 failure = allowed %v, %v; want denied with ErrInvalidParams, circuit closed", i+1, d.Allowed, err)
		}
	}
}

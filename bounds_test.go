package ratelimit_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"
	"sync"
	"sync/atomic"
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
	"github.com/ratelimitkit/ratelimit/internal/testserver"
	"github.com/ratelimitkit/ratelimit/store"
	"github.com/ratelimitkit/ratelimit/store/dynamo"
	"github.com/ratelimitkit/ratelimit/store/postgres"
	rlredis "github.com/ratelimitkit/ratelimit/store/redis"
	"github.com/ratelimitkit/ratelimit/store/valkey"
)

// sharedStore is a fresh store on one of the shared test servers, and the
// deadline an impatient caller gives each call on it: short enough that most
// calls end by their caller's deadline, not by the store.
type sharedStore struct {
	name      string
	open      func(t *testing.T) store.Store
	impatient time.Duration
}

// sharedStores lists a fresh store on each server kind that has one.
func sharedStores() []sharedStore {
	return []sharedStore{
		{"redis", openRedis, 300 * time.Microsecond},
		{"valkey", openValkey, 300 * time.Microsecond},
		{"dynamodb", openDynamo, 2 * time.Millisecond},
		{"postgres", openPostgres, 300 * time.Microsecond},
	}
}

// uniqueName is a name no other test run uses, for prefixes and tables.
func uniqueName(what string) string {
	return fmt.Sprintf("%s_%d_%08x", what, time.Now().UnixNano(), rand.Uint32())
}

func openRedis(t *testing.T) store.Store {
	c := goredis.NewClient(&goredis.Options{Addr: testserver.RedisAddr(t), ContextTimeoutEnabled: true})
	t.Cleanup(func() { c.Close() })
	s, err := rlredis.New(c, rlredis.WithPrefix(uniqueName("blame")))
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func openValkey(t *testing.T) store.Store {
	c, err := vk.NewClient(vk.ClientOption{InitAddress: []string{testserver.ValkeyAddr(t)}, DisableCache: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	s, err := valkey.New(c, valkey.WithPrefix(uniqueName("blame")))
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// openDynamo opens a store on a dynalite of the test's own, through
// undropped: dynalite exits when a client drops a request it has not read
// to its end, as a caller whose deadline ends its request does.
func openDynamo(t *testing.T) store.Store {
	endpoint := "http://" + testserver.StartDynalite(t).Addr()
	client := dynamodb.NewFromConfig(aws.Config{
		Region:      "us-east-1",
		Credentials: credentials.NewStaticCredentialsProvider("test", "test", ""),
	}, func(o *dynamodb.Options) { o.BaseEndpoint = aws.String(endpoint) })
	return openDynamoOn(t, client, undropped{client, make(chan struct{}, 16)})
}

// undropped is a DynamoDB client whose requests run to their end whatever
// their caller's context does, while the call returns when its context
// ends, as the SDK's would: so dynalite never sees a dropped request.
// Requests with less than 100ms to live (the impatient callers') run at
// most cap(slots) at once, so that they do not bury dynalite; the others
// (the patient caller's) take no slot. Every request still reaches the
// server. (Only the impatient requests were kept whole once: on a loaded
// machine a patient request that outlived its second was dropped, dynalite
// exited, and the breaker rightly opened on the refused connections.)
type undropped struct {
	c     *dynamodb.Client
	slots chan struct{}
}

// do runs call detached from ctx's cancellation and returns its outcome,
// or ctx's error when ctx ends first.
func do[T any](u undropped, ctx context.Context, call func(context.Context) (T, error)) (T, error) {
	var zero T
	if ctx.Done() == nil {
		return call(ctx)
	}
	slot := false
	if dl, ok := ctx.Deadline(); ok && time.Until(dl) <= 100*time.Millisecond {
		select {
		case u.slots <- struct{}{}:
			slot = true
		case <-ctx.Done():
			return zero, ctx.Err()
		}
	}
	type result struct {
		v   T
		err error
	}
	ch := make(chan result, 1)
	go func() {
		defer func() {
			if slot {
				<-u.slots
			}
		}()
		v, err := call(context.WithoutCancel(ctx))
		ch <- result{v, err}
	}()
	select {
	case r := <-ch:
		return r.v, r.err
	case <-ctx.Done():
		return zero, ctx.Err()
	}
}

func (u undropped) GetItem(ctx context.Context, in *dynamodb.GetItemInput, opts ...func(*dynamodb.Options)) (*dynamodb.GetItemOutput, error) {
	return do(u, ctx, func(ctx context.Context) (*dynamodb.GetItemOutput, error) { return u.c.GetItem(ctx, in, opts...) })
}

func (u undropped) PutItem(ctx context.Context, in *dynamodb.PutItemInput, opts ...func(*dynamodb.Options)) (*dynamodb.PutItemOutput, error) {
	return do(u, ctx, func(ctx context.Context) (*dynamodb.PutItemOutput, error) { return u.c.PutItem(ctx, in, opts...) })
}

func (u undropped) DeleteItem(ctx context.Context, in *dynamodb.DeleteItemInput, opts ...func(*dynamodb.Options)) (*dynamodb.DeleteItemOutput, error) {
	return do(u, ctx, func(ctx context.Context) (*dynamodb.DeleteItemOutput, error) { return u.c.DeleteItem(ctx, in, opts...) })
}

// openDynamoOn opens a store on a fresh table of client, through c.
func openDynamoOn(t *testing.T, client *dynamodb.Client, c dynamo.Client) store.Store {
	table := strings.ReplaceAll(uniqueName("ratelimit-blame"), "_", "-")
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if _, err := dynamo.CreateTable(ctx, client, table); err != nil {
		t.Fatalf("dynamo.CreateTable(%s): %v", table, err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if _, err := client.DeleteTable(ctx, &dynamodb.DeleteTableInput{TableName: &table}); err != nil {
			t.Logf("deleting table %s: %v", table, err)
		}
	})
	s, err := dynamo.New(c, dynamo.WithTable(table))
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func openPostgres(t *testing.T) store.Store {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	pool, err := pgxpool.New(ctx, testserver.PostgresURL(t))
	if err != nil {
		t.Fatal(err)
	}
	table := uniqueName("rl_blame")
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if _, err := pool.Exec(ctx, "DROP TABLE IF EXISTS "+pgx.Identifier{table}.Sanitize()); err != nil {
			t.Logf("dropping table %s: %v", table, err)
		}
		for _, b := range forms.Builtins() {
			_, _ = pool.Exec(ctx, "DROP FUNCTION IF EXISTS "+pgx.Identifier{table + "_decide_" + b.Name}.Sanitize())
		}
		pool.Close()
	})
	s, err := postgres.New(pool, postgres.WithTable(table))
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Migrate(ctx); err != nil {
		t.Fatalf("store.Migrate: %v", err)
	}
	return s
}

// TestBreakerBlamesOnlyTheStore: callers that give up early on a healthy
// store must not open the circuit breaker for a patient caller of the same
// limiter. 63 callers whose deadlines (300µs; 2ms on DynamoDB) end most of
// their calls share the store, and its batches, with one caller who allows
// each call a second; the patient caller, limited to 100, must get exactly
// its 100 admissions from the store and every later request denied by it,
// none from the failure policy (FailOpen, which would admit them).
func TestBreakerBlamesOnlyTheStore(t *testing.T) {
	if testing.Short() {
		t.Skip("runs 64 callers against every server")
	}
	for _, st := range sharedStores() {
		t.Run(st.name, func(t *testing.T) {
			store := st.open(t)
			lim, err := ratelimit.New(store, algorithms.FixedWindow(100, time.Hour),
				ratelimit.WithFailurePolicy(ratelimit.FailOpen),
				ratelimit.WithCircuitBreaker(3, time.Hour))
			if err != nil {
				t.Fatal(err)
			}
			stop := make(chan struct{})
			var wg sync.WaitGroup
			var early, calls atomic.Int64
			for i := range 63 {
				wg.Go(func() {
					key := fmt.Sprintf("impatient-%d", i)
					for {
						select {
						case <-stop:
							return
						default:
						}
						ctx, cancel := context.WithTimeout(context.Background(), st.impatient)
						_, err := lim.Allow(ctx, key)
						cancel()
						calls.Add(1)
						if errors.Is(err, context.DeadlineExceeded) {
							early.Add(1)
						}
					}
				})
			}
			// Let the impatient callers fill the store's queues first.
			time.Sleep(20 * time.Millisecond)
			const requests = 200
			// The fixed window is the clock's hour: a run across the top of
			// the hour may admit a second 100 in the new window.
			hour := time.Now().Truncate(time.Hour)
			var fromStore, admitted, policy, late int
			var lastErr error
			deadline := time.Now().Add(60 * time.Second) // the test's own bound
			for fromStore+policy < requests && time.Now().Before(deadline) {
				ctx, cancel := context.WithTimeout(context.Background(), time.Second)
				dl, _ := ctx.Deadline()
				d, err := lim.Allow(ctx, "patient")
				// The caller's deadline has passed on the monotonic clock
				// (its context may say so a moment later).
				ownDeadline := ctx.Err() != nil || !time.Now().Before(dl)
				cancel()
				switch {
				case d.Source == ratelimit.SourceStore && err == nil:
					fromStore++
					if d.Allowed {
						admitted++
					}
				case ownDeadline && !errors.Is(err, ratelimit.ErrCircuitOpen):
					// The patient caller's own second ran out (a loaded
					// machine): not the breaker's doing; ask again. The
					// store may have counted the request it never saw.
					late++
				default:
					policy++
					lastErr = err
				}
			}
			close(stop)
			wg.Wait()
			t.Logf("%s: impatient callers made %d calls, %d ended by their own deadline; the patient caller's own deadline ended %d calls", st.name, calls.Load(), early.Load(), late)
			// The breaker's blame: no answer from the failure policy, and
			// never more than the limit. On a machine so loaded that the
			// patient caller did not get its answers within the test's
			// bound, the answers it got are checked alike.
			limit := 100
			if !time.Now().Truncate(time.Hour).Equal(hour) {
				limit = 200
				t.Logf("%s: the run crossed the top of the hour: up to 200 admitted", st.name)
			}
			if policy != 0 || admitted > limit || fromStore == requests && admitted < 100-late {
				t.Errorf("patient caller of lim.Allow (limit 100) beside 63 callers with %v deadlines: %d of %d answers from the store, %d admitted by it, %d from elsewhere (last error %v), %d ended by its own deadline; want all %d from the store, 100 admitted (less those its own deadline hid)",
					st.impatient, fromStore, requests, admitted, policy, lastErr, late, requests)
			}
			if fromStore < requests {
				t.Logf("%s: the patient caller got %d of its %d answers within the test's bound (a loaded machine)", st.name, fromStore, requests)
				if fromStore < 20 {
					t.Errorf("the patient caller got only %d answers from the store within the test's bound: the test did not test", fromStore)
				}
			}
			if early.Load() == 0 {
				t.Errorf("no impatient call ended by its deadline: the test did not test")
			}
		})
	}
}

// TestStoreTimeoutKeepsTheStoresError: WithStoreTimeout reports a budget
// that ran out as such, and otherwise returns the store's own error as it
// is: a refused connection is not a timeout.
func TestStoreTimeoutKeepsTheStoresError(t *testing.T) {
	srv, store, _ := privateRedis(t, true)
	lim, err := ratelimit.New(store, algorithms.GCRA(10, time.Second, 10), ratelimit.WithStoreTimeout(10*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	srv.Stop()
	_, err = lim.Allow(context.Background(), "k")
	if err == nil || strings.Contains(err.Error(), "budget") || errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("lim.Allow on a stopped server with a 10s budget: error %v, want the refused connection's error, not a budget's", err)
	}

	srv.Start()
	srv.Freeze()
	defer srv.Thaw()
	lim, err = ratelimit.New(store, algorithms.GCRA(10, time.Second, 10), ratelimit.WithStoreTimeout(100*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	_, err = lim.Allow(context.Background(), "k")
	if err == nil || !strings.Contains(err.Error(), "exceeded its 100ms budget") || !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("lim.Allow on a frozen server with a 100ms budget: error %v, want the budget's, wrapping context.DeadlineExceeded", err)
	}
}

// TestDefaultStoreBudget: a limiter with no options bounds each call to a
// store that hangs (a frozen server) by DefaultStoreTimeout; a caller's
// earlier deadline still wins and is not reported as the budget's; and
// WithStoreTimeout(0) turns the budget off.
func TestDefaultStoreBudget(t *testing.T) {
	srv, store, _ := privateRedis(t, false)
	alg := algorithms.GCRA(10, time.Second, 10)
	lim, err := ratelimit.New(store, alg)
	if err != nil {
		t.Fatal(err)
	}
	unbounded, err := ratelimit.New(store, alg, ratelimit.WithStoreTimeout(0))
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if d, err := lim.Allow(ctx, "k"); err != nil || !d.Allowed {
		t.Fatalf("lim.Allow on a healthy server = %+v, %v; want admitted", d, err)
	}
	srv.Freeze()
	defer srv.Thaw()
	const slack = 500 * time.Millisecond // a loaded machine under -race

	start := time.Now()
	d, err := lim.Allow(ctx, "k")
	took := time.Since(start)
	if took < ratelimit.DefaultStoreTimeout-10*time.Millisecond || took > ratelimit.DefaultStoreTimeout+slack {
		t.Errorf("lim.Allow with no options on a frozen server took %v, want about DefaultStoreTimeout (%v)", took, ratelimit.DefaultStoreTimeout)
	}
	if d.Allowed || d.Source != ratelimit.SourceFailurePolicy || !errors.Is(err, context.DeadlineExceeded) || !strings.Contains(err.Error(), "budget") {
		t.Errorf("lim.Allow with no options on a frozen server = %+v, %v; want the failure policy's denial and the budget's error", d, err)
	}

	// The caller's own, earlier deadline ends the call; not the budget.
	short, cancel := context.WithTimeout(ctx, 200*time.Millisecond)
	start = time.Now()
	_, err = lim.Allow(short, "k")
	took = time.Since(start)
	cancel()
	if took > 200*time.Millisecond+slack || !errors.Is(err, context.DeadlineExceeded) || strings.Contains(err.Error(), "budget") {
		t.Errorf("lim.Allow with a 200ms context on a frozen server took %v, error %v; want about 200ms and the context's error, not the budget's", took, err)
	}

	// Without a budget, the caller's deadline is the only bound.
	long, cancel := context.WithTimeout(ctx, ratelimit.DefaultStoreTimeout+700*time.Millisecond)
	start = time.Now()
	_, err = unbounded.Allow(long, "k")
	took = time.Since(start)
	cancel()
	if took < ratelimit.DefaultStoreTimeout+600*time.Millisecond || err == nil || strings.Contains(err.Error(), "budget") {
		t.Errorf("WithStoreTimeout(0): lim.Allow with a %v context on a frozen server took %v, error %v; want the whole context and its error", ratelimit.DefaultStoreTimeout+700*time.Millisecond, took, err)
	}
}

// BenchmarkStoreBudget measures what the default store budget costs a
// decision on Redis: the same limiter with the budget off and on.
func BenchmarkStoreBudget(b *testing.B) {
	c := goredis.NewClient(&goredis.Options{Addr: testserver.RedisAddr(b), ContextTimeoutEnabled: true})
	defer c.Close()
	store, err := rlredis.New(c, rlredis.WithPrefix(uniqueName("budget")))
	if err != nil {
		b.Fatal(err)
	}
	for _, bc := range []struct {
		name string
		opts []ratelimit.Option
	}{
		{"off", []ratelimit.Option{ratelimit.WithStoreTimeout(0)}},
		{"default", nil},
	} {
		b.Run(bc.name, func(b *testing.B) {
			lim, err := ratelimit.New(store, algorithms.GCRA(1e9, time.Second, 1e9), bc.opts...)
			if err != nil {
				b.Fatal(err)
			}
			b.ReportAllocs()
			b.RunParallel(func(pb *testing.PB) {
				ctx := context.Background()
				for pb.Next() {
					if _, err := lim.Allow(ctx, "k"); err != nil {
						b.Error(err)
						return
					}
				}
			})
		})
	}
}

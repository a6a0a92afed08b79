package dynamo_test

import (
	"context"
	"errors"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/ratelimitkit/ratelimit"
	"github.com/ratelimitkit/ratelimit/algorithms"
	"github.com/ratelimitkit/ratelimit/clock"
	"github.com/ratelimitkit/ratelimit/internal/testserver"
	"github.com/ratelimitkit/ratelimit/store"
	"github.com/ratelimitkit/ratelimit/store/dynamo"
)

var epoch = time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)

// setup returns a counted store on a fresh table and a limiter on a fake
// clock.
func setup(t *testing.T, alg algorithms.Algorithm, opts ...dynamo.Option) (*dynamo.Store, *counter, *ratelimit.Limiter, *clock.Fake, *dynamodb.Client, string) {
	t.Helper()
	client := newClient(testserver.DynamoDBEndpoint(t))
	table := newTable(t, client)
	c := &counter{Client: client}
	s, err := dynamo.New(c, append([]dynamo.Option{dynamo.WithTable(table)}, opts...)...)
	if err != nil {
		t.Fatalf("dynamo.New: %v", err)
	}
	fc := clock.NewFake(epoch)
	lim, err := ratelimit.New(s, alg, ratelimit.WithClock(fc), ratelimit.WithName("test"))
	if err != nil {
		t.Fatalf("ratelimit.New: %v", err)
	}
	return s, c, lim, fc, client, table
}

// TestRequestCounts checks the store's request budget: a new key costs one
// write, a known key one write per decision, and a Peek on a key the
// process has never seen one read.
func TestRequestCounts(t *testing.T) {
	_, c, lim, fc, _, _ := setup(t, algorithms.TokenBucket(1000, time.Second, 1000))
	ctx := context.Background()
	if _, err := lim.Allow(ctx, "new"); err != nil {
		t.Fatal(err)
	}
	if got := c.total(); got != 1 || c.puts.Load() != 1 {
		t.Errorf("first lim.Allow on a new key made %d requests (%d writes), want 1 write", got, c.puts.Load())
	}
	c.reset()
	const n = 50
	for i := 0; i < n; i++ {
		fc.Advance(time.Millisecond)
		if d, err := lim.Allow(ctx, "new"); err != nil || !d.Allowed {
			t.Fatalf("lim.Allow #%d = %v, %v; want allowed", i, d.Allowed, err)
		}
	}
	if got := c.total(); got != n || c.puts.Load() != n {
		t.Errorf("%d lim.Allow on a warm key made %d requests (%d writes, %d reads), want exactly %d writes", n, got, c.puts.Load(), c.gets.Load(), n)
	}
	c.reset()
	if _, err := lim.Peek(ctx, "new"); err != nil {
		t.Fatal(err)
	}
	if got := c.total(); got != 0 {
		t.Errorf("lim.Peek on a key the store knows made %d requests, want 0", got)
	}
	if _, err := lim.Peek(ctx, "unseen"); err != nil {
		t.Fatal(err)
	}
	if got := c.gets.Load(); got != 1 || c.total() != 1 {
		t.Errorf("lim.Peek on an unseen key made %d requests (%d reads), want 1 read", c.total(), got)
	}
}

// TestColdKeyOneReadMore checks that a process that does not know a key
// holding state (written by another process) pays at most one request more:
// the failed guess returns the item (or, on dynalite, a read follows).
func TestColdKeyOneReadMore(t *testing.T) {
	s1, c1, lim1, fc, _, table := setup(t, algorithms.FixedWindow(10, time.Second))
	ctx := context.Background()
	for i := 0; i < 3; i++ {
		if _, err := lim1.Allow(ctx, "shared"); err != nil {
			t.Fatal(err)
		}
	}
	c2 := &counter{Client: c1.Client}
	s2, err := dynamo.New(c2, dynamo.WithTable(table))
	if err != nil {
		t.Fatal(err)
	}
	lim2, err := ratelimit.New(s2, algorithms.FixedWindow(10, time.Second), ratelimit.WithClock(fc), ratelimit.WithName("test"))
	if err != nil {
		t.Fatal(err)
	}
	d, err := lim2.Allow(ctx, "shared")
	if err != nil || !d.Allowed || d.Remaining != 6 {
		t.Fatalf("second process lim.Allow = %+v, %v; want allowed with remaining 6", d, err)
	}
	// A failed conditional create, then either the write (the failure
	// returned the item) or a consistent read and the write (dynalite).
	if got := c2.total(); got > 3 {
		t.Errorf("a cold decision on a key with state made %d requests (%d reads, %d writes), want at most 3", got, c2.gets.Load(), c2.puts.Load())
	}
	t.Logf("cold decision on an existing key: %d reads, %d writes", c2.gets.Load(), c2.puts.Load())
	// Once the store knows whether the server returns the item with a
	// failed condition, a cold decision costs at most two requests: a
	// failed create that returns the item and the write (DynamoDB), or a
	// read and the write (dynalite).
	for i := 0; i < 3; i++ {
		if _, err := lim1.Allow(ctx, "other"); err != nil {
			t.Fatal(err)
		}
	}
	c2.reset()
	d, err = lim2.Allow(ctx, "other")
	if err != nil || !d.Allowed || d.Remaining != 6 {
		t.Fatalf("second process lim.Allow on another key = %+v, %v; want allowed with remaining 6", d, err)
	}
	if got := c2.total(); got > 2 {
		t.Errorf("a later cold decision on a key with state made %d requests (%d reads, %d writes), want at most 2", got, c2.gets.Load(), c2.puts.Load())
	}
	// Now the first process's cache is stale: its next write fails and
	// recovers from the returned (or read) item.
	d, err = lim1.Allow(ctx, "shared")
	if err != nil || !d.Allowed || d.Remaining != 5 {
		t.Fatalf("first process lim.Allow after the second wrote = %+v, %v; want allowed with remaining 5", d, err)
	}
	_ = s1
}

// TestHotKeySerialised checks that concurrent decisions on one key in one
// process never race each other to the table: no conditional write fails,
// the table sees at most one write per decision, and exactly the limit is
// admitted.
func TestHotKeySerialised(t *testing.T) {
	const limit, workers, each = 100, 16, 20
	_, c, lim, _, _, _ := setup(t, algorithms.FixedWindow(limit, time.Minute))
	ctx := context.Background()
	var wg sync.WaitGroup
	var mu sync.Mutex
	admitted := 0
	for w := 0; w < workers; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < each; i++ {
				d, err := lim.Allow(ctx, "hot")
				if err != nil {
					t.Errorf("lim.Allow: %v", err)
					return
				}
				if d.Allowed {
					mu.Lock()
					admitted++
					mu.Unlock()
				}
			}
		}()
	}
	wg.Wait()
	if admitted != limit {
		t.Errorf("%d×%d lim.Allow on one key admitted %d, want exactly %d", workers, each, admitted, limit)
	}
	decisions := int64(workers * each)
	if c.gets.Load() != 0 {
		t.Errorf("hot key: %d reads, want 0 (one process never loses a race to itself)", c.gets.Load())
	}
	if c.puts.Load() > limit {
		t.Errorf("hot key: %d writes for %d decisions of which %d admitted, want at most %d (denials write nothing)", c.puts.Load(), decisions, limit, limit)
	}
	t.Logf("hot key: %d decisions, %d writes, %d reads", decisions, c.puts.Load(), c.gets.Load())
}

// TestTwoProcesses checks exact admission when two stores (as two
// processes would) share a key, so that conditional writes do conflict.
func TestTwoProcesses(t *testing.T) {
	const limit = 60
	alg := algorithms.FixedWindow(limit, time.Minute)
	_, c1, lim1, fc, _, table := setup(t, alg)
	c2 := &counter{Client: c1.Client}
	s2, err := dynamo.New(c2, dynamo.WithTable(table), dynamo.WithMaxConflicts(100))
	if err != nil {
		t.Fatal(err)
	}
	lim2, err := ratelimit.New(s2, alg, ratelimit.WithClock(fc), ratelimit.WithName("test"))
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	var mu sync.Mutex
	admitted := 0
	for w := 0; w < 16; w++ {
		lim := lim1
		if w%2 == 1 {
			lim = lim2
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < 8; i++ {
				d, err := lim.Allow(context.Background(), "contended")
				if err != nil {
					t.Errorf("lim.Allow: %v", err)
					return
				}
				if d.Allowed {
					mu.Lock()
					admitted++
					mu.Unlock()
				}
			}
		}()
	}
	wg.Wait()
	if admitted != limit {
		t.Errorf("two processes × 8 goroutines × 8 lim.Allow admitted %d, want exactly %d", admitted, limit)
	}
	t.Logf("process 1: %d writes %d reads; process 2: %d writes %d reads", c1.puts.Load(), c1.gets.Load(), c2.puts.Load(), c2.gets.Load())
}

// putRaw writes an item directly, as another process (or an old one) would.
func putRaw(t *testing.T, client *dynamodb.Client, table string, pk []byte, state []byte, version, expires int64) {
	t.Helper()
	_, err := client.PutItem(context.Background(), &dynamodb.PutItemInput{
		TableName: &table,
		Item: map[string]types.AttributeValue{
			dynamo.AttrKey:     &types.AttributeValueMemberB{Value: pk},
			dynamo.AttrState:   &types.AttributeValueMemberB{Value: state},
			dynamo.AttrVersion: &types.AttributeValueMemberN{Value: strconv.FormatInt(version, 10)},
			dynamo.AttrExpires: &types.AttributeValueMemberN{Value: strconv.FormatInt(expires, 10)},
			dynamo.AttrTTL:     &types.AttributeValueMemberN{Value: strconv.FormatInt(expires/1e6+1, 10)},
		},
	})
	if err != nil {
		t.Fatalf("PutItem: %v", err)
	}
}

// TestExpiredItemIsAbsent writes an item whose expiry has passed on the
// limiter's clock but which DynamoDB still holds, as its TTL deletes late,
// and checks that every path treats it as absent: a Peek (read), a decision
// on a key the process does not know (conditional create over the expired
// item), and one on a key it knows.
func TestExpiredItemIsAbsent(t *testing.T) {
	alg := algorithms.FixedWindow(5, time.Second)
	s, _, lim, fc, client, table := setup(t, alg)
	ctx := context.Background()
	now := fc.Now().UnixMicro()
	// An exhausted window that ended 1µs ago.
	exhausted, err := alg.Decide(nil, algorithms.Request{Now: now - 1_000_000, Cost: 5})
	if err != nil {
		t.Fatal(err)
	}
	for _, id := range []string{"peek", "allow"} {
		pk, err := s.EncodeKey(store.Key{Namespace: lim.Namespace(), ID: id})
		if err != nil {
			t.Fatal(err)
		}
		putRaw(t, client, table, pk, exhausted.Next, 42, now-1_000_000+exhausted.TTL)
	}
	d, err := lim.Peek(ctx, "peek")
	if err != nil || !d.Allowed || d.Remaining != 5 {
		t.Errorf("lim.Peek on an expired item = %+v, %v; want allowed with remaining 5 (rule: an item past its expiry is absent)", d, err)
	}
	d, err = lim.AllowN(ctx, "allow", 5)
	if err != nil || !d.Allowed || d.Remaining != 0 {
		t.Errorf("lim.AllowN(5) on an expired item = %+v, %v; want allowed with remaining 0", d, err)
	}
	d, err = lim.Allow(ctx, "peek")
	if err != nil || !d.Allowed || d.Remaining != 4 {
		t.Errorf("lim.Allow on an expired item the store has read = %+v, %v; want allowed with remaining 4", d, err)
	}
	// A live item is not absent.
	fresh, err := alg.Decide(nil, algorithms.Request{Now: now, Cost: 5})
	if err != nil {
		t.Fatal(err)
	}
	pk, _ := s.EncodeKey(store.Key{Namespace: lim.Namespace(), ID: "live"})
	putRaw(t, client, table, pk, fresh.Next, 7, now+fresh.TTL)
	d, err = lim.Allow(ctx, "live")
	if err != nil || d.Allowed {
		t.Errorf("lim.Allow on a live exhausted item = %+v, %v; want denied", d, err)
	}
}

// TestKeys checks key encoding limits: an oversized key is a clear error
// before any request, and binary IDs round-trip.
func TestKeys(t *testing.T) {
	client := newClient(testserver.DynamoDBEndpoint(t))
	table := newTable(t, client)
	c := &counter{Client: client}
	s, err := dynamo.New(c, dynamo.WithTable(table), dynamo.WithKeyPrefix("app1/"))
	if err != nil {
		t.Fatal(err)
	}
	long := store.Key{Namespace: "n:a", ID: strings.Repeat("x", dynamo.MaxKeyBytes)}
	err = s.Update(context.Background(), long, 1, func(cur []byte, now int64) ([]byte, int64, error) { return []byte("x"), 1, nil })
	if !errors.Is(err, ratelimit.ErrInvalidKey) || !strings.HasPrefix(err.Error(), "ratelimit: invalid key: dynamo:") {
		t.Errorf("Update with a %d-byte key = %v, want ErrInvalidKey from dynamo", len(long.ID), err)
	}
	if err := s.Delete(context.Background(), long); !errors.Is(err, ratelimit.ErrInvalidKey) {
		t.Errorf("Delete with a %d-byte key = %v, want ErrInvalidKey", len(long.ID), err)
	}
	if c.total() != 0 {
		t.Errorf("oversized keys made %d requests, want 0", c.total())
	}
	pk, err := s.EncodeKey(store.Key{Namespace: "n:a", ID: "\x00\xff:{}"})
	if want := "\x00app1/\x00n:a:\x00\xff:{}"; err != nil || string(pk) != want {
		t.Errorf("EncodeKey = %q, %v; want %q", pk, err, want)
	}
}

// TestCreateTableIdempotent checks that CreateTable on an existing table
// succeeds and reports the TTL state.
func TestCreateTableIdempotent(t *testing.T) {
	client := newClient(testserver.DynamoDBEndpoint(t))
	table := newTable(t, client)
	st, err := dynamo.CreateTable(context.Background(), client, table)
	if err != nil {
		t.Fatalf("second CreateTable: %v", err)
	}
	if st.Created {
		t.Errorf("second CreateTable reports Created")
	}
	switch st.TTL {
	case dynamo.TTLEnabled, dynamo.TTLEnabling, dynamo.TTLUnsupported:
	default:
		t.Errorf("CreateTable TTL = %q", st.TTL)
	}
	t.Logf("TTL on this endpoint: %s", st.TTL)
	// A table with another layout is refused.
	other := table + "-other"
	_, err = client.CreateTable(context.Background(), &dynamodb.CreateTableInput{
		TableName:            &other,
		BillingMode:          types.BillingModePayPerRequest,
		AttributeDefinitions: []types.AttributeDefinition{{AttributeName: aws.String("id"), AttributeType: types.ScalarAttributeTypeS}},
		KeySchema:            []types.KeySchemaElement{{AttributeName: aws.String("id"), KeyType: types.KeyTypeHash}},
	})
	if err != nil {
		t.Fatal(err)
	}
	defer client.DeleteTable(context.Background(), &dynamodb.DeleteTableInput{TableName: &other})
	if _, err := dynamo.CreateTable(context.Background(), client, other); err == nil || !strings.Contains(err.Error(), "layout") {
		t.Errorf("CreateTable on a table with another key = %v, want a layout error", err)
	}
}

// TestQueuedWaitRespectsContext holds a key's queue with a slow decision
// and checks that a call waiting behind it gives up when its context ends,
// without storing anything.
func TestQueuedWaitRespectsContext(t *testing.T) {
	s, c, _, _, _, _ := setup(t, algorithms.GCRA(1, time.Second, 1))
	key := store.Key{Namespace: "q:gcra", ID: "held"}
	release := make(chan struct{})
	entered := make(chan struct{})
	done := make(chan error, 1)
	go func() {
		done <- s.Update(context.Background(), key, 1, func(cur []byte, now int64) ([]byte, int64, error) {
			close(entered)
			<-release
			return []byte("first"), 1e9, nil
		})
	}()
	<-entered
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	start := time.Now()
	called := false
	err := s.Update(ctx, key, 1, func(cur []byte, now int64) ([]byte, int64, error) {
		called = true
		return []byte("second"), 1e9, nil
	})
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("queued Update with a 50ms deadline = %v, want DeadlineExceeded", err)
	}
	if waited := time.Since(start); waited > time.Second {
		t.Errorf("queued Update returned after %v, want about 50ms", waited)
	}
	close(release)
	if err := <-done; err != nil {
		t.Fatalf("first Update: %v", err)
	}
	if called {
		t.Errorf("the withdrawn call's fn ran")
	}
	var got []byte
	if err := s.Update(context.Background(), key, 2, func(cur []byte, now int64) ([]byte, int64, error) {
		got = append([]byte(nil), cur...)
		return nil, 0, nil
	}); err != nil {
		t.Fatal(err)
	}
	if string(got) != "first" {
		t.Errorf("state after the withdrawn call = %q, want %q", got, "first")
	}
	_ = c
}

// TestFnErrorStoresNothing checks that an fn error is returned unchanged
// and stores nothing, also when batched with calls that do store.
func TestFnErrorStoresNothing(t *testing.T) {
	s, c, _, _, _, _ := setup(t, algorithms.GCRA(1, time.Second, 1))
	key := store.Key{Namespace: "e:gcra", ID: "k"}
	boom := errors.New("boom")
	err := s.Update(context.Background(), key, 1, func(cur []byte, now int64) ([]byte, int64, error) { return []byte("x"), 5, boom })
	if err != boom {
		t.Errorf("Update = %v, want fn's error unchanged", err)
	}
	if c.puts.Load() != 0 {
		t.Errorf("a failed fn led to %d writes", c.puts.Load())
	}
	err = s.Update(context.Background(), key, 1, func(cur []byte, now int64) ([]byte, int64, error) { return []byte("x"), 0, nil })
	if err == nil || !strings.HasPrefix(err.Error(), "dynamo:") {
		t.Errorf("Update with ttl 0 = %v, want a dynamo error", err)
	}
	big := make([]byte, dynamo.MaxStateBytes+1)
	err = s.Update(context.Background(), key, 1, func(cur []byte, now int64) ([]byte, int64, error) { return big, 1e6, nil })
	if err == nil || !strings.Contains(err.Error(), "exceeds") {
		t.Errorf("Update with a %d-byte state = %v, want a size error", len(big), err)
	}
	if c.puts.Load() != 0 {
		t.Errorf("failed updates led to %d writes", c.puts.Load())
	}
	// The largest state fits.
	err = s.Update(context.Background(), key, 1, func(cur []byte, now int64) ([]byte, int64, error) { return big[:dynamo.MaxStateBytes], 1e6, nil })
	if err != nil {
		t.Errorf("Update with a %d-byte state: %v", dynamo.MaxStateBytes, err)
	}
}

var _ = aws.String

// TestFnPanic checks that a panicking fn panics in its caller's goroutine,
// not in the store's worker, and leaves the calls batched with it alone.
func TestFnPanic(t *testing.T) {
	s, _, _, _, _, _ := setup(t, algorithms.GCRA(1, time.Second, 1))
	key := store.Key{Namespace: "p:gcra", ID: "k"}
	func() {
		defer func() {
			if r := recover(); r != "boom" {
				t.Errorf("recover() = %v, want the fn's panic value", r)
			}
		}()
		s.Update(context.Background(), key, 1, func(cur []byte, now int64) ([]byte, int64, error) { panic("boom") })
		t.Errorf("Update returned after fn panicked")
	}()
	if err := s.Update(context.Background(), key, 1, func(cur []byte, now int64) ([]byte, int64, error) { return []byte("ok"), 1e6, nil }); err != nil {
		t.Errorf("Update after a panic: %v", err)
	}
}

// TestCacheSizes checks that decisions stay exact with the cache off and
// with a cache far smaller than the keys in use (evicting all the time):
// the cache only saves requests.
func TestCacheSizes(t *testing.T) {
	for _, size := range []int{0, 64} {
		t.Run(strconv.Itoa(size), func(t *testing.T) {
			_, c, lim, fc, _, _ := setup(t, algorithms.FixedWindow(3, time.Minute), dynamo.WithCacheSize(size))
			ctx := context.Background()
			for round := 0; round < 4; round++ {
				for k := 0; k < 100; k++ {
					d, err := lim.Allow(ctx, "key-"+strconv.Itoa(k))
					if err != nil {
						t.Fatal(err)
					}
					if want := round < 3; d.Allowed != want || (want && d.Remaining != 2-round) {
						t.Fatalf("cache size %d: round %d key %d: lim.Allow = %+v, want allowed=%v remaining %d", size, round, k, d, want, 2-round)
					}
				}
				fc.Advance(time.Millisecond)
			}
			t.Logf("cache size %d: 400 decisions, %d reads, %d writes", size, c.gets.Load(), c.puts.Load())
		})
	}
}

// TestKeyPrefixesKeepApplicationsApart runs two applications on one table
// whose prefix and limiter name make the same bytes when run together
// ("app1" + "2x" and "app12" + "x"): exhausting one must leave the other
// untouched.
func TestKeyPrefixesKeepApplicationsApart(t *testing.T) {
	client := newClient(testserver.DynamoDBEndpoint(t))
	table := newTable(t, client)
	ctx := context.Background()
	fc := clock.NewFake(epoch)
	alg := algorithms.FixedWindow(2, time.Minute)
	var lims []*ratelimit.Limiter
	for _, app := range []struct{ prefix, name string }{{"app1", "2x"}, {"app12", "x"}} {
		s, err := dynamo.New(client, dynamo.WithTable(table), dynamo.WithKeyPrefix(app.prefix))
		if err != nil {
			t.Fatal(err)
		}
		lim, err := ratelimit.New(s, alg, ratelimit.WithClock(fc), ratelimit.WithName(app.name))
		if err != nil {
			t.Fatal(err)
		}
		lims = append(lims, lim)
	}
	for range 2 {
		if d, err := lims[0].Allow(ctx, "user"); err != nil || !d.Allowed {
			t.Fatalf("first application: lim.Allow = %v, %v; want allowed", d.Allowed, err)
		}
	}
	if d, err := lims[1].Allow(ctx, "user"); err != nil || !d.Allowed || d.Remaining != 1 {
		t.Errorf("second application after the first used its limit: lim.Allow = %+v, %v; want allowed with remaining 1 (state of its own)", d, err)
	}
}

package dynamo_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/ratelimitkit/ratelimit/conformance"
	"github.com/ratelimitkit/ratelimit/internal/testserver"
	"github.com/ratelimitkit/ratelimit/store"
	"github.com/ratelimitkit/ratelimit/store/dynamo"
)

// newClient returns a client for endpoint with test credentials.
func newClient(endpoint string, opts ...func(*dynamodb.Options)) *dynamodb.Client {
	cfg := aws.Config{
		Region:      "us-east-1",
		Credentials: credentials.NewStaticCredentialsProvider("test", "test", ""),
	}
	return dynamodb.NewFromConfig(cfg, append([]func(*dynamodb.Options){func(o *dynamodb.Options) {
		o.BaseEndpoint = aws.String(endpoint)
	}}, opts...)...)
}

// counter wraps a real client and counts the requests the store makes.
// It is instrumentation, not a mock: every call reaches the server.
type counter struct {
	dynamo.Client
	gets, puts, deletes atomic.Int64
}

func (c *counter) GetItem(ctx context.Context, in *dynamodb.GetItemInput, opts ...func(*dynamodb.Options)) (*dynamodb.GetItemOutput, error) {
	c.gets.Add(1)
	return c.Client.GetItem(ctx, in, opts...)
}

func (c *counter) PutItem(ctx context.Context, in *dynamodb.PutItemInput, opts ...func(*dynamodb.Options)) (*dynamodb.PutItemOutput, error) {
	c.puts.Add(1)
	return c.Client.PutItem(ctx, in, opts...)
}

func (c *counter) DeleteItem(ctx context.Context, in *dynamodb.DeleteItemInput, opts ...func(*dynamodb.Options)) (*dynamodb.DeleteItemOutput, error) {
	c.deletes.Add(1)
	return c.Client.DeleteItem(ctx, in, opts...)
}

func (c *counter) total() int64 { return c.gets.Load() + c.puts.Load() + c.deletes.Load() }

func (c *counter) reset() {
	c.gets.Store(0)
	c.puts.Store(0)
	c.deletes.Store(0)
}

// newTable creates a fresh table on client and deletes it when the test
// ends.
func newTable(t testing.TB, client *dynamodb.Client) string {
	t.Helper()
	name := fmt.Sprintf("ratelimit-test-%d-%08x", time.Now().UnixNano(), rand.Uint32())
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if _, err := dynamo.CreateTable(ctx, client, name); err != nil {
		t.Fatalf("dynamo.CreateTable(%s): %v", name, err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if _, err := client.DeleteTable(ctx, &dynamodb.DeleteTableInput{TableName: &name}); err != nil {
			t.Logf("deleting table %s: %v", name, err)
		}
	})
	return name
}

// scanExpiries lists every item of table with its expiry attribute, and
// reports as never expiring an item that lacks the expiry or the TTL
// attribute, or whose TTL attribute is before its expiry.
func scanExpiries(ctx context.Context, client *dynamodb.Client, table string) ([]conformance.Expiry, error) {
	var list []conformance.Expiry
	p := dynamodb.NewScanPaginator(client, &dynamodb.ScanInput{TableName: &table, ConsistentRead: aws.Bool(true)})
	for p.HasMorePages() {
		page, err := p.NextPage(ctx)
		if err != nil {
			return nil, err
		}
		for _, it := range page.Items {
			e := conformance.Expiry{Key: fmt.Sprintf("%q", keyOf(it))}
			exp, okExp := number(it, dynamo.AttrExpires)
			ttl, okTTL := number(it, dynamo.AttrTTL)
			if !okExp || !okTTL || ttl*1e6 < exp {
				e.Never = true
			} else {
				e.At = time.UnixMicro(exp)
			}
			list = append(list, e)
		}
	}
	return list, nil
}

func keyOf(it map[string]types.AttributeValue) string {
	if b, ok := it[dynamo.AttrKey].(*types.AttributeValueMemberB); ok {
		return string(b.Value)
	}
	return "<no key>"
}

func number(it map[string]types.AttributeValue, name string) (int64, bool) {
	n, ok := it[name].(*types.AttributeValueMemberN)
	if !ok {
		return 0, false
	}
	v, err := strconv.ParseInt(n.Value, 10, 64)
	return v, err == nil
}

// readState reads key's item from table with a consistent read: the
// state Update wrote and its expiry, for Harness.State.
func readState(ctx context.Context, client *dynamodb.Client, table string, s *dynamo.Store, key store.Key) ([]byte, int64, error) {
	pk, err := s.EncodeKey(key)
	if err != nil {
		return nil, 0, err
	}
	out, err := client.GetItem(ctx, &dynamodb.GetItemInput{
		TableName:      &table,
		Key:            map[string]types.AttributeValue{dynamo.AttrKey: &types.AttributeValueMemberB{Value: pk}},
		ConsistentRead: aws.Bool(true),
	})
	if err != nil || out.Item == nil {
		return nil, 0, err
	}
	state, _ := out.Item[dynamo.AttrState].(*types.AttributeValueMemberB)
	exp, ok := number(out.Item, dynamo.AttrExpires)
	if state == nil || !ok {
		return nil, 0, fmt.Errorf("item %q lacks its state or expiry: %v", pk, out.Item)
	}
	return state.Value, exp, nil
}

func TestConformance(t *testing.T) {
	client := newClient(testserver.DynamoDBEndpoint(t))
	conformance.Run(t, func(t *testing.T) conformance.Harness {
		table := newTable(t, client)
		s, err := dynamo.New(client, dynamo.WithTable(table))
		if err != nil {
			t.Fatalf("dynamo.New: %v", err)
		}
		return conformance.Harness{
			Store: s,
			Expiries: func(ctx context.Context) ([]conformance.Expiry, error) {
				return scanExpiries(ctx, client, table)
			},
			RealTimeExpiry: false,
			State: func(ctx context.Context, key store.Key) ([]byte, int64, error) {
				return readState(ctx, client, table, s, key)
			},
			Freeze: frozen, // real faults on a private dynalite
			// A process sees another's Reset or Cancel within this.
			Staleness: dynamo.DefaultMaxStaleness,
			Twin: func(t *testing.T) store.Store {
				s2, err := dynamo.New(newClient(testserver.DynamoDBEndpoint(t)), dynamo.WithTable(table))
				if err != nil {
					t.Fatalf("dynamo.New: %v", err)
				}
				return s2
			},
		}
	})
}

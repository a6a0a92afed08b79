package dynamo_test

import (
	"bytes"
	"errors"
	"testing"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb"

	"github.com/ratelimitkit/ratelimit"
	"github.com/ratelimitkit/ratelimit/store/dynamo"
)

// FuzzEncodeKey checks that distinct keys never share a partition key,
// that no encoding exceeds DynamoDB's limit, and that nothing panics.
func FuzzEncodeKey(f *testing.F) {
	f.Add("a:b", "id", "c:d", "id")
	f.Add("a:b", ":x", "a:b:", "x")
	f.Add("n:a", "\x00\xff", "n:a", "{}")
	s, err := dynamo.New(&dynamodb.Client{}, dynamo.WithKeyPrefix("p/"))
	if err != nil {
		f.Fatal(err)
	}
	f.Fuzz(func(t *testing.T, ns1, id1, ns2, id2 string) {
		// Namespaces as the limiter makes them: exactly one ':'.
		if bytes.Count([]byte(ns1), []byte(":")) != 1 || bytes.Count([]byte(ns2), []byte(":")) != 1 {
			return
		}
		k1, k2 := ratelimit.Key{Namespace: ns1, ID: id1}, ratelimit.Key{Namespace: ns2, ID: id2}
		p1, err1 := s.EncodeKey(k1)
		p2, err2 := s.EncodeKey(k2)
		for _, c := range []struct {
			pk  []byte
			err error
		}{{p1, err1}, {p2, err2}} {
			if c.err != nil && !errors.Is(c.err, ratelimit.ErrInvalidKey) {
				t.Fatalf("EncodeKey error %v does not wrap ErrInvalidKey", c.err)
			}
			if c.err == nil && (len(c.pk) == 0 || len(c.pk) > dynamo.MaxKeyBytes) {
				t.Fatalf("EncodeKey gave %d bytes", len(c.pk))
			}
		}
		if err1 == nil && err2 == nil && k1 != k2 && bytes.Equal(p1, p2) {
			t.Fatalf("keys %+v and %+v share the partition key %q", k1, k2, p1)
		}
	})
}

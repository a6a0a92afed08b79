package dynamo_test

import (
	"bytes"
	"errors"
	"regexp"
	"testing"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb"

	"github.com/ratelimitkit/ratelimit"
	"github.com/ratelimitkit/ratelimit/store"
	"github.com/ratelimitkit/ratelimit/store/dynamo"
)

// namespace is the form of a Key.Namespace the limiter makes.
var namespace = regexp.MustCompile(`^[A-Za-z0-9_.-]{1,64}:[A-Za-z0-9_.-]{1,64}$`)

// FuzzEncodeKey checks that distinct (prefix, key) pairs never share a
// partition key, that no encoding exceeds DynamoDB's limit, and that
// nothing panics.
func FuzzEncodeKey(f *testing.F) {
	f.Add("p/", "a:b", "id", "p/", "c:d", "id")
	f.Add("p/", "a:b", ":x", "p/", "a:b:", "x")
	f.Add("", "n:a", "\x00\xff", "", "n:a", "{}")
	// The same bytes before the ID, cut differently between prefix and
	// limiter name.
	f.Add("app1", "2x:gcra", "u", "app12", "x:gcra", "u")
	f.Add("x:y", "a:b", "k", "", "x:y", "\x00a:b:k")
	f.Fuzz(func(t *testing.T, prefix1, ns1, id1, prefix2, ns2, id2 string) {
		if !namespace.MatchString(ns1) || !namespace.MatchString(ns2) {
			return
		}
		var pks [2][]byte
		for i, c := range []struct{ prefix, ns, id string }{{prefix1, ns1, id1}, {prefix2, ns2, id2}} {
			s, err := dynamo.New(&dynamodb.Client{}, dynamo.WithKeyPrefix(c.prefix))
			if err != nil {
				if !errors.Is(err, ratelimit.ErrInvalidParams) {
					t.Fatalf("dynamo.New(WithKeyPrefix(%q)) error %v does not wrap ErrInvalidParams", c.prefix, err)
				}
				return
			}
			pk, err := s.EncodeKey(store.Key{Namespace: c.ns, ID: c.id})
			if err != nil {
				if !errors.Is(err, ratelimit.ErrInvalidKey) {
					t.Fatalf("EncodeKey error %v does not wrap ErrInvalidKey", err)
				}
				return
			}
			if len(pk) == 0 || len(pk) > dynamo.MaxKeyBytes {
				t.Fatalf("EncodeKey gave %d bytes", len(pk))
			}
			pks[i] = pk
		}
		same := prefix1 == prefix2 && ns1 == ns2 && id1 == id2
		if !same && bytes.Equal(pks[0], pks[1]) {
			t.Fatalf("prefix %q key %q:%q and prefix %q key %q:%q share the partition key %q", prefix1, ns1, id1, prefix2, ns2, id2, pks[0])
		}
	})
}

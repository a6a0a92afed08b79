package dynamo

import (
	"bytes"
	"context"
	"fmt"
	"strconv"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/ratelimitkit/ratelimit/store"
)

var _ store.Exporter = (*Store)(nil)

// Scanner is what Export needs of a Client beyond the Client interface:
// the Scan operation. *dynamodb.Client has it.
type Scanner interface {
	Scan(ctx context.Context, in *dynamodb.ScanInput, opts ...func(*dynamodb.Options)) (*dynamodb.ScanOutput, error)
}

// exportPage is how many items one Scan request of Export reads, and
// exportTimeout bounds each page (with its retries): a table that does not
// answer fails an export within about one exportTimeout.
const (
	exportPage    = 1000
	exportTimeout = time.Second
)

// Export implements store.Exporter with a Scan of the table, filtered
// on the server to the store's items under namespace (every item of the
// store when namespace is "") whose expires_us is after now, one page of
// 1000 items at a time (strongly consistent reads), retried like
// every other call within one second a page. A scan
// reads the whole table, and is billed so, however few items it returns. A
// Client that is not a Scanner is unsupported. Importing needs nothing of
// the store's own: statefile.Import writes through Update.
func (s *Store) Export(ctx context.Context, namespace string, now int64, yield func(store.Entry) error) error {
	sc, ok := s.client.(Scanner)
	if !ok {
		return fmt.Errorf("dynamo: export: a %T cannot scan the table: %w", s.client, store.ErrUnsupported)
	}
	// Every key of the store starts with its encoded prefix (EncodeKey):
	// nothing without one, NUL prefix NUL with one.
	prefix := s.keyPrefix()
	if namespace != "" {
		prefix = append(prefix, namespace+":"...)
	}
	in := &dynamodb.ScanInput{
		TableName:                aws.String(s.table),
		ConsistentRead:           aws.Bool(true),
		Limit:                    aws.Int32(exportPage),
		FilterExpression:         aws.String("#e > :now"),
		ExpressionAttributeNames: map[string]string{"#e": AttrExpires},
		ExpressionAttributeValues: map[string]types.AttributeValue{
			":now": &types.AttributeValueMemberN{Value: strconv.FormatInt(now, 10)},
		},
	}
	if len(prefix) > 0 {
		in.FilterExpression = aws.String("#e > :now AND begins_with(#k, :p)")
		in.ExpressionAttributeNames["#k"] = AttrKey
		in.ExpressionAttributeValues[":p"] = &types.AttributeValueMemberB{Value: prefix}
	}
	for {
		var out *dynamodb.ScanOutput
		pctx, cancel := context.WithTimeout(ctx, exportTimeout)
		err := s.retry(pctx, func(ctx context.Context) error {
			var err error
			out, err = sc.Scan(ctx, in)
			return err
		})
		if err != nil && ctx.Err() == nil && pctx.Err() != nil {
			err = fmt.Errorf("no page within %v: %w", exportTimeout, err)
		}
		cancel()
		if err != nil {
			return fmt.Errorf("dynamo: export from table %s: %w", s.table, err)
		}
		for _, av := range out.Items {
			pk, ok := av[AttrKey].(*types.AttributeValueMemberB)
			if !ok {
				continue
			}
			key, ok := s.decodeKey(pk.Value)
			if !ok {
				continue // not an item of this store's
			}
			it, err := parseItem(av)
			if err != nil {
				return fmt.Errorf("dynamo: export %q: %w", key.String(), err)
			}
			if it.expires <= now {
				continue
			}
			if err := yield(store.Entry{Key: key, State: it.state, Expires: it.expires}); err != nil {
				return err
			}
		}
		if len(out.LastEvaluatedKey) == 0 {
			return nil
		}
		in.ExclusiveStartKey = out.LastEvaluatedKey
	}
}

// keyPrefix returns what EncodeKey puts before every key: nothing, or a
// NUL byte, the store's prefix and another NUL byte.
func (s *Store) keyPrefix() []byte {
	if s.prefix == "" {
		return nil
	}
	return append(append([]byte{0}, s.prefix...), 0)
}

// decodeKey is the inverse of EncodeKey: the encoded prefix, then the
// Key's String form.
func (s *Store) decodeKey(pk []byte) (store.Key, bool) {
	rest, ok := bytes.CutPrefix(pk, s.keyPrefix())
	if !ok {
		return store.Key{}, false
	}
	return store.ParseKey(string(rest))
}

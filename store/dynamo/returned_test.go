package dynamo_test

import (
	"bytes"
	"context"
	"encoding/json"
	"hash/crc32"
	"io"
	"net/http"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ratelimitkit/ratelimit"
	"github.com/ratelimitkit/ratelimit/algorithms"
	"github.com/ratelimitkit/ratelimit/clock"
	"github.com/ratelimitkit/ratelimit/internal/testserver"
	"github.com/ratelimitkit/ratelimit/store/dynamo"
)

// returner is an HTTP proxy in front of a real server that adds what
// dynalite leaves out of a failed conditional PutItem: the item, as DynamoDB
// returns it for ReturnValuesOnConditionCheckFailure ALL_OLD. It fetches the
// item from the same server with a consistent GetItem, and passes one
// request at a time, so the item is the one the condition failed against.
// It lets the tests run the store's DynamoDB path on real data.
type returner struct {
	mu     sync.Mutex
	target string
	added  atomic.Int64
}

func (p *returner) forward(h http.Header, body []byte) (int, http.Header, []byte, error) {
	req, err := http.NewRequest(http.MethodPost, p.target, bytes.NewReader(body))
	if err != nil {
		return 0, nil, nil, err
	}
	for _, k := range []string{"Content-Type", "X-Amz-Target", "X-Amz-Date", "Authorization"} {
		req.Header.Set(k, h.Get(k))
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, nil, nil, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return resp.StatusCode, resp.Header, b, err
}

func (p *returner) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	body, err := io.ReadAll(r.Body)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadGateway)
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	status, h, resp, err := p.forward(r.Header, body)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadGateway)
		return
	}
	if r.Header.Get("X-Amz-Target") == "DynamoDB_20120810.PutItem" && status == http.StatusBadRequest &&
		bytes.Contains(resp, []byte("ConditionalCheckFailedException")) {
		var in struct {
			TableName                           string
			Item                                map[string]json.RawMessage
			ReturnValuesOnConditionCheckFailure string
		}
		if json.Unmarshal(body, &in) == nil && in.ReturnValuesOnConditionCheckFailure == "ALL_OLD" {
			get, _ := json.Marshal(map[string]any{
				"TableName":      in.TableName,
				"Key":            map[string]json.RawMessage{dynamo.AttrKey: in.Item[dynamo.AttrKey]},
				"ConsistentRead": true,
			})
			gh := r.Header.Clone()
			gh.Set("X-Amz-Target", "DynamoDB_20120810.GetItem")
			var got struct{ Item json.RawMessage }
			if st, _, g, err := p.forward(gh, get); err == nil && st == http.StatusOK && json.Unmarshal(g, &got) == nil && len(got.Item) > 2 {
				resp, _ = json.Marshal(map[string]any{
					"__type":  "com.amazonaws.dynamodb.v20120810#ConditionalCheckFailedException",
					"message": "The conditional request failed",
					"Item":    got.Item,
				})
				p.added.Add(1)
			}
		}
	}
	w.Header().Set("Content-Type", h.Get("Content-Type"))
	w.Header().Set("X-Amz-Crc32", strconv.FormatUint(uint64(crc32.ChecksumIEEE(resp)), 10))
	w.WriteHeader(status)
	w.Write(resp)
}

// TestReturnedItem runs the paths that DynamoDB's returned item enables,
// which dynalite alone never reaches: after a lost race, and on a key the
// process does not know, the store recomputes from the item returned with
// the failure and makes no read; and when a failed condition returns no
// item on such a server, the item is gone and the store recreates it
// without a read.
func TestReturnedItem(t *testing.T) {
	endpoint := testserver.DynamoDBEndpoint(t)
	table := newTable(t, newClient(endpoint))
	p := &returner{target: endpoint}
	proxyURL := serveProxy(t, p)
	proxied := newClient(proxyURL)

	fc := clock.NewFake(epoch)
	alg := algorithms.FixedWindow(10, time.Minute)
	newLimiter := func() (*ratelimit.Limiter, *counter) {
		c := &counter{Client: proxied}
		s, err := dynamo.New(c, dynamo.WithTable(table))
		if err != nil {
			t.Fatal(err)
		}
		lim, err := ratelimit.New(s, alg, ratelimit.WithClock(fc), ratelimit.WithName("returned"))
		if err != nil {
			t.Fatal(err)
		}
		return lim, c
	}
	lim1, c1 := newLimiter()
	lim2, c2 := newLimiter()
	ctx := context.Background()
	allow := func(lim *ratelimit.Limiter, c *counter, what string, remaining int, wantRequests int64) {
		t.Helper()
		c.reset()
		d, err := lim.Allow(ctx, "k")
		if err != nil || !d.Allowed || d.Remaining != remaining {
			t.Fatalf("%s: lim.Allow = %+v, %v; want allowed with remaining %d", what, d, err, remaining)
		}
		if c.gets.Load() != 0 || c.total() != wantRequests {
			t.Errorf("%s: %d requests (%d reads, %d writes), want %d writes and no read", what, c.total(), c.gets.Load(), c.puts.Load(), wantRequests)
		}
	}
	allow(lim1, c1, "first decision on a new key", 9, 1)
	allow(lim2, c2, "first decision of a second process on a key with state", 8, 2)
	allow(lim1, c1, "decision after another process wrote", 7, 2)
	if p.added.Load() != 2 {
		t.Errorf("the proxy returned %d items with failed conditions, want 2", p.added.Load())
	}
	if err := lim2.Reset(ctx, "k"); err != nil {
		t.Fatal(err)
	}
	allow(lim1, c1, "decision after another process deleted the key", 9, 2)
}

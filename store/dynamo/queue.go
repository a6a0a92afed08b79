package dynamo

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/ratelimitkit/ratelimit/store"
)

// op is one Update call waiting for its key's worker.
type op struct {
	ctx   context.Context
	now   int64
	fn    store.UpdateFunc
	key   store.Key
	done  chan error // buffered: the worker never blocks on it
	taken bool       // the worker has taken it (guarded by the shard's mu)
	// confirm asks that an outcome that writes nothing be computed from
	// the table, not from the cache (see RunLease).
	confirm bool
	err     error // fn's error in the current attempt
	// last is the latest failed request made for it, for the error of a
	// call whose context ends while its request is in flight.
	last atomic.Pointer[error]
	// panicked holds what fn panicked with, for Update to panic with in
	// the caller's goroutine rather than crash the worker's.
	panicked any
}

// errPanicked tells Update that its fn panicked.
var errPanicked = errors.New("dynamo: update function panicked")

// failed records a failed request on behalf of ops.
func failed(ops []*op, err error) {
	var ccf *types.ConditionalCheckFailedException
	if err == nil || errors.As(err, &ccf) {
		return
	}
	for _, o := range ops {
		o.last.Store(&err)
	}
}

// queue holds the calls waiting on one key. While it has calls, exactly one
// worker goroutine serves it; the worker removes the queue from its shard
// and exits when it finds it empty.
type queue struct {
	pk      string
	waiting []*op
}

func (q *queue) remove(o *op) {
	for i, w := range q.waiting {
		if w == o {
			q.waiting = append(q.waiting[:i], q.waiting[i+1:]...)
			return
		}
	}
}

// enqueue adds o to pk's queue, starting a worker when none serves it.
func (s *Store) enqueue(pk string, o *op) (*shard, *queue) {
	sh := s.shard(pk)
	sh.mu.Lock()
	q := sh.queues[pk]
	start := q == nil
	if start {
		q = &queue{pk: pk}
		sh.queues[pk] = q
	}
	q.waiting = append(q.waiting, o)
	sh.mu.Unlock()
	if start {
		go s.work(sh, q)
	}
	return sh, q
}

// work serves q until it is empty: it takes what has queued, up to
// maxBatch calls, decides and stores them with one write, and repeats.
func (s *Store) work(sh *shard, q *queue) {
	for {
		sh.mu.Lock()
		if len(q.waiting) == 0 {
			delete(sh.queues, q.pk)
			sh.mu.Unlock()
			return
		}
		n := min(len(q.waiting), maxBatch)
		batch := make([]*op, n)
		copy(batch, q.waiting)
		rest := copy(q.waiting, q.waiting[n:])
		clear(q.waiting[rest:])
		q.waiting = q.waiting[:rest]
		for _, o := range batch {
			o.taken = true
		}
		sh.mu.Unlock()
		s.serve(sh, q.pk, batch)
	}
}

// serve decides and stores one batch of calls on key pk, and tells each
// its result.
func (s *Store) serve(sh *shard, pk string, batch []*op) {
	live := batch[:0]
	for _, o := range batch {
		if err := o.ctx.Err(); err != nil {
			o.done <- fmt.Errorf("dynamo: update %q: %w", truncate(o.key.String()), err)
			continue
		}
		live = append(live, o)
	}
	if len(live) == 0 {
		return
	}
	ctx, cancel := batchContext(live)
	defer cancel()
	err := s.decide(ctx, sh, pk, live)
	for _, o := range live {
		switch {
		case err != nil:
			o.done <- err
		default:
			o.done <- o.err
		}
	}
}

// batchContext returns a context for the requests that serve ops: it keeps
// the first one's values, and ends when every op's context has ended, or at
// the latest of their deadlines.
func batchContext(ops []*op) (context.Context, context.CancelFunc) {
	base := context.WithoutCancel(ops[0].ctx)
	var latest time.Time
	for _, o := range ops {
		d, ok := o.ctx.Deadline()
		if !ok {
			latest = time.Time{}
			break
		}
		if d.After(latest) {
			latest = d
		}
	}
	var ctx context.Context
	var cancel context.CancelFunc
	if latest.IsZero() {
		ctx, cancel = context.WithCancel(base)
	} else {
		ctx, cancel = context.WithDeadline(base, latest)
	}
	if len(ops) == 1 {
		stop := context.AfterFunc(ops[0].ctx, cancel)
		return ctx, func() { stop(); cancel() }
	}
	var remaining atomic.Int32
	remaining.Store(int32(len(ops)))
	stops := make([]func() bool, len(ops))
	for i, o := range ops {
		stops[i] = context.AfterFunc(o.ctx, func() {
			if remaining.Add(-1) == 0 {
				cancel()
			}
		})
	}
	return ctx, func() {
		for _, stop := range stops {
			stop()
		}
		cancel()
	}
}

// decide runs the batch's functions in order on the key's state and stores
// the result with one conditional write, starting over from the item
// returned with a failed condition. It sets each op's err to its fn's
// error, and returns an error that applies to the whole batch.
//
// On a key it knows nothing about, decide first guesses that the key holds
// nothing (true of most keys a limiter meets for the first time) and writes
// with a condition that holds only then; a wrong guess costs the failed
// write, which returns the item. It reads first instead when the guess leads
// to no write at all (a Peek, a denial), and when the server is known not to
// return the item with a failed condition (dynalite), so that a decision on
// an unknown key costs at most one request more than on a known one.
func (s *Store) decide(ctx context.Context, sh *shard, pk string, ops []*op) error {
	name := truncate(ops[0].key.String())
	minNow, maxNow := ops[0].now, ops[0].now
	for _, o := range ops {
		minNow, maxNow = min(minNow, o.now), max(maxNow, o.now)
	}
	confirm := false
	for _, o := range ops {
		confirm = confirm || o.confirm
	}
	// young: the table vouched for the cached item within the staleness
	// bound (WithMaxStaleness).
	base, known, young := s.cached(sh, pk, maxNow)
	// fresh: base came from the table during this call, not from the
	// cache.
	fresh := false
	if !known && s.returnsItem.Load() == returnsNo {
		var err error
		if base, err = s.read(ctx, pk, ops); err != nil {
			return fmt.Errorf("dynamo: update %q: read from table %s: %w", name, s.table, err)
		}
		known, fresh = true, true
		s.remember(sh, pk, base, minNow)
	}
	conflicts := 0
	for {
		from := base
		if !known {
			from = &item{}
		}
		next, expires, writes := run(ops, from)
		if !writes {
			// A decision that writes nothing stands on the cache while
			// the table vouched for it within the staleness bound, unless
			// a caller asked for it to be confirmed by the table: past
			// the bound, another process's Reset or Cancel may have left
			// the key admitting more than the cache says.
			if known && (fresh || (young && !confirm)) {
				return nil
			}
			var err error
			if base, err = s.read(ctx, pk, ops); err != nil {
				s.forget(sh, pk)
				return fmt.Errorf("dynamo: update %q: read from table %s: %w", name, s.table, err)
			}
			known, fresh = true, true
			s.remember(sh, pk, base, minNow)
			continue
		}
		// Condition: the item is exactly the one the decisions were
		// computed from. When they treated it as absent (it was absent,
		// expired for every call, or not known), any item that is absent
		// or expired by the earliest call's time gives the same decisions.
		in := &dynamodb.PutItemInput{
			TableName:                           &s.table,
			ReturnValuesOnConditionCheckFailure: types.ReturnValuesOnConditionCheckFailureAllOld,
		}
		version := newVersion()
		byVersion := known && from.present && from.expires > minNow
		if byVersion {
			in.ConditionExpression = aws.String("#v = :v")
			in.ExpressionAttributeNames = map[string]string{"#v": AttrVersion}
			in.ExpressionAttributeValues = map[string]types.AttributeValue{
				":v": &types.AttributeValueMemberN{Value: strconv.FormatInt(from.version, 10)},
			}
		} else {
			in.ConditionExpression = aws.String("attribute_not_exists(#k) OR #x <= :now")
			in.ExpressionAttributeNames = map[string]string{"#k": AttrKey, "#x": AttrExpires}
			in.ExpressionAttributeValues = map[string]types.AttributeValue{
				":now": &types.AttributeValueMemberN{Value: strconv.FormatInt(minNow, 10)},
			}
		}
		in.Item = map[string]types.AttributeValue{
			AttrKey:     &types.AttributeValueMemberB{Value: []byte(pk)},
			AttrState:   &types.AttributeValueMemberB{Value: next},
			AttrVersion: &types.AttributeValueMemberN{Value: strconv.FormatInt(version, 10)},
			AttrExpires: &types.AttributeValueMemberN{Value: strconv.FormatInt(expires, 10)},
			AttrTTL:     &types.AttributeValueMemberN{Value: strconv.FormatInt(ttlSeconds(expires), 10)},
		}
		err := s.retry(ctx, func(ctx context.Context) error {
			_, err := s.client.PutItem(ctx, in, oneAttempt)
			failed(ops, err)
			return err
		})
		if err == nil {
			s.remember(sh, pk, &item{present: true, state: next, version: version, expires: expires}, minNow)
			return nil
		}
		var ccf *types.ConditionalCheckFailedException
		if !errors.As(err, &ccf) {
			s.forget(sh, pk)
			return fmt.Errorf("dynamo: update %q: write to table %s: %w", name, s.table, err)
		}
		conflicts++
		if conflicts > s.maxConflicts {
			s.forget(sh, pk)
			return fmt.Errorf("%w: update %q lost %d conditional writes in a row: %w", ErrContention, name, conflicts, err)
		}
		switch {
		case len(ccf.Item) > 0:
			s.returnsItem.Store(returnsYes)
			if base, err = parseItem(ccf.Item); err != nil {
				s.forget(sh, pk)
				return fmt.Errorf("dynamo: update %q: %w", name, err)
			}
			known, fresh = true, true
			s.remember(sh, pk, base, minNow)
		case !byVersion:
			// Only a live item fails this condition, and the server did
			// not return it: it never does (dynalite). Read instead.
			s.returnsItem.Store(returnsNo)
			known = false
			base = nil
		case s.returnsItem.Load() == returnsYes:
			// The server returns the item when there is one, so the item
			// is gone (deleted, or reclaimed by TTL).
			base, known, fresh = &item{}, true, true
		default:
			known = false
			base = nil
		}
		if !known {
			if base, err = s.read(ctx, pk, ops); err != nil {
				s.forget(sh, pk)
				return fmt.Errorf("dynamo: update %q: read from table %s: %w", name, s.table, err)
			}
			known, fresh = true, true
			s.remember(sh, pk, base, minNow)
		}
		if base.present && base.version == version {
			// The item is this very write: an earlier attempt that
			// failed on the network did reach the table. Versions are
			// random, so no other writer made this one.
			return nil
		}
		if conflicts > 1 {
			// Several losses in a row: writers in other processes are
			// racing on this key. Back off a little, at random.
			wait := time.Duration(rand.Int64N(int64(min(conflicts*conflicts, 100)) * int64(time.Millisecond)))
			t := time.NewTimer(wait)
			select {
			case <-t.C:
			case <-ctx.Done():
				t.Stop()
				return fmt.Errorf("dynamo: update %q: %w after %d conflicting writes", name, ctx.Err(), conflicts)
			}
		}
	}
}

// run calls each op's fn in order, each on the state the previous ones
// left, starting from base, and returns the state to store and its expiry.
// writes is false when no call changed anything. Each fn gets its own copy
// of the state, since it may overwrite it.
func run(ops []*op, base *item) (next []byte, expires int64, writes bool) {
	cur, curExp, present := base.state, base.expires, base.present
	for _, o := range ops {
		var in []byte
		if present && curExp > o.now {
			in = bytes.Clone(cur)
		}
		n, ttl, err := call(o, in)
		o.err = err
		if err != nil || n == nil {
			continue
		}
		if ttl <= 0 || ttl > math.MaxInt64-o.now {
			o.err = fmt.Errorf("dynamo: state for %q written with ttl %d µs at %d µs", truncate(o.key.String()), ttl, o.now)
			continue
		}
		if len(n) > MaxStateBytes {
			o.err = fmt.Errorf("dynamo: state for %q of %d bytes exceeds the %d an item can hold", truncate(o.key.String()), len(n), MaxStateBytes)
			continue
		}
		cur, curExp, present, writes = bytes.Clone(n), o.now+ttl, true, true
	}
	return cur, curExp, writes
}

// call runs o's fn on in, turning a panic into errPanicked (its value kept
// in o.panicked) so that one caller's faulty function cannot bring down the
// worker, and with it every caller queued on the key.
func call(o *op, in []byte) (next []byte, ttl int64, err error) {
	defer func() {
		if r := recover(); r != nil {
			o.panicked = r
			next, ttl, err = nil, 0, errPanicked
		}
	}()
	return o.fn(in, o.now)
}

// read fetches pk's item with a strongly consistent read.
func (s *Store) read(ctx context.Context, pk string, ops []*op) (*item, error) {
	var out *dynamodb.GetItemOutput
	err := s.retry(ctx, func(ctx context.Context) error {
		var err error
		out, err = s.client.GetItem(ctx, &dynamodb.GetItemInput{
			TableName:      &s.table,
			Key:            map[string]types.AttributeValue{AttrKey: &types.AttributeValueMemberB{Value: []byte(pk)}},
			ConsistentRead: aws.Bool(true),
		}, oneAttempt)
		failed(ops, err)
		return err
	})
	if err != nil {
		return nil, err
	}
	return parseItem(out.Item)
}

// cached returns what the cache knows of pk, and whether the table
// vouched for it within the staleness bound, at the limiter's time now and
// by this process's real clock.
func (s *Store) cached(sh *shard, pk string, now int64) (it *item, ok, young bool) {
	sh.mu.Lock()
	e, ok := sh.cache[pk]
	sh.mu.Unlock()
	if !ok {
		return nil, false, false
	}
	young = now-e.seen < int64(s.maxStale/time.Microsecond) && time.Since(s.start)-e.wall < s.maxStale
	return e.it, true, young
}

// remember caches it as pk's item, as the table vouched for it at now (the
// limiter's time) and at this moment. Items are never modified once
// cached. When the shard is full, it evicts an entry expired by now among
// a few, or else the first it looked at.
func (s *Store) remember(sh *shard, pk string, it *item, now int64) {
	if s.cacheSize == 0 {
		return
	}
	wall := time.Since(s.start)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	if _, ok := sh.cache[pk]; !ok && len(sh.cache) >= s.perShard {
		var victim string
		seen := 0
		for k, e := range sh.cache {
			if seen == 0 || e.it.expires <= now {
				victim = k
			}
			if e.it.expires <= now {
				break
			}
			if seen++; seen == 8 {
				break
			}
		}
		delete(sh.cache, victim)
	}
	sh.cache[pk] = entry{it: it, seen: now, wall: wall}
}

// forget drops pk from the cache, after a failure that leaves its item
// unknown.
func (s *Store) forget(sh *shard, pk string) {
	sh.mu.Lock()
	delete(sh.cache, pk)
	sh.mu.Unlock()
}

// Package dynamo is a store.Store on Amazon DynamoDB (or any endpoint
// that speaks its API, such as DynamoDB Local or dynalite).
//
// DynamoDB cannot run code next to its data, so every algorithm runs in Go
// through Update, and atomicity comes from conditional writes: each item
// carries a version, and a write succeeds only if the version is still the
// one the decision was computed from. Two things keep that cheap:
//
//   - A bounded per-process cache remembers the last state and version the
//     store saw for each key, so a decision on a key it knows costs one
//     conditional PutItem and nothing else. A write that loses a race gets
//     the winning item back with its failure (ReturnValuesOnConditionCheckFailure)
//     and retries from it, without a separate read.
//   - Requests for one key inside one process never race each other to the
//     table: they queue per key, and whatever has queued while one write was
//     in flight is decided in order and stored with the next single write.
//     A hot key therefore costs at most one write per decision, and fewer
//     under load.
//
// A decision that writes nothing (a denial, a Peek) stands on the cached
// item only while the table vouched for it (this process read or wrote the
// item) less than a staleness bound ago, DefaultMaxStaleness (100ms) unless
// WithMaxStaleness says otherwise; past it, it is confirmed by a strongly
// consistent read. So a process sees another's Reset or Cancel within the
// bound, and a key this process keeps denying costs at most one read per
// bound. Admissions never stand on the cache: they write, conditionally on
// the item being the one they were computed from.
//
// Every item carries its expiry in microseconds, which is checked on every
// read (an item past it is absent, whether or not DynamoDB has deleted it),
// and a TTL attribute in epoch seconds so that DynamoDB's TTL reclaims it.
// CreateTable makes a table with the right layout and returns once it is
// ACTIVE; docs/stores/dynamo.md describes it for teams that manage tables
// with their own tools. A call on a table that does not exist fails with
// an error wrapping ErrNoTable, which says to run CreateTable.
//
// Time is the limiter's clock: DynamoDB has no server clock a request can
// read. See docs/stores/dynamo.md for what clock skew between application
// servers does to each algorithm.
package dynamo

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/aws/retry"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/aws/smithy-go"

	"github.com/ratelimitkit/ratelimit/algorithms"
	"github.com/ratelimitkit/ratelimit/store"
)

// Client is the part of a *dynamodb.Client the store uses. Any value with
// these methods will do, such as a wrapper that adds metrics.
type Client interface {
	GetItem(ctx context.Context, in *dynamodb.GetItemInput, opts ...func(*dynamodb.Options)) (*dynamodb.GetItemOutput, error)
	PutItem(ctx context.Context, in *dynamodb.PutItemInput, opts ...func(*dynamodb.Options)) (*dynamodb.PutItemOutput, error)
	DeleteItem(ctx context.Context, in *dynamodb.DeleteItemInput, opts ...func(*dynamodb.Options)) (*dynamodb.DeleteItemOutput, error)
}

// Attribute names of the items the store writes. See docs/stores/dynamo.md
// for the layout.
const (
	// AttrKey is the partition key, of type B (binary): the encoded Key.
	AttrKey = "pk"
	// AttrState is the algorithm's state, of type B.
	AttrState = "state"
	// AttrVersion is the item's version, of type N: a random number from
	// 1 to 2^62, new on every write.
	AttrVersion = "version"
	// AttrExpires is when the state expires, in microseconds since the Unix
	// epoch on the limiter's clock, of type N. The store treats an item
	// past it as absent.
	AttrExpires = "expires_us"
	// AttrTTL is AttrExpires rounded up to whole seconds, of type N: the
	// attribute to enable DynamoDB's TTL on.
	AttrTTL = "ttl"
)

// MaxKeyBytes is the longest encoded key DynamoDB accepts for a partition
// key. Update and Delete return an error wrapping ratelimit.ErrInvalidKey
// for a key whose encoding is longer (see Store.EncodeKey).
const MaxKeyBytes = 2048

// MaxStateBytes is the largest state an item holds: DynamoDB's 400 KB item
// limit, less room for the key and the other attributes. Only a sliding log
// with a limit above about 25,000 reaches it; Update returns an error for
// such a state without sending it.
const MaxStateBytes = 400*1024 - MaxKeyBytes - 256

// Defaults of a Store created without the matching options.
const (
	// DefaultTable is the table name.
	DefaultTable = "ratelimit"
	// DefaultMaxConflicts is how many conditional writes one batch of
	// decisions may lose to other writers before Update gives up.
	DefaultMaxConflicts = 10
	// DefaultMaxRetries is how many times a throttled or failed request is
	// retried when the context has no deadline.
	DefaultMaxRetries = 8
	// DefaultCacheSize is how many keys the per-process cache remembers.
	DefaultCacheSize = 1 << 16
	// DefaultMaxStaleness is how old a cached item may be for a decision
	// that writes nothing (a denial, a Peek) to stand on it: a process
	// sees another's Reset or Cancel within it (WithMaxStaleness).
	DefaultMaxStaleness = 100 * time.Millisecond
)

// maxBatch bounds how many queued decisions on one key one write carries.
const maxBatch = 64

// shardCount is the number of independently locked parts of the key queues
// and the cache.
const shardCount = 64

// ErrContention is returned, wrapped, when a key's conditional writes keep
// losing to other writers (processes or machines) more times in a row than
// the store allows (WithMaxConflicts).
var ErrContention = errors.New("dynamo: too many conflicting writers")

// ErrNoTable is wrapped by the error of a call on a table that DynamoDB
// says does not exist (ResourceNotFoundException): one CreateTable never
// made, in another region or account, or still being created by a
// CreateTable that has not returned. The error names the table, says to
// run CreateTable, and wraps DynamoDB's error as well. Check for it with
// errors.Is.
var ErrNoTable = errors.New("no table")

// noTable returns err, wrapping ErrNoTable and what to do as well when
// DynamoDB answered that the store's table does not exist.
func (s *Store) noTable(err error) error {
	var nf *types.ResourceNotFoundException
	if err == nil || !errors.As(err, &nf) || errors.Is(err, ErrNoTable) {
		return err
	}
	return fmt.Errorf("dynamo: %w: table %s does not exist (or is still being created): create it with dynamo.CreateTable, at start or from a deployment step, which returns once it is ACTIVE: %w",
		ErrNoTable, s.table, err)
}

// Option configures a Store.
type Option func(*Store) error

// WithTable sets the table's name (default DefaultTable). The table must
// have the layout CreateTable makes.
func WithTable(name string) Option {
	return func(s *Store) error {
		if len(name) < 3 || len(name) > 255 {
			return fmt.Errorf("%w: dynamo table name %q must be 3 to 255 characters", algorithms.ErrInvalidParams, name)
		}
		s.table = name
		return nil
	}
}

// WithKeyPrefix puts prefix in front of every encoded key, so that several
// applications (or tests) can share one table without sharing state. The
// prefix is up to 256 bytes of anything but NUL; EncodeKey says how it is
// kept apart from the rest of the key.
func WithKeyPrefix(prefix string) Option {
	return func(s *Store) error {
		if len(prefix) > 256 {
			return fmt.Errorf("%w: dynamo key prefix of %d bytes exceeds 256", algorithms.ErrInvalidParams, len(prefix))
		}
		if strings.IndexByte(prefix, 0) >= 0 {
			return fmt.Errorf("%w: dynamo key prefix %q holds a NUL byte", algorithms.ErrInvalidParams, prefix)
		}
		s.prefix = prefix
		return nil
	}
}

// WithMaxConflicts sets how many conditional writes one Update may lose to
// writers in other processes before it returns an error wrapping
// ErrContention (default DefaultMaxConflicts). Writers in the same process
// never conflict: they queue.
func WithMaxConflicts(n int) Option {
	return func(s *Store) error {
		if n < 1 || n > 1000 {
			return fmt.Errorf("%w: dynamo max conflicts %d outside 1..1000", algorithms.ErrInvalidParams, n)
		}
		s.maxConflicts = n
		return nil
	}
}

// WithMaxRetries sets how many times a throttled request, or one that
// failed on the network, is retried (default DefaultMaxRetries). The store
// retries with exponential backoff and jitter, and never past the context's
// deadline: with a deadline it keeps retrying until the next attempt would
// start after it, whatever n is. Zero turns retries off.
//
// This is the only retry policy of the store's requests: the store turns
// the client's own retryer off for them (its requests pass an option that
// sets aws.NopRetryer), so the client's retry settings do not multiply the
// attempts.
func WithMaxRetries(n int) Option {
	return func(s *Store) error {
		if n < 0 || n > 1000 {
			return fmt.Errorf("%w: dynamo max retries %d outside 0..1000", algorithms.ErrInvalidParams, n)
		}
		s.maxRetries = n
		return nil
	}
}

// WithBackoff sets the first and the longest pause between retries of a
// throttled or failed request (defaults 10ms and 1s). Each pause is drawn
// at random up to twice the one before, capped at max.
func WithBackoff(first, max time.Duration) Option {
	return func(s *Store) error {
		if first <= 0 || max < first {
			return fmt.Errorf("%w: dynamo backoff %v to %v", algorithms.ErrInvalidParams, first, max)
		}
		s.backoff, s.maxBackoff = first, max
		return nil
	}
}

// WithCacheSize sets how many keys the per-process cache of last known
// states holds (default DefaultCacheSize). A decision on a key in the cache
// costs one request; on a key that is not, one more when the key already
// has state in the table. When the cache is full, a new key evicts one at
// random (preferring expired ones). Zero turns the cache off.
func WithCacheSize(n int) Option {
	return func(s *Store) error {
		if n < 0 {
			return fmt.Errorf("%w: dynamo cache size %d is negative", algorithms.ErrInvalidParams, n)
		}
		s.cacheSize = n
		return nil
	}
}

// WithMaxStaleness sets how old what the cache knows of a key may be for a
// decision that writes nothing (a denial, a Peek) to stand on it without a
// request (default DefaultMaxStaleness). An entry's age counts from the
// last time the table vouched for it (this process read the item, or
// wrote it), by the limiter's clock (the times Update is passed) or by
// this process's real clock, whichever has passed more; an older entry is
// confirmed by a consistent read first. So a process sees another's Reset
// or Cancel (which only make the state admit more) within d, and a key
// this process keeps denying costs at most one read per d, and no write.
// Admissions always write, so they never stand on the cache whatever d
// is. Zero confirms every such decision by a read.
func WithMaxStaleness(d time.Duration) Option {
	return func(s *Store) error {
		if d < 0 {
			return fmt.Errorf("%w: dynamo max staleness %v is negative", algorithms.ErrInvalidParams, d)
		}
		s.maxStale = d
		return nil
	}
}

// Store is a store.Store on a DynamoDB table. Create it with New; the
// zero value is not usable. Most callers only pass it to ratelimit.New and
// use the Limiter. It is safe for concurrent use, across goroutines,
// processes and machines sharing the table. It starts a goroutine only
// while requests for a key are queued, so it needs no closing.
//
// Store does not implement store.Decider: DynamoDB cannot run an
// algorithm next to its data, so every algorithm, built-in or not, runs
// through Update. It implements leasewire.Runner (RunLease), so that a lease
// never takes "held" from the cache.
type Store struct {
	client       Client
	table        string
	prefix       string
	maxConflicts int
	maxRetries   int
	backoff      time.Duration
	maxBackoff   time.Duration
	cacheSize    int
	maxStale     time.Duration
	perShard     int // cache entries per shard
	// returnsItem records whether the server returns the item with a
	// failed condition: 0 not known yet, 1 yes, 2 no (dynalite).
	returnsItem atomic.Int32
	start       time.Time // the origin of entry.wall
	shards      [shardCount]shard
}

type shard struct {
	mu     sync.Mutex
	queues map[string]*queue
	cache  map[string]entry
}

// entry is what the cache holds for a key: the item, and when the table
// last vouched for it, for WithMaxStaleness.
type entry struct {
	it   *item
	seen int64         // the limiter's time, in µs (the batch's earliest)
	wall time.Duration // this process's monotonic clock (since Store.start)
}

// New returns a store that keeps its state in a table of client (by default
// DefaultTable; see WithTable). It does not touch the table; CreateTable
// makes one.
func New(client Client, opts ...Option) (*Store, error) {
	if client == nil {
		return nil, fmt.Errorf("%w: dynamo: nil client", algorithms.ErrInvalidParams)
	}
	s := &Store{
		client:       client,
		table:        DefaultTable,
		maxConflicts: DefaultMaxConflicts,
		maxRetries:   DefaultMaxRetries,
		backoff:      10 * time.Millisecond,
		maxBackoff:   time.Second,
		cacheSize:    DefaultCacheSize,
		maxStale:     DefaultMaxStaleness,
		start:        time.Now(),
	}
	for _, opt := range opts {
		if err := opt(s); err != nil {
			return nil, err
		}
	}
	s.perShard = (s.cacheSize + shardCount - 1) / shardCount
	for i := range s.shards {
		s.shards[i].queues = make(map[string]*queue)
		s.shards[i].cache = make(map[string]entry)
	}
	return s, nil
}

// Client returns the client the store was created with: the escape hatch
// for what the store does not do itself.
func (s *Store) Client() Client { return s.client }

// Table returns the name of the store's table.
func (s *Store) Table() string { return s.table }

// EncodeKey returns the partition key, of type B, that holds key's state:
// key.Namespace, ':' and key.ID, as raw bytes, and with a key prefix, a
// NUL byte, the prefix and another NUL byte before them.
//
// Distinct (prefix, Key) pairs give distinct partition keys, and IDs may
// hold any bytes: a Namespace starts with a letter, digit, '_', '.' or
// '-', so an unprefixed key never starts with NUL; a prefix holds no NUL,
// so the second NUL ends it; and a Namespace holds exactly one ':' and no
// other key part follows ID. It returns an error wrapping
// ratelimit.ErrInvalidKey when the result would be longer than
// MaxKeyBytes.
func (s *Store) EncodeKey(key store.Key) ([]byte, error) {
	n := len(key.Namespace) + 1 + len(key.ID)
	if s.prefix != "" {
		n += len(s.prefix) + 2
	}
	if n > MaxKeyBytes {
		return nil, fmt.Errorf("%w: dynamo: key %q encodes to %d bytes, more than DynamoDB's %d for a partition key",
			store.ErrInvalidKey, truncate(key.String()), n, MaxKeyBytes)
	}
	b := make([]byte, 0, n)
	if s.prefix != "" {
		b = append(b, 0)
		b = append(b, s.prefix...)
		b = append(b, 0)
	}
	b = append(b, key.Namespace...)
	b = append(b, ':')
	b = append(b, key.ID...)
	return b, nil
}

func truncate(s string) string {
	if len(s) > 64 {
		return s[:64] + "..."
	}
	return s
}

func (s *Store) shard(pk string) *shard {
	// FNV-1a: cheap and good enough to spread keys over the shards.
	h := uint32(2166136261)
	for i := 0; i < len(pk); i++ {
		h ^= uint32(pk[i])
		h *= 16777619
	}
	return &s.shards[h%shardCount]
}

// item is what the store knows of a key's item in the table.
type item struct {
	present bool   // an item exists (live or expired)
	state   []byte // its state
	version int64
	expires int64 // µs since the epoch
}

// Update implements store.Store with conditional writes. Calls for one
// key in this process queue, and the decisions that queued while a write
// was in flight are computed one after another (each fn sees the state the
// previous one left) and stored with a single conditional write. When a
// write loses to another process, every fn of the batch is called again on
// the state returned with the failure; only the last results are stored.
//
// A decision that stores nothing (a Peek, or a denial) is computed from the
// state this process last saw for the key, without a request when the
// table vouched for it within the staleness bound (WithMaxStaleness), and
// after a consistent read otherwise: it can lag a change made by another
// process by up to that bound, but it can never admit a request, since
// admissions always write.
//
// When ctx ends while the call waits behind others on its key, Update
// returns at once, having stored nothing. When it ends while the call's
// write is in flight, Update returns the context's error at once, and the
// write may still succeed: the decision is then counted without being
// reported, which errs on the side of denying.
//
// fn runs on a goroutine that serves the key. If it panics, Update panics
// with the same value in the caller's goroutine, and the other calls
// batched with it are unaffected.
func (s *Store) Update(ctx context.Context, key store.Key, now int64, fn store.UpdateFunc) error {
	return s.update(ctx, key, now, fn, false)
}

// update is Update; with confirm set, an outcome that writes nothing is
// computed from the table's item (a consistent read), not from the cache.
func (s *Store) update(ctx context.Context, key store.Key, now int64, fn store.UpdateFunc, confirm bool) error {
	if fn == nil {
		return fmt.Errorf("%w: dynamo: nil update function", algorithms.ErrInvalidParams)
	}
	pk, err := s.EncodeKey(key)
	if err != nil {
		return err
	}
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("dynamo: update %q: %w", truncate(key.String()), err)
	}
	o := &op{ctx: ctx, now: now, fn: fn, key: key, done: make(chan error, 1), confirm: confirm}
	sh, q := s.enqueue(string(pk), o)
	select {
	case err := <-o.done:
		if err == errPanicked {
			panic(o.panicked)
		}
		return s.noTable(err)
	case <-ctx.Done():
	}
	sh.mu.Lock()
	if !o.taken {
		q.remove(o)
		sh.mu.Unlock()
		return fmt.Errorf("dynamo: update %q: %w while queued behind other requests for the key", truncate(key.String()), ctx.Err())
	}
	sh.mu.Unlock()
	select {
	case err := <-o.done:
		if err == errPanicked {
			panic(o.panicked)
		}
		return s.noTable(err)
	default:
	}
	if last := o.last.Load(); last != nil {
		return s.noTable(fmt.Errorf("dynamo: update %q: %w while its request was in flight (a write may have been stored); last failure: %w", truncate(key.String()), ctx.Err(), *last))
	}
	return fmt.Errorf("dynamo: update %q: %w while its request was in flight (a write may have been stored)", truncate(key.String()), ctx.Err())
}

// Delete implements store.Store with a DeleteItem, retried like writes.
func (s *Store) Delete(ctx context.Context, key store.Key) error {
	pk, err := s.EncodeKey(key)
	if err != nil {
		return err
	}
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("dynamo: delete %q: %w", truncate(key.String()), err)
	}
	sh := s.shard(string(pk))
	err = s.retry(ctx, func(ctx context.Context) error {
		_, err := s.client.DeleteItem(ctx, &dynamodb.DeleteItemInput{
			TableName: &s.table,
			Key:       map[string]types.AttributeValue{AttrKey: &types.AttributeValueMemberB{Value: pk}},
		}, oneAttempt)
		return err
	})
	// Whatever happened, this process no longer knows the item.
	sh.mu.Lock()
	delete(sh.cache, string(pk))
	sh.mu.Unlock()
	if err != nil {
		return s.noTable(fmt.Errorf("dynamo: delete %q from table %s: %w", truncate(key.String()), s.table, err))
	}
	return nil
}

// oneAttempt turns the client's own retryer off for one request: the
// store's retry loop (Store.retry) is the only retry policy, so one
// decision makes at most WithMaxRetries+1 attempts per request, or as many
// as the context's deadline allows, never that times the client's.
func oneAttempt(o *dynamodb.Options) { o.Retryer = aws.NopRetryer{} }

// retryable reports whether err is worth retrying: throttling, a server
// error or a network failure other than a refused connection.
func retryable(err error) bool {
	if err == nil || errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return false
	}
	var ccf *types.ConditionalCheckFailedException
	if errors.As(err, &ccf) {
		return false
	}
	// A refused connection means nothing listens at the endpoint (a
	// wrong endpoint, an emulator or a proxy that is down): retrying it
	// until the deadline held every decision for the limiter's whole
	// budget (a second) and reported a timeout; it is reported at once,
	// as what it is, and the limiter's failure policy decides.
	if errors.Is(err, syscall.ECONNREFUSED) {
		return false
	}
	var api smithy.APIError
	if errors.As(err, &api) {
		switch api.ErrorCode() {
		case "ProvisionedThroughputExceededException", "ThrottlingException", "RequestLimitExceeded",
			"InternalServerError", "ServiceUnavailable", "LimitExceededException":
			return true
		}
	}
	return retry.IsErrorRetryables(retry.DefaultRetryables).IsErrorRetryable(err) == aws.TrueTernary
}

// retry calls call until it succeeds, fails with an error not worth
// retrying, or runs out of attempts or time. Pauses grow exponentially with
// full jitter. With a deadline on ctx, it retries while the next attempt
// can start before the deadline; without one, at most maxRetries times.
// When the context ends during a pause or during an attempt after a
// failure, the error wraps both what the context's end caused and the last
// failure, so the backend's error stays reachable with errors.As.
func (s *Store) retry(ctx context.Context, call func(context.Context) error) error {
	pause := s.backoff
	deadline, hasDeadline := ctx.Deadline()
	var last error
	for attempt := 0; ; attempt++ {
		err := call(ctx)
		if err != nil && last != nil && ctx.Err() != nil && !retryable(err) {
			return fmt.Errorf("%w after %d attempts; last error: %w", err, attempt+1, last)
		}
		if err == nil || !retryable(err) {
			return err
		}
		last = err
		if ctx.Err() != nil {
			return err
		}
		if s.maxRetries == 0 || (!hasDeadline && attempt >= s.maxRetries) {
			return fmt.Errorf("gave up after %d attempts: %w", attempt+1, err)
		}
		wait := time.Duration(rand.Int64N(int64(pause)) + 1)
		if hasDeadline && time.Now().Add(wait).After(deadline) {
			return fmt.Errorf("gave up after %d attempts, before the context's deadline: %w", attempt+1, err)
		}
		t := time.NewTimer(wait)
		select {
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
			return fmt.Errorf("%w after %d attempts; last error: %w", ctx.Err(), attempt+1, err)
		}
		pause = min(2*pause, s.maxBackoff)
	}
}

// Values of Store.returnsItem.
const (
	returnsUnknown = iota
	returnsYes
	returnsNo
)

// parseItem decodes an item read from the table.
func parseItem(av map[string]types.AttributeValue) (*item, error) {
	if len(av) == 0 {
		return &item{}, nil
	}
	it := &item{present: true}
	st, ok := av[AttrState].(*types.AttributeValueMemberB)
	if !ok {
		return nil, fmt.Errorf("%w: dynamo: item has no binary %q attribute", algorithms.ErrCorruptState, AttrState)
	}
	it.state = st.Value
	var err error
	if it.version, err = numberAttr(av, AttrVersion); err != nil {
		return nil, err
	}
	if it.expires, err = numberAttr(av, AttrExpires); err != nil {
		return nil, err
	}
	return it, nil
}

func numberAttr(av map[string]types.AttributeValue, name string) (int64, error) {
	n, ok := av[name].(*types.AttributeValueMemberN)
	if !ok {
		return 0, fmt.Errorf("%w: dynamo: item has no number %q attribute", algorithms.ErrCorruptState, name)
	}
	v, err := strconv.ParseInt(n.Value, 10, 64)
	if err != nil {
		return 0, fmt.Errorf("%w: dynamo: item attribute %q = %q is not an integer", algorithms.ErrCorruptState, name, n.Value)
	}
	return v, nil
}

// ttlSeconds is the TTL attribute for an expiry in microseconds: the whole
// second at or after it.
func ttlSeconds(expires int64) int64 {
	s := expires / 1e6
	if expires%1e6 > 0 {
		s++
	}
	return s
}

// newVersion returns a random version for an item being written. Versions
// are random rather than counted so that no two writes ever share one: a
// key deleted and created again cannot reuse a version a process still
// remembers (which would let its stale write through), and a write whose
// response was lost recognises itself in the item a retry fails against.
func newVersion() int64 { return rand.Int64N(1<<62) + 1 }

package ratelimit

import (
	"context"
	"fmt"
	"math/rand/v2"
	"reflect"
	"testing"
	"time"

	"github.com/ratelimitkit/ratelimit/algorithms"
	"github.com/ratelimitkit/ratelimit/algorithms/forms"
	"github.com/ratelimitkit/ratelimit/internal/fastpath"
	"github.com/ratelimitkit/ratelimit/store"
)

// links returns the types of l's chain, from the caller to the store;
// nil when l has no chain.
func links(l *Limiter) []string {
	var out []string
	for n := l.head; n != nil; {
		out = append(out, reflect.TypeOf(n).String())
		switch v := n.(type) {
		case *storeLink:
			n = nil
		case *denyCache:
			n = v.next
		case *observed:
			n = v.next
		case shadow:
			n = v.next
		case *policyStep:
			n = v.next
		case *fallback:
			n = v.next
		case *breaker:
			n = v.next
		case *budget:
			n = v.next
		default:
			panic(fmt.Sprintf("a link links does not know: %T", n))
		}
	}
	return out
}

// remoteStore is a Store that is not the memory store (no DecideTo), so
// the limiter gives it the default time budget. Its state is a map.
type remoteStore struct{ m map[store.Key][]byte }

func (s *remoteStore) Update(_ context.Context, k store.Key, now int64, fn store.UpdateFunc) error {
	next, _, err := fn(s.m[k], now)
	if err == nil && next != nil {
		s.m[k] = next
	}
	return err
}

func (s *remoteStore) Delete(_ context.Context, k store.Key) error { delete(s.m, k); return nil }

// memoryLike is a Store that decides in process as the memory store does
// (it registers a toDecider with internal/fastpath, as the memory store
// does), so the limiter gives it no default budget.
type memoryLike struct{ remoteStore }

func (s *memoryLike) decideTo(context.Context, store.Key, forms.ToDecider, algorithms.Request) (bool, int64, int64, int64, int64, int64, error) {
	return true, 1, 1, 0, 0, 0, nil
}

func init() {
	fastpath.RegisterDecideTo((*memoryLike)(nil), func(s any) any { return toDecider(s.(*memoryLike).decideTo) })
}

// TestChainOrder checks that New builds the path of docs/failures.md's
// table ("The order of things"), whatever order the options are given
// in: each option adds its one link at its place, the failure policy
// comes with any link, and a limiter on an in-process store without
// options has no chain at all.
func TestChainOrder(t *testing.T) {
	nop := observerFunc(func(context.Context, Event) {})
	alg := algorithms.GCRA(10, time.Second, 10)
	all := []Option{
		WithObserver(nop), WithShadow(), WithDenyCache(10),
		WithFallback(&memoryLike{remoteStore{map[store.Key][]byte{}}}, 2),
		WithCircuitBreaker(3, time.Second), WithStoreTimeout(time.Second),
	}
	want := []string{"*ratelimit.observed", "ratelimit.shadow", "*ratelimit.policyStep", "*ratelimit.denyCache",
		"*ratelimit.fallback", "*ratelimit.breaker", "*ratelimit.budget", "*ratelimit.storeLink"}
	for _, c := range []struct {
		rule  string
		store store.Store
		opts  []Option
		want  []string
	}{
		{"an in-process store without options has no chain", &memoryLike{remoteStore{map[store.Key][]byte{}}}, nil, nil},
		{"a store outside the process gets the budget, and with it the failure policy", &remoteStore{map[store.Key][]byte{}}, nil,
			[]string{"*ratelimit.policyStep", "*ratelimit.budget", "*ratelimit.storeLink"}},
		{"a budget of 0 adds no link", &remoteStore{map[store.Key][]byte{}}, []Option{WithStoreTimeout(0)}, nil},
		{"one option adds one link and the failure policy", &memoryLike{remoteStore{map[store.Key][]byte{}}}, []Option{WithShadow()},
			[]string{"ratelimit.shadow", "*ratelimit.policyStep", "*ratelimit.storeLink"}},
		{"every option, in the table's order", &remoteStore{map[store.Key][]byte{}}, all, want},
	} {
		l, err := New(c.store, alg, c.opts...)
		if err != nil {
			t.Fatalf("%s: New: %v", c.rule, err)
		}
		if got := links(l); !reflect.DeepEqual(got, c.want) {
			t.Errorf("%s: chain %v, want %v", c.rule, got, c.want)
		}
	}
	for seed := range uint64(20) {
		opts := append([]Option(nil), all...)
		rand.New(rand.NewPCG(seed, 0)).Shuffle(len(opts), func(i, j int) { opts[i], opts[j] = opts[j], opts[i] })
		l, err := New(&remoteStore{map[store.Key][]byte{}}, alg, opts...)
		if err != nil {
			t.Fatal(err)
		}
		if got := links(l); !reflect.DeepEqual(got, want) {
			t.Errorf("options shuffled (seed %d): chain %v, want %v", seed, got, want)
		}
	}
}

// TestFallbackSharePerTier checks that each tier keeps the fallback's
// share of its own numbers, made when the tier is, and that the fallback
// decides with it: GCRA with a burst of 10 over 2 replicas admits a cost
// of 5 and denies 6, which only the store could admit.
func TestFallbackSharePerTier(t *testing.T) {
	down := errStore{fmt.Errorf("down")}
	l, err := New(down, algorithms.GCRA(1, time.Hour, 4), WithFallback(&memoryLike{remoteStore{map[store.Key][]byte{}}}, 2), WithStoreTimeout(0))
	if err != nil {
		t.Fatal(err)
	}
	tier, err := l.Tier(algorithms.GCRA(1, time.Hour, 10))
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		t    *Tier
		want int64
	}{{&l.own, 2}, {tier, 5}} {
		if len(c.t.local) != 1 {
			t.Fatalf("tier %v keeps %d things for its links, want 1 (the fallback's share)", c.t.alg, len(c.t.local))
		}
		if got := c.t.local[0].(*Tier).maxCost; got != c.want {
			t.Errorf("tier %v: the fallback's share has max cost %d, want %d", c.t.alg, got, c.want)
		}
		ctx := context.Background()
		if d, err := c.t.AllowN(ctx, "key", int(c.want)); !d.Allowed || d.Source != SourceFallback || err == nil {
			t.Errorf("tier %v: AllowN(key, %d) on a failing store = %+v, %v; want admitted by the fallback, with the error", c.t.alg, c.want, d, err)
		}
		d, err := c.t.AllowN(ctx, "key", int(c.want)+1)
		if d.Allowed || d.Source != SourceFallback || d.RetryAfter != time.Second || err == nil {
			t.Errorf("tier %v: AllowN(key, %d) on a failing store = %+v, %v; want denied by the fallback, retry after 1s (no breaker), with the error", c.t.alg, c.want+1, d, err)
		}
	}
}

// errStore is a Store whose every call fails with err.
type errStore struct{ err error }

func (s errStore) Update(context.Context, store.Key, int64, store.UpdateFunc) error { return s.err }
func (s errStore) Delete(context.Context, store.Key) error                          { return s.err }

// observerFunc adapts a function to an Observer.
type observerFunc func(ctx context.Context, e Event)

func (f observerFunc) ObserveDecision(ctx context.Context, e Event) { f(ctx, e) }

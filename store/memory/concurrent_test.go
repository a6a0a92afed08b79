package memory_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ratelimitkit/ratelimit/algorithms"
	"github.com/ratelimitkit/ratelimit/algorithms/forms"
	"github.com/ratelimitkit/ratelimit/store"
	"github.com/ratelimitkit/ratelimit/store/memory"
)

// TestExactUnderChurn checks that decisions made concurrently on many keys
// admit exactly what one decision after another would, while the entries
// they decide on are reclaimed as they expire (by Sweep and by insertions
// sampling the shards), and other keys in the same shards are inserted and
// deleted so that the shards' indexes are rehashed, shrunk and filled with
// tombstones meanwhile. A decision that wrote to an entry already removed,
// or that lost an entry's state, would admit more than the limit.
//
// Time moves in epochs, each later than every state of the one before has
// expired: within an epoch every decision on a key is made at the same
// instant, so a key's admissions in the epoch must be exactly the limit, or
// its attempts when fewer. Between epochs the workers stop, so no decision
// is made at an epoch's time after the next epoch's has begun.
func TestExactUnderChurn(t *testing.T) {
	const (
		limit   = 8
		keys    = 200
		workers = 4
		perEach = 400 // decisions per worker per epoch
	)
	// Each epoch races its first decision on each key with the removal
	// of the key's expired entry: many short epochs make many races.
	epochs := 300
	if raceEnabled || testing.Short() {
		epochs = 60
	}
	s := memory.MustNew()
	algs := []forms.ToDecider{
		algorithms.FixedWindow(limit, time.Second).(forms.ToDecider),
		algorithms.SlidingWindow(limit, time.Second).(forms.ToDecider),
		algorithms.TokenBucket(limit, time.Second, limit).(forms.ToDecider),
		algorithms.LeakyBucket(limit, time.Second, limit).(forms.ToDecider),
		algorithms.GCRA(limit, time.Second, limit).(forms.ToDecider),
	}
	ctx := context.Background()
	key := func(k int) store.Key {
		return store.Key{Namespace: "exact:" + algs[k%len(algs)].Name(), ID: fmt.Sprintf("k%d", k)}
	}
	const gap = int64(10 * time.Second / time.Microsecond) // between epochs
	var now atomic.Int64                                   // the current epoch's time
	now.Store(epoch.UnixMicro())

	// Churn: other keys, inserted and deleted in the same shards, and
	// Sweep, until the test ends.
	stop := make(chan struct{})
	var churn sync.WaitGroup
	var churnErr atomic.Value
	churn.Add(2)
	go func() {
		defer churn.Done()
		gcra := algs[4]
		for i := 0; ; i++ {
			select {
			case <-stop:
				return
			default:
			}
			// Waves of 2,000 keys: inserted, then deleted, so that
			// the indexes grow and shrink.
			k := store.Key{Namespace: "churn", ID: fmt.Sprintf("c%d", i%2000)}
			if (i/2000)%2 == 0 {
				if _, _, _, _, _, _, err := memory.DecideTo(s, ctx, k, gcra, algorithms.Request{Now: now.Load(), Cost: 1}); err != nil {
					churnErr.Store(err)
					return
				}
			} else if err := s.Delete(ctx, k); err != nil {
				churnErr.Store(err)
				return
			}
		}
	}()
	go func() {
		defer churn.Done()
		for {
			select {
			case <-stop:
				return
			default:
			}
			s.Sweep()
			runtime.Gosched()
		}
	}()
	defer func() {
		close(stop)
		churn.Wait()
		if err := churnErr.Load(); err != nil {
			t.Errorf("churn: %v", err)
		}
	}()

	for e := range epochs {
		at := now.Load()
		var attempts, admitted [keys]atomic.Int64
		var wg sync.WaitGroup
		errs := make(chan error, workers)
		for w := range workers {
			wg.Add(1)
			go func() {
				defer wg.Done()
				rng := rand.New(rand.NewPCG(uint64(e), uint64(w)))
				for range perEach {
					k := rng.IntN(keys)
					allowed, _, _, _, _, _, err := memory.DecideTo(s, ctx, key(k), algs[k%len(algs)], algorithms.Request{Now: at, Cost: 1})
					if err != nil {
						errs <- err
						return
					}
					attempts[k].Add(1)
					if allowed {
						admitted[k].Add(1)
					}
				}
			}()
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			t.Fatalf("epoch %d: %v", e, err)
		}
		for k := range keys {
			if got, want := admitted[k].Load(), min(attempts[k].Load(), limit); got != want {
				t.Errorf("epoch %d, %v (%s): %d of %d attempts admitted, want %d", e, key(k), algs[k%len(algs)].Name(), got, attempts[k].Load(), want)
			}
		}
		now.Add(gap)
	}
}

// TestDeleteRacingDecisions deletes keys while other goroutines decide on
// them. A decision overlapping a deletion may count before or after it, so
// the admissions are only bounded: each deletion lets a key start afresh,
// so a key admits at most the limit once more per deletion. Once the race
// is over, every key's state is whole again: a peek's remaining count is
// exactly what is then admitted, and a deletion starts it afresh. Its
// time, epoch, is a multiple of 256 µs, so every decision the index finds
// also makes its entry the store's hot one, and decisions race deletions
// through the hot entry too.
func TestDeleteRacingDecisions(t *testing.T) {
	const (
		limit   = 5
		keys    = 64
		workers = 4
		perEach = 3000
	)
	s := memory.MustNew()
	alg := algorithms.FixedWindow(limit, time.Hour).(forms.ToDecider)
	ctx := context.Background()
	at := epoch.UnixMicro()
	key := func(k int) store.Key { return store.Key{Namespace: "del", ID: fmt.Sprintf("k%d", k)} }
	var admitted, deletes [keys]atomic.Int64
	var wg sync.WaitGroup
	for w := range workers + 1 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(7, uint64(w)))
			for range perEach {
				k := rng.IntN(keys)
				if w == workers { // the deleter
					if err := s.Delete(ctx, key(k)); err != nil {
						t.Error(err)
						return
					}
					deletes[k].Add(1)
					continue
				}
				allowed, _, _, _, _, _, err := memory.DecideTo(s, ctx, key(k), alg, algorithms.Request{Now: at, Cost: 1})
				if err != nil {
					t.Error(err)
					return
				}
				if allowed {
					admitted[k].Add(1)
				}
			}
		}()
	}
	wg.Wait()
	for k := range keys {
		if got, most := admitted[k].Load(), limit*(deletes[k].Load()+1); got > most {
			t.Errorf("%v: %d admitted with %d deletions, want at most %d", key(k), got, deletes[k].Load(), most)
		}
		// Quiet now: the key's state is whole. A peek reports what is
		// left, and exactly that many more are admitted.
		_, _, left, _, _, _, err := memory.DecideTo(s, ctx, key(k), alg, algorithms.Request{Now: at, Cost: 1, Peek: true})
		if err != nil {
			t.Fatal(err)
		}
		n := int64(0)
		for range limit + 1 {
			allowed, _, _, _, _, _, err := memory.DecideTo(s, ctx, key(k), alg, algorithms.Request{Now: at, Cost: 1})
			if err != nil {
				t.Fatal(err)
			}
			if allowed {
				n++
			}
		}
		if n != left {
			t.Errorf("%v: peek said %d left, then %d admitted", key(k), left, n)
		}
		// And a deletion starts it afresh.
		if err := s.Delete(ctx, key(k)); err != nil {
			t.Fatal(err)
		}
		_, _, left, _, _, _, err = memory.DecideTo(s, ctx, key(k), alg, algorithms.Request{Now: at, Cost: 1})
		if err != nil || left != limit-1 {
			t.Errorf("%v after Delete: remaining %d, %v; want %d", key(k), left, err, limit-1)
		}
	}
}

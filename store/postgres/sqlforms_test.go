package postgres_test

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"reflect"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/ratelimitkit/ratelimit/algorithms"
	"github.com/ratelimitkit/ratelimit/algorithms/forms"
	"github.com/ratelimitkit/ratelimit/internal/walk"
)

func toVals(state []byte) []int64 {
	if state == nil {
		return nil
	}
	v := make([]int64, len(state)/8)
	for i := range v {
		v[i] = int64(binary.LittleEndian.Uint64(state[8*i:]))
	}
	return v
}

func fromVals(v []int64) []byte {
	if v == nil {
		return nil
	}
	b := make([]byte, 0, 8*len(v))
	for _, x := range v {
		b = binary.LittleEndian.AppendUint64(b, uint64(x))
	}
	return b
}

// sqlDecide calls alg's SQL form directly.
func sqlDecide(ctx context.Context, p *testPool, alg algorithms.Algorithm, state []byte, req algorithms.Request) (algorithms.Step, error) {
	var st algorithms.Step
	var next []int64
	var ttl *int64
	d := &st.Decision
	err := p.QueryRow(ctx, "SELECT * FROM "+forms.SQLFunction(alg.Name())+"($1, $2, $3, $4, $5, $6, $7, $8)",
		toVals(state), req.Now, req.Cost, req.Peek, alg.(forms.ServerForm).ServerArgs(), req.MaxDelay, req.Refund, req.Act).
		Scan(&next, &ttl, &d.Allowed, &d.Limit, &d.Remaining, &d.RetryAfter, &d.ResetAfter, &d.Delay)
	if err != nil {
		return st, err
	}
	st.Next = fromVals(next)
	if ttl != nil {
		st.TTL = *ttl
	}
	return st, nil
}

// sqlRowDecide calls alg's SQL row form directly (a request that consumes:
// not a peek), on state that expires at expiresAt, and returns the step as
// the form's would be: the next state with its TTL (expiry - now) and the
// decision.
func sqlRowDecide(ctx context.Context, p *testPool, alg algorithms.Algorithm, state []byte, expiresAt int64, req algorithms.Request) (algorithms.Step, error) {
	var st algorithms.Step
	var next, dec []int64
	var exp *int64
	args := []any{toVals(state), expiresAt, req.Now, req.Cost}
	q := "SELECT * FROM " + forms.SQLRowFunction(alg.Name()) + "($1, $2, $3, $4"
	for i, a := range alg.(forms.ServerForm).ServerArgs() {
		args = append(args, a)
		q += fmt.Sprintf(", $%d", i+5)
	}
	if err := p.QueryRow(ctx, q+")", args...).Scan(&next, &exp, &dec); err != nil {
		return st, err
	}
	if len(dec) != 6 || (next == nil) != (exp == nil) {
		return st, fmt.Errorf("row form returned next %v, expiry %v, decision %v", next, exp, dec)
	}
	st.Next = fromVals(next)
	if exp != nil {
		st.TTL = *exp - req.Now
	}
	st.Decision = algorithms.Decision{Allowed: dec[0] == 1, Limit: dec[1], Remaining: dec[2], RetryAfter: dec[3], ResetAfter: dec[4], Delay: dec[5]}
	return st, nil
}

// TestSQLFormsEqualGoForms holds each SQL form to its Go form directly, on
// random sequences that the conformance suite's differential test does not
// reach: parameters changed between requests (the rate algorithms' float8
// rescale, GCRA's fraction rescale), clocks that step backwards, large
// costs and uneven rates.
func TestSQLFormsEqualGoForms(t *testing.T) {
	p := newTestPool(t, 4)
	newStore(t, p) // installs the functions
	ctx := context.Background()
	const ms = time.Millisecond
	families := [][]algorithms.Algorithm{
		{algorithms.FixedWindow(7, 300*ms), algorithms.FixedWindow(3, 100*ms)},
		{algorithms.SlidingLog(7, 300*ms), algorithms.SlidingLog(20, time.Second)},
		{algorithms.SlidingWindow(7, 300*ms), algorithms.SlidingWindow(13, 700*ms), algorithms.SlidingWindow(1000, 999*ms)},
		{algorithms.TokenBucket(3, 100*ms, 7), algorithms.TokenBucket(7, time.Second, 5), algorithms.TokenBucket(1000, 3*time.Second, 11)},
		{algorithms.LeakyBucket(3, 100*ms, 7), algorithms.LeakyBucket(7, time.Second, 5), algorithms.LeakyBucket(999, 7*time.Second, 13)},
		{algorithms.GCRA(3, 100*ms, 7), algorithms.GCRA(7, time.Second, 5), algorithms.GCRA(1000, 3*time.Second, 11)},
	}
	steps := []int64{0, 0, 1, 7, 1000, 13000, 33333, 99999, 142857, 299999, 300000, 1000000, -1, -5000}
	for _, fam := range families {
		t.Run(fam[0].Name(), func(t *testing.T) {
			for seed := uint64(1); seed <= 4; seed++ {
				rng := rand.New(rand.NewPCG(seed, 0xd1ff))
				w := walk.New(rng, fam, steps, 4, 3)
				var state []byte
				for i := 0; i < 300; i++ {
					alg, req := w.Next()
					now := req.Now
					switch rng.IntN(6) {
					case 0: // a reservation
						req.Peek, req.MaxDelay = false, rng.Int64N(2_000_000)
					case 1: // a refund of a reservation acting around now
						req.Peek, req.Refund, req.Act = false, true, now+rng.Int64N(1_000_000)-200_000
					}
					want, werr := alg.Decide(append([]byte(nil), state...), req)
					got, gerr := sqlDecide(ctx, p, alg, state, req)
					if (werr != nil) != (gerr != nil) {
						t.Fatalf("seed %d step %d: %v with state %v, %+v: Go error %v, SQL error %v", seed, i, alg, toVals(state), req, werr, gerr)
					}
					if werr != nil {
						continue
					}
					if !reflect.DeepEqual(got.Decision, want.Decision) || got.TTL != want.TTL || fmt.Sprint(toVals(got.Next)) != fmt.Sprint(toVals(want.Next)) {
						t.Fatalf("seed %d step %d: %v with state %v, %+v:\nSQL %+v next %v ttl %d\nGo  %+v next %v ttl %d",
							seed, i, alg, toVals(state), req, got.Decision, toVals(got.Next), got.TTL, want.Decision, toVals(want.Next), want.TTL)
					}
					if !req.Peek && req.MaxDelay == 0 && !req.Refund && forms.SQLRowFunction(alg.Name()) != "" {
						// The row form decides the same on live state, and
						// on state that has expired as on no state. (The
						// store sends it no peek, reservation or refund.)
						got, gerr := sqlRowDecide(ctx, p, alg, state, now+1+rng.Int64N(1000), req)
						if gerr != nil || !reflect.DeepEqual(got.Decision, want.Decision) || got.TTL != want.TTL || fmt.Sprint(toVals(got.Next)) != fmt.Sprint(toVals(want.Next)) {
							t.Fatalf("seed %d step %d: %v with state %v, %+v:\nrow form %+v next %v ttl %d (%v)\nGo       %+v next %v ttl %d",
								seed, i, alg, toVals(state), req, got.Decision, toVals(got.Next), got.TTL, gerr, want.Decision, toVals(want.Next), want.TTL)
						}
						if state != nil {
							fresh, _ := alg.Decide(nil, req)
							got, gerr := sqlRowDecide(ctx, p, alg, state, now-rng.Int64N(1000), req)
							if gerr != nil || !reflect.DeepEqual(got.Decision, fresh.Decision) || got.TTL != fresh.TTL || fmt.Sprint(toVals(got.Next)) != fmt.Sprint(toVals(fresh.Next)) {
								t.Fatalf("seed %d step %d: %v with expired state %v, %+v:\nrow form %+v next %v ttl %d (%v)\nGo       %+v next %v ttl %d",
									seed, i, alg, toVals(state), req, got.Decision, toVals(got.Next), got.TTL, gerr, fresh.Decision, toVals(fresh.Next), fresh.TTL)
							}
						}
					}
					if want.Next != nil {
						state = append([]byte(nil), want.Next...)
					}
				}
			}
		})
	}
}

// TestSQLFormsCorruptState checks that state a form cannot read is an error
// with SQLSTATE forms.SQLErrCorrupt, as it is ErrCorruptState in Go.
func TestSQLFormsCorruptState(t *testing.T) {
	p := newTestPool(t, 2)
	newStore(t, p)
	ctx := context.Background()
	cases := []struct {
		alg   algorithms.Algorithm
		state []int64
	}{
		{algorithms.FixedWindow(3, time.Second), []int64{1}},
		{algorithms.SlidingLog(3, time.Second), []int64{1, 2, 3}},
		{algorithms.SlidingLog(3, time.Second), []int64{1_900_000_000_000_000, 0}},
		// Entries out of range, expired or not: a time near 2^63 would
		// overflow the expiry test (Go wraps, SQL raises bigint out of
		// range), a negative one looks expired.
		{algorithms.SlidingLog(3, time.Second), []int64{9_223_372_036_854_775_000, 1}},
		{algorithms.SlidingLog(3, time.Second), []int64{-5, 1, 1, 1}},
		{algorithms.SlidingLog(3, time.Second), []int64{1, 0, 1_900_000_000_000_000, 1}},
		// The same in a log with its header: each entry a decision reads
		// (the expired ones, the newest, a denial's oldest) is checked
		// before any arithmetic on it.
		{algorithms.SlidingLog(3, time.Second), []int64{-1, 2, 9_223_372_036_854_775_000, 1, 1_900_000_000_000_000, 1}},
		{algorithms.SlidingLog(3, time.Second), []int64{-1, 2, 1, 0, 1_900_000_000_000_000, 1}},
		{algorithms.SlidingLog(3, time.Second), []int64{-1, 1, 9_223_372_036_854_775_000, 1}},
		{algorithms.SlidingLog(3, time.Second), []int64{-1, 1, 1_900_000_000_000_000, 1, 1_900_000_000_000_000, 1}},
		{algorithms.SlidingLog(3, time.Second), []int64{-1, 3, 1_800_000_000_000_000, 1}},
		{algorithms.SlidingLog(3, time.Second), []int64{-1, 7, 1_900_000_000_000_000, 1}},
		{algorithms.SlidingLog(3, time.Second), []int64{-1, 1, -5, 1}},
		{algorithms.SlidingLog(3, time.Second), []int64{-1, algorithms.MaxExact + 1, 1_900_000_000_000_000, 1}},
		{algorithms.SlidingLog(3, time.Second), []int64{math.MaxInt64, 1}},
		{algorithms.SlidingLog(3, time.Second), []int64{1_900_000_000_000_000, math.MaxInt64, 1_900_000_000_000_000, math.MaxInt64}},
		{algorithms.SlidingWindow(3, time.Second), []int64{1, 2}},
		{algorithms.TokenBucket(3, time.Second, 3), []int64{1, 2, 0}},
		{algorithms.LeakyBucket(3, time.Second, 3), []int64{1, 2}},
		{algorithms.GCRA(3, time.Second, 3), []int64{1, 5, 3}},
	}
	for _, c := range cases {
		req := algorithms.Request{Now: 1_900_000_000_000_000, Cost: 1}
		_, gerr := c.alg.Decide(fromVals(c.state), req)
		if !errors.Is(gerr, algorithms.ErrCorruptState) {
			t.Errorf("Go form %v on %v: error %v, want ErrCorruptState", c.alg, c.state, gerr)
		}
		_, err := sqlDecide(ctx, p, c.alg, fromVals(c.state), req)
		var pe *pgconn.PgError
		if !errors.As(err, &pe) || pe.Code != forms.SQLErrCorrupt {
			t.Errorf("SQL form %v on %v: error %v, want SQLSTATE %s", c.alg, c.state, err, forms.SQLErrCorrupt)
		}
		if forms.SQLRowFunction(c.alg.Name()) == "" {
			continue
		}
		_, err = sqlRowDecide(ctx, p, c.alg, fromVals(c.state), req.Now+1, req)
		if !errors.As(err, &pe) || pe.Code != forms.SQLErrCorrupt {
			t.Errorf("SQL row form %v on %v: error %v, want SQLSTATE %s", c.alg, c.state, err, forms.SQLErrCorrupt)
		}
		// Expired state is no state: not read, so not corrupt.
		if _, err := sqlRowDecide(ctx, p, c.alg, fromVals(c.state), req.Now, req); err != nil {
			t.Errorf("SQL row form %v on expired %v: error %v, want none", c.alg, c.state, err)
		}
	}
}

// TestSQLSlidingLogLegacy holds the SQL form to the Go form on logs written
// before the header existed: both read them, and both write the header.
func TestSQLSlidingLogLegacy(t *testing.T) {
	p := newTestPool(t, 2)
	newStore(t, p)
	ctx := context.Background()
	const now = 1_900_000_000_000_000
	alg := algorithms.SlidingLog(5, time.Second)
	for _, state := range [][]int64{
		{now - 2_000_000, 1, now - 500_000, 2, now - 100, 1},
		{now - 2_000_000, 5},
		{now - 500_000, 2, now + 100, 3},
	} {
		for _, req := range []algorithms.Request{
			{Now: now, Cost: 1}, {Now: now, Cost: 3}, {Now: now, Cost: 1, Peek: true}, {Now: now - 300, Cost: 1},
		} {
			want, err := alg.Decide(fromVals(state), req)
			if err != nil {
				t.Fatalf("Go form on %v, %+v: %v", state, req, err)
			}
			got, err := sqlDecide(ctx, p, alg, fromVals(state), req)
			if err != nil {
				t.Fatalf("SQL form on %v, %+v: %v", state, req, err)
			}
			if !reflect.DeepEqual(got.Decision, want.Decision) || got.TTL != want.TTL || fmt.Sprint(toVals(got.Next)) != fmt.Sprint(toVals(want.Next)) {
				t.Errorf("on %v, %+v:\nSQL %+v next %v\nGo  %+v next %v", state, req, got.Decision, toVals(got.Next), want.Decision, toVals(want.Next))
			}
		}
	}
}

package algorithms_test

import (
	"bytes"
	"encoding/binary"
	"errors"
	"math/rand/v2"
	"reflect"
	"testing"
	"time"

	"github.com/ratelimitkit/ratelimit/algorithms"
	"github.com/ratelimitkit/ratelimit/algorithms/forms"
)

// logModel is the sliding log as the rule states it: every admitted
// request's (time, cost), kept until now >= time+period, summed in full; a
// request whose reading is older than the newest live entry is logged at
// that entry's time.
type logModel struct {
	at, cost []int64
}

func (m *logModel) decide(limit, period int64, req algorithms.Request) algorithms.Decision {
	var at, cost []int64
	for i := range m.at {
		if req.Now < m.at[i]+period {
			at, cost = append(at, m.at[i]), append(cost, m.cost[i])
		}
	}
	// Oldest first: a stable sort by time keeps equal times in arrival order.
	idx := make([]int, len(at))
	for i := range idx {
		idx[i] = i
	}
	sortStable(idx, func(i, j int) bool { return at[i] < at[j] })
	used, newest := int64(0), int64(-1)
	for _, i := range idx {
		used += cost[i]
		newest = max(newest, at[i])
	}
	d := algorithms.Decision{Limit: limit}
	if newest >= 0 {
		d.ResetAfter = newest + period - req.Now
	}
	if used+req.Cost > limit {
		excess := used + req.Cost - limit
		for _, i := range idx {
			if excess -= cost[i]; excess <= 0 {
				d.RetryAfter = at[i] + period - req.Now
				break
			}
		}
		d.Remaining = max(limit-used, 0)
		return d
	}
	d.Allowed = true
	if req.Peek {
		d.Remaining = max(limit-used, 0)
		return d
	}
	d.Remaining = max(limit-used-req.Cost, 0)
	// A reading older than the newest entry is logged at its time.
	m.at, m.cost = append(at, max(newest, req.Now)), append(cost, req.Cost)
	d.ResetAfter = max(newest, req.Now) + period - req.Now
	return d
}

func sortStable(idx []int, less func(i, j int) bool) {
	for i := 1; i < len(idx); i++ {
		for j := i; j > 0 && less(idx[j], idx[j-1]); j-- {
			idx[j], idx[j-1] = idx[j-1], idx[j]
		}
	}
}

// TestSlidingLogModel holds the sliding log to the model on random
// sequences with clocks that step backwards, with its state passed the
// ways stores pass it: a copy with no room to grow, and the stored state
// itself (DecideInPlace), grown and shifted in place.
func TestSlidingLogModel(t *testing.T) {
	steps := []int64{0, 0, 1, 7, 1000, 13000, 99999, 142857, 299999, 300000, 1000000, -1, -5000, -200000}
	for seed := uint64(1); seed <= 30; seed++ {
		rng := rand.New(rand.NewPCG(seed, 0x10c))
		limit := 1 + rng.Int64N(40)
		period := 1000 * (1 + rng.Int64N(400))
		alg := algorithms.SlidingLog(limit, time.Duration(period)*time.Microsecond).(forms.InPlaceDecider)
		var m logModel
		var copied, inPlace []byte
		var expires int64
		now := int64(1_900_000_000_000_000)
		for i := 0; i < 600; i++ {
			now += steps[rng.IntN(len(steps))]
			req := algorithms.Request{Now: now, Cost: 1, Peek: rng.IntN(8) == 0}
			if !req.Peek && rng.IntN(4) == 0 {
				req.Cost = 1 + rng.Int64N(limit)
			}
			if now >= expires {
				// Expired: no state, but the memory store passes the
				// in-place log's buffer, emptied.
				m, copied, inPlace = logModel{}, nil, inPlace[:0]
			}
			want := m.decide(limit, period, req)
			a, err := alg.Decide(bytes.Clone(copied), req)
			if err != nil {
				t.Fatalf("seed %d step %d: Decide(%+v): %v", seed, i, req, err)
			}
			before := bytes.Clone(inPlace)
			b, err := alg.DecideInPlace(inPlace, req)
			if err != nil {
				t.Fatalf("seed %d step %d: DecideInPlace(%+v): %v", seed, i, req, err)
			}
			if !reflect.DeepEqual(a.Decision, want) || !reflect.DeepEqual(b.Decision, want) {
				t.Fatalf("seed %d step %d: %v.Decide(%+v) = %+v, in place %+v, want %+v", seed, i, alg, req, a.Decision, b.Decision, want)
			}
			if !bytes.Equal(a.Next, b.Next) || a.TTL != b.TTL {
				t.Fatalf("seed %d step %d: next state %v (ttl %d) in place, %v (ttl %d) on a copy", seed, i, b.Next, b.TTL, a.Next, a.TTL)
			}
			if b.Next == nil && !bytes.Equal(before, inPlace) {
				t.Fatalf("seed %d step %d: %+v wrote into the state without returning it", seed, i, req)
			}
			if a.Next != nil {
				copied, inPlace, expires = a.Next, b.Next, now+a.TTL
			}
		}
	}
}

// TestSlidingLogLegacy checks that a log written without its total (the
// layout before it was kept) decides as the same log with it, and is
// rewritten in the current layout when it next admits.
func TestSlidingLogLegacy(t *testing.T) {
	alg := algorithms.SlidingLog(5, time.Second)
	const now = 1_900_000_000_000_000
	fields := func(v ...int64) []byte {
		b := make([]byte, 0, 8*len(v))
		for _, x := range v {
			b = binary.LittleEndian.AppendUint64(b, uint64(x))
		}
		return b
	}
	legacy := fields(now-2_000_000, 1, now-500_000, 2, now-100, 1)
	current := fields(-1, 3, now-500_000, 2, now-100, 1)
	for _, req := range []algorithms.Request{
		{Now: now, Cost: 1}, {Now: now, Cost: 2}, {Now: now, Cost: 3}, {Now: now, Cost: 1, Peek: true}, {Now: now - 300, Cost: 1},
	} {
		old, err := alg.Decide(bytes.Clone(legacy), req)
		if err != nil {
			t.Fatalf("Decide(legacy log, %+v): %v", req, err)
		}
		cur, err := alg.Decide(bytes.Clone(current), req)
		if err != nil {
			t.Fatalf("Decide(log, %+v): %v", req, err)
		}
		if !reflect.DeepEqual(old.Decision, cur.Decision) || !bytes.Equal(old.Next, cur.Next) || old.TTL != cur.TTL {
			t.Errorf("Decide(%+v): legacy log gives %+v next %v, current layout %+v next %v", req, old.Decision, old.Next, cur.Decision, cur.Next)
		}
	}
}

// TestSlidingLogCorrupt lists logs that cannot have been written: each is
// ErrCorruptState, never a decision.
func TestSlidingLogCorrupt(t *testing.T) {
	alg := algorithms.SlidingLog(5, time.Second)
	const now = 1_900_000_000_000_000
	for _, c := range []struct {
		why    string
		fields []int64
	}{
		{"an odd number of fields", []int64{-1, 1, now}},
		{"a total below the number of entries", []int64{-1, 1, now, 1, now, 1}},
		{"a total left over when every entry has expired", []int64{-1, 3, now - 2_000_000, 1}},
		{"a total above the entries' costs on a denial", []int64{-1, 7, now, 1}},
		{"a negative total", []int64{-1, -1}},
		{"an entry of cost 0", []int64{-1, 1, now, 0}},
		{"an entry of negative time", []int64{-1, 1, -5, 1}},
		{"a second header", []int64{-1, 2, -1, 1, now, 1}},
		{"a legacy entry of cost 0", []int64{now, 0}},
		{"a total above MaxExact", []int64{-1, algorithms.MaxExact + 1, now, 1}},
	} {
		b := make([]byte, 0, 8*len(c.fields))
		for _, x := range c.fields {
			b = binary.LittleEndian.AppendUint64(b, uint64(x))
		}
		_, err := alg.Decide(b, algorithms.Request{Now: now, Cost: 1})
		if !errors.Is(err, algorithms.ErrCorruptState) {
			t.Errorf("%v.Decide(%v) = %v, want ErrCorruptState (%s)", alg, c.fields, err, c.why)
		}
	}
}

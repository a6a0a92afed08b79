package algorithms

import (
	"encoding/binary"
	"fmt"
	"time"
)

// SlidingLog admits a request when the cost of all requests admitted in the
// last period, plus its own, is at most limit. It keeps one log entry per
// admitted request (its time and cost), so it is exact (no boundary burst)
// but its state grows with the limit: up to limit entries of 16 bytes each,
// plus 16 bytes for their total. A decision reads only the entries that
// leave the window, the newest one, and for a denial the oldest ones until
// its retry time is known; it never copies or sums the whole log.
//
// Two requests admitted in the same microsecond are two entries: the log
// never merges entries by time.
func SlidingLog(limit int64, period time.Duration) Algorithm {
	a := &slidingLog{limit: limit, period: micros(period)}
	a.err = checkCount("sliding log", "limit", limit)
	if a.err == nil {
		a.err = checkPeriod("sliding log", period)
	}
	a.args = []int64{a.limit, a.period}
	return a
}

type slidingLog struct {
	limit, period int64
	args          []int64
	err           error
}

func (a *slidingLog) Name() string        { return "sliding_log" }
func (a *slidingLog) Validate() error     { return a.err }
func (a *slidingLog) MaxCost() int64      { return a.limit }
func (a *slidingLog) ServerArgs() []int64 { return a.args }
func (a *slidingLog) String() string {
	return fmt.Sprintf("SlidingLog(limit=%d, period=%v)", a.limit, time.Duration(a.period)*time.Microsecond)
}

// The log's state is a header, then the entries, one per admitted request:
// (time, cost), sorted by time. The header has an entry's shape, (-1,
// total): the time -1, which no entry has, marks it, and total is the sum
// of the entries' costs. All are little-endian int64s, so a log of n entries
// takes 16(n+1) bytes. The total lets a decision read only the entries that
// leave the window (and, for a denial, the oldest ones until its retry time
// is known) instead of summing the whole log.
//
// Logs written before the header existed are the entries alone: Decide
// still reads them, summing them once, and writes the header when it next
// admits. Versions without the header read a log with one too: its time -1
// puts it at the front of the window's past, where they drop it as expired.
const (
	logEntrySize  = 16
	logHeaderSize = logEntrySize
	logMarker     = -1
	logMarkerBits = 1<<64 - 1 // logMarker as stored
)

// logEntry returns entry i of entries, checking that it is one the log
// could hold.
func logEntry(entries []byte, i int) (at, cost int64, err error) {
	e := entries[i*logEntrySize:]
	at, cost = int64(binary.LittleEndian.Uint64(e)), int64(binary.LittleEndian.Uint64(e[8:]))
	if at < 0 || at > MaxExact || cost <= 0 || cost > MaxExact {
		return 0, 0, fmt.Errorf("%w: sliding log entry (%d, %d)", ErrCorruptState, at, cost)
	}
	return at, cost, nil
}

// Decide implements Algorithm. An entry counts while now < time+period;
// entries timed after now (clocks that disagree) count too.
//
// It reads the entries that have left the window (the oldest, at the
// front), the newest entry, and for a denial the oldest live entries until
// enough of them would have left. An admitted request's next state is
// state's memory from the first live entry on, with the header written over
// the last expired entry and the request's entry appended (inserted in time
// order behind entries from a clock ahead), or, when at least as many
// entries left the window as stayed, the live entries moved back to the
// front; so no decision copies more than it read, unless state has no room
// to grow. A state of length 0 is no state; its capacity is used if it has
// room. See DecideInPlace.
func (a *slidingLog) Decide(state []byte, req Request) (Step, error) {
	return decideBy(a, state, req)
}

// DecideTo implements forms.ToDecider, with InPlaceDecider's promises:
// see Decide.
func (a *slidingLog) DecideTo(state []byte, req Request) (next []byte, ttl int64, allowed bool, limit, remaining, retryAfter, resetAfter, delay int64, err error) {
	if req.Refund {
		// The log gives nothing back: a refund is answered as a peek.
		req.Peek = true
	}
	if len(state)%logEntrySize != 0 {
		return nil, 0, false, 0, 0, 0, 0, 0, fmt.Errorf("%w: sliding log of %d bytes", ErrCorruptState, len(state))
	}
	entries := state // the log's entries
	used := int64(0) // their total cost
	legacy := true
	if len(state) > 0 && int64(binary.LittleEndian.Uint64(state)) == logMarker {
		legacy, entries = false, state[logHeaderSize:]
		used = int64(binary.LittleEndian.Uint64(state[8:]))
		if used < int64(len(entries)/logEntrySize) || used > MaxExact {
			return nil, 0, false, 0, 0, 0, 0, 0, fmt.Errorf("%w: sliding log of %d entries with total %d", ErrCorruptState, len(entries)/logEntrySize, used)
		}
	} else {
		// A log without its header: sum it once.
		for i := range len(entries) / logEntrySize {
			_, cost, err := logEntry(entries, i)
			if err != nil {
				return nil, 0, false, 0, 0, 0, 0, 0, err
			}
			if used += cost; used > MaxExact {
				return nil, 0, false, 0, 0, 0, 0, 0, fmt.Errorf("%w: sliding log total above %d", ErrCorruptState, int64(MaxExact))
			}
		}
	}
	n := len(entries) / logEntrySize
	// Drop the expired entries: they are the oldest, at the front. Each
	// entry left costs at least 1, so the total never falls below their
	// number.
	first := 0
	for first < n {
		at, cost, err := logEntry(entries, first)
		if err != nil {
			return nil, 0, false, 0, 0, 0, 0, 0, err
		}
		if req.Now < at+a.period {
			break
		}
		first++
		if used -= cost; used < int64(n-first) {
			return nil, 0, false, 0, 0, 0, 0, 0, fmt.Errorf("%w: sliding log total %d below its entries' costs", ErrCorruptState, used)
		}
	}
	newest := int64(-1)
	if first < n {
		at, _, err := logEntry(entries, n-1)
		if err != nil {
			return nil, 0, false, 0, 0, 0, 0, 0, err
		}
		newest = at
	} else if used != 0 {
		return nil, 0, false, 0, 0, 0, 0, 0, fmt.Errorf("%w: sliding log total %d with no live entry", ErrCorruptState, used)
	}
	d := Decision{Limit: a.limit}
	if newest >= 0 {
		d.ResetAfter = newest + a.period - req.Now
	}
	d.Allowed = used+req.Cost <= a.limit
	if !d.Allowed {
		d.Remaining = nonNeg(a.limit - used)
		// Wait until enough of the oldest entries have left the window.
		excess := used + req.Cost - a.limit
		for i := first; i < n && excess > 0; i++ {
			at, cost, err := logEntry(entries, i)
			if err != nil {
				return nil, 0, false, 0, 0, 0, 0, 0, err
			}
			if excess -= cost; excess <= 0 {
				d.RetryAfter = at + a.period - req.Now
			}
		}
		if excess > 0 && req.Cost <= a.limit {
			return nil, 0, false, 0, 0, 0, 0, 0, fmt.Errorf("%w: sliding log total %d above its entries' costs", ErrCorruptState, used)
		}
		return nil, 0, d.Allowed, d.Limit, d.Remaining, d.RetryAfter, d.ResetAfter, d.Delay, nil
	}
	if req.Peek {
		d.Remaining = nonNeg(a.limit - used)
		return nil, 0, d.Allowed, d.Limit, d.Remaining, d.RetryAfter, d.ResetAfter, d.Delay, nil
	}
	d.Remaining = nonNeg(a.limit - used - req.Cost)
	used += req.Cost
	// The request's time: now, or the newest entry's time when now lies
	// behind it (a reading older than the log: clocks that disagree, or a
	// request that read the clock before it queued for the key), so that
	// its entry never leaves the window before the entries it was judged
	// against. Its place: behind every entry timed at or before that.
	stamp := max(req.Now, newest)
	pos := n
	for pos > first {
		at, _, err := logEntry(entries, pos-1)
		if err != nil {
			return nil, 0, false, 0, 0, 0, 0, 0, err
		}
		if at <= stamp {
			break
		}
		pos--
	}
	switch {
	case n == 0 && cap(state) >= logHeaderSize+logEntrySize:
		// No entries, and room for the first one: an expired log's
		// buffer, which the memory store passes emptied.
		next = appendLogEntry(state[:0], logMarker, used)
		next = appendLogEntry(next, stamp, req.Cost)
	case legacy:
		next = make([]byte, 0, logHeaderSize+(n-first+1)*logEntrySize)
		next = appendLogEntry(next, logMarker, used)
		next = append(next, entries[first*logEntrySize:pos*logEntrySize]...)
		next = appendLogEntry(next, stamp, req.Cost)
		next = append(next, entries[pos*logEntrySize:]...)
	default:
		if first > 0 && first >= n-first {
			// At least as many entries left as stayed: move the live ones
			// back to the front, which costs no more than reading the
			// expired ones did, and keeps a short log in its buffer.
			next = state[:logHeaderSize+(n-first)*logEntrySize]
			copy(next[logHeaderSize:], entries[first*logEntrySize:])
		} else {
			// The live entries stay where they are; the header moves to
			// just before them, over the last expired one.
			next = state[first*logEntrySize:]
		}
		binary.LittleEndian.PutUint64(next, logMarkerBits)
		binary.LittleEndian.PutUint64(next[8:], uint64(used))
		if len(next)+logEntrySize > cap(next) {
			// No room: grow to twice the size, so that a log that keeps
			// its length grows again only after as many admissions as it
			// has entries.
			next = append(make([]byte, 0, 2*len(next)+logEntrySize), next...)
		}
		at := logHeaderSize + (pos-first)*logEntrySize
		next = next[:len(next)+logEntrySize]
		copy(next[at+logEntrySize:], next[at:])
		binary.LittleEndian.PutUint64(next[at:], uint64(stamp))
		binary.LittleEndian.PutUint64(next[at+8:], uint64(req.Cost))
	}
	newest = max(newest, req.Now)
	d.ResetAfter = newest + a.period - req.Now
	return next, d.ResetAfter, d.Allowed, d.Limit, d.Remaining, d.RetryAfter, d.ResetAfter, d.Delay, nil
}

// DecideInPlace implements forms.InPlaceDecider: Decide writes into state
// only when it admits a request.
func (a *slidingLog) DecideInPlace(state []byte, req Request) (Step, error) {
	return decideBy(a, state, req)
}

func appendLogEntry(b []byte, at, cost int64) []byte {
	b = binary.LittleEndian.AppendUint64(b, uint64(at))
	return binary.LittleEndian.AppendUint64(b, uint64(cost))
}

package algorithms

import "time"

// Facts is what an algorithm declares about itself for the code that
// holds part of a key's budget on its behalf, or reasons about its
// promise: what a refund gives back, how units the store has counted and
// nobody has spent yet age, whether the state can run ahead of now, and in
// what windows it counts. ratelimit's local quota (WithLocalQuota) reads
// only these facts, never an algorithm's name, so an algorithm that states
// them needs nothing written for it outside this package.
//
// The built-ins state:
//
//	algorithm       Refunds Window  WindowBound Refills Debt  Queue
//	fixed window    yes     period  yes         no      no    no
//	sliding window  yes     period  no          no      no    no
//	sliding log     no      0       no          no      no    no
//	token bucket    yes     0       no          yes     yes   no
//	GCRA            yes     0       no          yes     yes   no
//	leaky bucket    yes     0       no          yes     no    yes
//
// The zero Facts states nothing (its Limit is 0): code that needs a fact
// does without the algorithm, as it does for one that does not implement
// FactStater.
type Facts struct {
	// Limit, Period and Burst are the algorithm's numbers, as its Policy
	// states them: Limit units of cost per Period in the long run, at most
	// Burst at once (a window algorithm's limit, a bucket's burst or
	// capacity).
	Limit  int64
	Period time.Duration
	Burst  int64

	// Refunds reports whether a refund (Request.Refund) can give anything
	// back. Where it is false (the sliding log) a refund is answered as a
	// peek: what the store counted stays counted until it leaves the
	// period. Where it is true, what it gives back is the Window's, the
	// Refills' or the Queue's below.
	Refunds bool

	// Window is, for an algorithm that counts in windows, their length:
	// windows follow each other every Window from instants that are
	// multiples of Window since the Unix epoch, so two instants lie in the
	// same window exactly when their quotients by Window (in µs) agree. A
	// refund gives back within the window its Act falls in, while that
	// window is the current one, and nothing otherwise: Act must name an
	// instant of the window the units were counted in. Zero for an
	// algorithm that does not count in windows.
	Window time.Duration

	// WindowBound reports that units counted in a window belong to it and
	// may be spent only within it (the fixed window): spent in the next
	// window they would be admitted beyond that window's limit. An
	// admitted decision's ResetAfter is then the time until the window it
	// was counted in ends (for a composite, that part's Decision.Parts
	// entry's). Units of an algorithm with a Window that is not bound to
	// it (the sliding window) count in their window and, weighted, in the
	// next; spent later, they admit at most their number more than the
	// limit in a window.
	WindowBound bool

	// Refills reports that the state refills continuously (the buckets):
	// units counted at t and spent at t + d admit up to d × Limit/Period
	// more over a span than the algorithm alone would. A refund gives back,
	// as of its Act, what has not refilled since the units were taken and
	// what no later reservation has built on, never more than an empty
	// state, and nothing once Act has passed: a refund of units that were
	// never spent names Act = now, and the units the state still holds of
	// them come back.
	Refills bool

	// Debt reports whether the state can run ahead of now: a reservation
	// served in the future (Request.MaxDelay) leaves the key owing units
	// that later requests wait behind (the token bucket and GCRA).
	Debt bool

	// Queue reports that admitted units leave a queue one after another,
	// Limit per Period, and that Decision.Delay is the first unit's wait:
	// the units of one admitted request of cost n proceed at Delay,
	// Delay + Period/Limit, and so on (the leaky bucket). A refund gives
	// back queue places from its Act, the time its first unit was to leave
	// the queue; what has left the queue since is gone.
	Queue bool

	// Parts holds, for a composite (All), the facts of each part in
	// order, each as that part states them (the zero Facts for a part that
	// states none); nil for a single algorithm. A composite does what each
	// part does: its own Refunds, Window, WindowBound, Refills, Debt and
	// Queue are false or zero, its Limit and Period its first part's, and
	// its Burst the least of its parts'.
	Parts []Facts
}

// FactStater is implemented by algorithms that state their Facts. Every
// built-in algorithm does, and so does a composite (All), whose Facts
// holds its parts'. A user's algorithm may; code that needs the facts
// (ratelimit.WithLocalQuota) checks for them with a type assertion and
// does without the algorithm when they are missing.
type FactStater interface {
	Algorithm
	// Facts returns the algorithm's facts. They are meaningful only when
	// Validate returns nil.
	Facts() Facts
}

// rateFacts are the facts of a bucket algorithm with the numbers of r; a
// queue's state never runs ahead of now.
func (r rate) rateFacts(queue bool) Facts {
	return Facts{
		Limit:   r.limit,
		Period:  time.Duration(r.period) * time.Microsecond,
		Burst:   r.burst,
		Refunds: true,
		Refills: true,
		Debt:    !queue,
		Queue:   queue,
	}
}

// windowFacts are the facts of a window algorithm of limit per period
// (µs).
func windowFacts(limit, period int64) Facts {
	return Facts{Limit: limit, Period: time.Duration(period) * time.Microsecond, Burst: limit}
}

// Facts implements FactStater: the bucket refills, and reservations run
// ahead of now.
func (a *tokenBucket) Facts() Facts { return a.rateFacts(false) }

// Facts implements FactStater: as the token bucket's.
func (a *gcra) Facts() Facts { return a.rateFacts(false) }

// Facts implements FactStater: admitted units queue, and a refund gives
// back queue places.
func (a *leakyBucket) Facts() Facts { return a.rateFacts(true) }

// Facts implements FactStater: aligned windows of the period, whose units
// belong to their window.
func (a *fixedWindow) Facts() Facts {
	f := windowFacts(a.limit, a.period)
	f.Refunds, f.Window, f.WindowBound = true, f.Period, true
	return f
}

// Facts implements FactStater: aligned windows of the period; units count
// in their window and, weighted, in the next.
func (a *slidingWindow) Facts() Facts {
	f := windowFacts(a.limit, a.period)
	f.Refunds, f.Window = true, f.Period
	return f
}

// Facts implements FactStater: entries count for a period after they are
// admitted, and a refund gives nothing back.
func (a *slidingLog) Facts() Facts { return windowFacts(a.limit, a.period) }

// Facts implements FactStater: each part's facts in Parts (the zero Facts
// for a part that states none), the first part's Limit and Period, and the
// least of the parts' bursts.
func (c *composite) Facts() Facts {
	parts := c.Parts()
	f := Facts{Parts: make([]Facts, len(parts))}
	for i, p := range parts {
		if s, ok := p.(FactStater); ok {
			f.Parts[i] = s.Facts()
		}
		pf := f.Parts[i]
		if i == 0 {
			f.Limit, f.Period, f.Burst = pf.Limit, pf.Period, pf.Burst
		}
		f.Burst = min(f.Burst, pf.Burst)
	}
	return f
}

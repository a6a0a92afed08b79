package algorithms

import "time"

// Policy is an algorithm's numbers stated the way a client can plan with
// them, for example in the IETF RateLimit-Policy header field: a fresh key
// may spend Quota units of cost within Window, and in the long run Limit
// units per Period.
//
// For the window algorithms (fixed window, sliding log, sliding window)
// Quota is the limit and Window the period. For the bucket algorithms
// (token bucket, leaky bucket, GCRA) Quota is the burst (the leaky
// bucket's capacity): the most a key can spend at once; and Window is the
// time the bucket takes to refill that burst from empty, burst × period /
// limit, rounded up to a microsecond. Either way Quota / Window is the
// long-run rate (up to that rounding), and a Decision's Remaining never
// exceeds Quota.
type Policy struct {
	// Algorithm is the algorithm's Name, e.g. "gcra".
	Algorithm string
	// Limit and Period are the long-run rate: Limit units of cost per
	// Period.
	Limit  int64
	Period time.Duration
	// Burst is the most a key may spend at once: the limit of a window
	// algorithm, the burst of the token bucket and GCRA, the capacity of
	// the leaky bucket.
	Burst int64
	// Quota is how much a key with no recent use may spend within Window.
	Quota int64
	// Window is the interval Quota applies to (see the type's doc).
	Window time.Duration
}

// PolicyStater is implemented by algorithms that can state their Policy.
// Every built-in algorithm does; a user's algorithm may. Code that needs a
// policy (the HTTP middleware's RateLimit-Policy field) checks for it with
// a type assertion and does without when it is missing.
type PolicyStater interface {
	Algorithm
	// Policy returns the algorithm's numbers. It is meaningful only when
	// Validate returns nil.
	Policy() Policy
}

// windowPolicy is the policy of a window algorithm: limit per period.
func windowPolicy(name string, limit, period int64) Policy {
	p := time.Duration(period) * time.Microsecond
	return Policy{Algorithm: name, Limit: limit, Period: p, Burst: limit, Quota: limit, Window: p}
}

// policy is the policy of a bucket algorithm: the burst refills at limit
// per period, so a whole burst takes burst × period / limit. The product
// stays below 2^53 by the checks in newRate (burst × unit ≤ 2^51, and
// burst × period = burst × unit × g with g ≤ limit).
func (r rate) policy(name string) Policy {
	window := r.fill // ceil(burst × unit / drip) = ceil(burst × period / limit)
	return Policy{
		Algorithm: name,
		Limit:     r.limit,
		Period:    time.Duration(r.period) * time.Microsecond,
		Burst:     r.burst,
		Quota:     r.burst,
		Window:    time.Duration(window) * time.Microsecond,
	}
}

// Policy implements PolicyStater.
func (a *fixedWindow) Policy() Policy { return windowPolicy(a.Name(), a.limit, a.period) }

// Policy implements PolicyStater.
func (a *slidingLog) Policy() Policy { return windowPolicy(a.Name(), a.limit, a.period) }

// Policy implements PolicyStater.
func (a *slidingWindow) Policy() Policy { return windowPolicy(a.Name(), a.limit, a.period) }

// Policy implements PolicyStater.
func (a *tokenBucket) Policy() Policy { return a.policy(a.Name()) }

// Policy implements PolicyStater.
func (a *leakyBucket) Policy() Policy { return a.policy(a.Name()) }

// Policy implements PolicyStater.
func (a *gcra) Policy() Policy { return a.policy(a.Name()) }

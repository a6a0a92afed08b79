// Package httplimit is net/http middleware that rate-limits requests with
// one or more ratelimit.Limiters and tells clients where they stand in the
// IETF RateLimit-Policy and RateLimit header fields.
//
// A Middleware is built from Rules, each a limiter and the key it counts
// (by default the client's IP address from the connection, IPv6 grouped by
// /64). Its Handler method is a func(http.Handler) http.Handler, so it plugs
// into net/http, chi and any framework with a net/http adapter:
//
//	lim, err := ratelimit.New(memory.MustNew(), algorithms.GCRA(100, time.Minute, 20), ratelimit.WithName("api"))
//	...
//	mw, err := httplimit.New([]httplimit.Rule{{Limiter: lim}})
//	...
//	http.ListenAndServe(addr, mw.Handler(mux))
//
// Every rule that matches a request is consulted. When all admit, the
// request goes on, with headers describing the most restrictive rule; when
// one denies, the answer is 429 Too Many Requests with a Retry-After of at
// least one second and an application/problem+json body. When a store
// fails, the limiter's failure policy decides: fail-open lets the request
// through, fail-closed answers 503 Service Unavailable with a Retry-After;
// either way the error reaches the hook set with WithErrorHook. Never does
// a store failure turn into a 429 that invites an immediate retry.
//
// Behind proxies, use ClientIP with TrustProxies: it walks X-Forwarded-For
// or Forwarded from the right and stops at the first hop it does not
// trust, so a client cannot choose its own key.
package httplimit

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/ratelimitkit/ratelimit"
	"github.com/ratelimitkit/ratelimit/algorithms"
)

// ErrInvalidConfig reports a Middleware that cannot be built: no rules, a
// rule without a limiter, a bad or duplicate name, a bad option.
var ErrInvalidConfig = errors.New("httplimit: invalid configuration")

// Rule is one limit applied to requests: a limiter, and how a request
// yields its key and cost.
type Rule struct {
	// Limiter decides. It is required.
	Limiter *ratelimit.Limiter
	// Name names the rule's policy in the RateLimit fields. It defaults
	// to the limiter's name (ratelimit.WithName), or else its algorithm's
	// name; names must be unique within a Middleware and consist of
	// printable ASCII.
	Name string
	// Key returns the key a request is counted under. It defaults to
	// RemoteIP: the connection's IP address, IPv6 grouped by /64.
	Key KeyFunc
	// Match selects the requests the rule applies to, for per-method or
	// per-route limits; nil matches every request.
	Match func(*http.Request) bool
	// Cost returns what a request costs, at least 1 and at most the
	// algorithm's MaxCost; nil costs 1 per request. A cost out of range is
	// a server error (500), reported to the error hook.
	Cost func(*http.Request) int
	// Tier chooses the numbers a request is limited by, such as those of
	// the caller's plan: a tier of Limiter (ratelimit.Limiter.Tier), or
	// nil for the limiter's own numbers. A key keeps one state whatever
	// its tier, and the RateLimit-Policy and RateLimit fields state the
	// tier's numbers under the rule's name. A nil Tier applies the
	// limiter's own numbers to every request; a tier of another limiter is
	// a server error (500), reported to the error hook.
	Tier TierFunc
}

// Result is what the middleware decided for a request. The deny, failure
// and key-error handlers find it in the request's context with
// ResultFrom.
type Result struct {
	// Rule is the name of the rule that denied, failed or had no key.
	Rule string
	// Decision is that rule's decision.
	Decision ratelimit.Decision
	// RetryAfter is what the Retry-After header says, in whole seconds;
	// zero when it is not set (a key error).
	RetryAfter time.Duration
	// Err is the error from the store or key function, nil on a denial.
	Err error
}

type resultKey struct{}

// ResultFrom returns the Result the middleware attached to ctx before
// calling a deny, failure or key-error handler.
func ResultFrom(ctx context.Context) (Result, bool) {
	r, ok := ctx.Value(resultKey{}).(*Result)
	if !ok {
		return Result{}, false
	}
	return *r, true
}

// Option configures a Middleware.
type Option func(*Middleware) error

// WithDenyHandler replaces the default answer to a denied request (429 with
// an application/problem+json body). The headers, Retry-After included,
// are set before h runs; ResultFrom tells it which rule denied.
func WithDenyHandler(h http.Handler) Option {
	return func(m *Middleware) error {
		if h == nil {
			return fmt.Errorf("%w: nil deny handler", ErrInvalidConfig)
		}
		m.deny = h
		return nil
	}
}

// WithFailureHandler replaces the default answer when a fail-closed
// limiter's store fails (503 with Retry-After and an
// application/problem+json body). Retry-After is set before h runs.
func WithFailureHandler(h http.Handler) Option {
	return func(m *Middleware) error {
		if h == nil {
			return fmt.Errorf("%w: nil failure handler", ErrInvalidConfig)
		}
		m.failure = h
		return nil
	}
}

// WithKeyErrorHandler replaces the default answer to a request whose key
// cannot be determined (400 with an application/problem+json body): a
// RemoteAddr that is not an IP address, a proxy header naming no address,
// a missing key header or context value, a key longer than
// store.MaxKeyLen. To let such requests through instead, pass the
// next handler itself; to skip a rule for them, use Rule.Match.
func WithKeyErrorHandler(h http.Handler) Option {
	return func(m *Middleware) error {
		if h == nil {
			return fmt.Errorf("%w: nil key error handler", ErrInvalidConfig)
		}
		m.keyError = h
		return nil
	}
}

// WithErrorHook sets a function called with every error the limiters
// return (store failures, under either failure policy) and every key
// error. It runs on the request's goroutine and must not write to the
// response.
func WithErrorHook(hook func(*http.Request, error)) Option {
	return func(m *Middleware) error {
		m.hook = hook
		return nil
	}
}

// WithFailureRetryAfter sets the Retry-After of the 503 answered when a
// fail-closed limiter's store fails. It is rounded up to whole seconds and
// must be positive; the default is 5 seconds.
func WithFailureRetryAfter(d time.Duration) Option {
	return func(m *Middleware) error {
		if d <= 0 {
			return fmt.Errorf("%w: failure retry-after %v must be positive", ErrInvalidConfig, d)
		}
		m.failRetry = ceilSeconds(d)
		return nil
	}
}

// WithLegacyHeaders also writes X-RateLimit-Limit, X-RateLimit-Remaining
// and X-RateLimit-Reset for clients that predate the RateLimit fields.
// They describe the most restrictive rule: its quota (q), what remains
// (r), and the seconds from now until it is back to its quota (t) —
// X-RateLimit-Reset is a number of seconds from now, never a timestamp.
func WithLegacyHeaders() Option {
	return func(m *Middleware) error {
		m.legacy = true
		return nil
	}
}

// WithoutDelay stops the middleware from waiting out an admitted
// request's Decision.Delay (set only by the leaky bucket) before calling
// the next handler; the delay is then only stated in the RateLimit field.
func WithoutDelay() Option {
	return func(m *Middleware) error {
		m.noDelay = true
		return nil
	}
}

// Middleware rate-limits requests by its rules. Create it with New; its
// Handler method wraps an http.Handler. A Middleware is safe for
// concurrent use.
type Middleware struct {
	rules     []rule
	allPolicy string // the RateLimit-Policy value when every rule applies
	deny      http.Handler
	failure   http.Handler
	keyError  http.Handler
	hook      func(*http.Request, error)
	failRetry int64 // seconds
	legacy    bool
	noDelay   bool
}

// rule is a Rule with its defaults filled in and its fields serialised.
type rule struct {
	Rule
	policy   string // `"name";q=…;w=…`, or "" when the algorithm states none
	item     string // `"name"`: the start of its RateLimit member
	quota    int64  // q, or Decision.Limit's stand-in when there is no policy
	hasQuota bool
	tiers    *tierRules  // the rule at its tiers' numbers (tiers.go)
	limits   []limitItem // one per limit of a composite (algorithms.All), else nil
}

// New returns a middleware that applies rules to every request they match.
// It reports an error wrapping ErrInvalidConfig when a rule or option is
// unusable.
func New(rules []Rule, opts ...Option) (*Middleware, error) {
	if len(rules) == 0 {
		return nil, fmt.Errorf("%w: no rules", ErrInvalidConfig)
	}
	m := &Middleware{failRetry: 5}
	seen := make(map[string]bool)
	var all []string
	for i, r := range rules {
		if r.Limiter == nil {
			return nil, fmt.Errorf("%w: rule %d has no limiter", ErrInvalidConfig, i)
		}
		if r.Name == "" {
			r.Name = r.Limiter.Name()
		}
		if r.Name == "" {
			r.Name = r.Limiter.Algorithm().Name()
		}
		if seen[r.Name] {
			return nil, fmt.Errorf("%w: two rules named %q; set Rule.Name", ErrInvalidConfig, r.Name)
		}
		seen[r.Name] = true
		if r.Key == nil {
			r.Key = RemoteIP
		}
		ru := rule{Rule: r, tiers: &tierRules{m: make(map[algorithms.Policy]*rule)}}
		var err error
		if ru.item, err = policyItem(r.Name, nil); err != nil {
			return nil, err
		}
		if p, ok := r.Limiter.Policy(); ok {
			ru.quota, ru.hasQuota = p.Quota, true
			if ru.policy, err = policyItem(r.Name, &p); err != nil {
				return nil, err
			}
			all = append(all, ru.policy)
		}
		if ru.limits, err = compositeItems(r.Name, r.Limiter.Algorithm()); err != nil {
			return nil, err
		}
		if p := compositePolicy(ru.limits); p != "" {
			ru.policy = p
			all = append(all, p)
		}
		m.rules = append(m.rules, ru)
	}
	m.allPolicy = strings.Join(all, ", ")
	for _, opt := range opts {
		if err := opt(m); err != nil {
			return nil, err
		}
	}
	if m.deny == nil {
		m.deny = http.HandlerFunc(denied)
	}
	if m.failure == nil {
		m.failure = http.HandlerFunc(unavailable)
	}
	if m.keyError == nil {
		m.keyError = http.HandlerFunc(noKey)
	}
	return m, nil
}

// Handler returns next wrapped by the middleware. Its type is the usual
// middleware shape, func(http.Handler) http.Handler, so m.Handler can be
// passed to routers that take one (chi's Use, for instance).
func (m *Middleware) Handler(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		m.serve(w, r, next)
	})
}

// outcome is one rule's decision on a request.
type outcome struct {
	rule *rule
	d    ratelimit.Decision
}

// Canonical header keys, set directly in the map to skip canonicalising.
const (
	hPolicy     = "Ratelimit-Policy"
	hRateLimit  = "Ratelimit"
	hRetryAfter = "Retry-After"
	hLimit      = "X-Ratelimit-Limit"
	hRemaining  = "X-Ratelimit-Remaining"
	hReset      = "X-Ratelimit-Reset"
)

func (m *Middleware) serve(w http.ResponseWriter, r *http.Request, next http.Handler) {
	v := m.Check(r, w.Header())
	switch v.Status {
	case 0:
		if v.Delay > 0 && !m.noDelay {
			t := time.NewTimer(v.Delay)
			select {
			case <-t.C:
			case <-r.Context().Done():
				t.Stop()
				return // the client is gone; its slot is spent
			}
		}
		next.ServeHTTP(w, r)
	case http.StatusTooManyRequests:
		res := v.Result
		m.answer(w, r, m.deny, &res)
	case http.StatusServiceUnavailable:
		res := v.Result
		m.answer(w, r, m.failure, &res)
	case http.StatusBadRequest:
		res := v.Result
		m.answer(w, r, m.keyError, &res)
	default:
		writeProblem(w, v.Status, http.StatusText(v.Status),
			"The rate limit for this request is misconfigured (its cost or tier).", 0)
	}
}

// Verdict is the middleware's decision on one request, for callers that
// answer it themselves (the grpclimit module answers it in gRPC).
type Verdict struct {
	// Status is 0 when the request may go on; otherwise the HTTP status
	// the middleware answers with: 429 denied, 503 a fail-closed store
	// failed, 400 no key, 500 a cost out of range or a tier of another
	// limiter (Rule.Tier).
	Status int
	// Delay is how long an admitted request should wait before it
	// proceeds (the leaky bucket's Decision.Delay); zero otherwise.
	Delay time.Duration
	// Result says which rule refused and why; it is zero when Status is 0.
	Result Result
}

// Check decides r by the middleware's rules without answering it: it
// writes the header fields (RateLimit-Policy, RateLimit, Retry-After and
// the legacy fields) into h, reports errors to the error hook, and returns
// the verdict. The middleware's Handler is Check followed by the answer;
// Check is for other transports that carry HTTP semantics, like gRPC
// (whose method is r.URL.Path and whose metadata is r.Header).
func (m *Middleware) Check(r *http.Request, h http.Header) Verdict {
	var buf [4]outcome
	outs := buf[:0]
	ctx := r.Context()
	tiered := false // a rule applied at a tier's numbers, not its own
	for i := range m.rules {
		ru := &m.rules[i]
		if ru.Match != nil && !ru.Match(r) {
			continue
		}
		var tier *ratelimit.Tier
		if ru.Tier != nil {
			var err error
			tier = ru.Tier(r)
			if ru, err = ru.at(r, tier); err != nil {
				m.report(r, err)
				return Verdict{Status: http.StatusInternalServerError, Result: Result{Rule: m.rules[i].Name, Err: err}}
			}
			tiered = tiered || tier != nil
		}
		key, err := ru.Key(r)
		if err != nil {
			m.report(r, err)
			return Verdict{Status: http.StatusBadRequest, Result: Result{Rule: ru.Name, Err: err}}
		}
		cost := 1
		if ru.Cost != nil {
			cost = ru.Cost(r)
		}
		var d ratelimit.Decision
		if tier != nil {
			d, err = tier.AllowN(ctx, key, cost)
		} else {
			d, err = ru.Limiter.AllowN(ctx, key, cost)
		}
		if err == nil {
			outs = append(outs, outcome{ru, d})
			continue
		}
		m.report(r, err)
		if d.Source == ratelimit.SourceFallback {
			// The store failed but the limiter's local fallback
			// decided: a real decision, answered as one.
			outs = append(outs, outcome{ru, d})
			continue
		}
		switch {
		case errors.Is(err, ratelimit.ErrInvalidKey):
			return Verdict{Status: http.StatusBadRequest, Result: Result{Rule: ru.Name, Err: err}}
		case errors.Is(err, ratelimit.ErrInvalidCost):
			return Verdict{Status: http.StatusInternalServerError, Result: Result{Rule: ru.Name, Err: err}}
		case d.Allowed:
			continue // fail open: this rule says nothing about the request
		}
		h[hRetryAfter] = []string{strconv.FormatInt(m.failRetry, 10)}
		return Verdict{Status: http.StatusServiceUnavailable,
			Result: Result{Rule: ru.Name, Decision: d, RetryAfter: time.Duration(m.failRetry) * time.Second, Err: err}}
	}
	if len(outs) == 0 {
		return Verdict{}
	}
	if len(outs) == len(m.rules) && !tiered {
		if m.allPolicy != "" {
			h[hPolicy] = []string{m.allPolicy}
		}
	} else if p := joinPolicies(outs); p != "" {
		h[hPolicy] = []string{p}
	}
	// The most restrictive: a denial over an admission (the longest wait
	// among denials); otherwise the least remaining, then the latest reset.
	worst := &outs[0]
	var delay time.Duration
	for i := range outs {
		o := &outs[i]
		delay = max(delay, o.d.Delay)
		if restricts(o.d, worst.d) {
			worst = o
		}
	}
	t := ceilSeconds(worst.d.ResetAfter)
	q, hasQuota := worst.rule.quota, worst.rule.hasQuota
	if v, cq, cok, ok := compositeRateLimit(worst.rule.limits, worst.d); ok {
		h[hRateLimit] = []string{v}
		q, hasQuota = cq, cok
	} else {
		h[hRateLimit] = []string{rateLimitItem(worst.rule.item, worst.d.Remaining, t)}
	}
	if m.legacy {
		if !hasQuota {
			q = int64(worst.d.Limit)
		}
		h[hLimit] = []string{strconv.FormatInt(q, 10)}
		h[hRemaining] = []string{strconv.Itoa(worst.d.Remaining)}
		h[hReset] = []string{strconv.FormatInt(t, 10)}
	}
	if !worst.d.Allowed {
		retry := max(ceilSeconds(worst.d.RetryAfter), 1)
		h[hRetryAfter] = []string{strconv.FormatInt(retry, 10)}
		return Verdict{Status: http.StatusTooManyRequests,
			Result: Result{Rule: worst.rule.Name, Decision: worst.d, RetryAfter: time.Duration(retry) * time.Second}}
	}
	return Verdict{Delay: delay}
}

// restricts reports whether a is more restrictive than b.
func restricts(a, b ratelimit.Decision) bool {
	switch {
	case a.Allowed != b.Allowed:
		return !a.Allowed
	case !a.Allowed:
		return a.RetryAfter > b.RetryAfter
	case a.Remaining != b.Remaining:
		return a.Remaining < b.Remaining
	}
	return a.ResetAfter > b.ResetAfter
}

// report passes err to the error hook, if there is one.
func (m *Middleware) report(r *http.Request, err error) {
	if m.hook != nil {
		m.hook(r, err)
	}
}

// answer calls h with res in the request's context.
func (m *Middleware) answer(w http.ResponseWriter, r *http.Request, h http.Handler, res *Result) {
	h.ServeHTTP(w, r.WithContext(context.WithValue(r.Context(), resultKey{}, res)))
}

// ceilSeconds returns d in whole seconds, rounded up; never negative.
func ceilSeconds(d time.Duration) int64 {
	if d <= 0 {
		return 0
	}
	return int64((d + time.Second - 1) / time.Second)
}

// windowSeconds is a policy window in whole seconds, rounded up, at least 1.
func windowSeconds(p algorithms.Policy) int64 { return max(ceilSeconds(p.Window), 1) }

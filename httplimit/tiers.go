package httplimit

import (
	"fmt"
	"net/http"
	"sync"

	"github.com/ratelimitkit/ratelimit"
	"github.com/ratelimitkit/ratelimit/algorithms"
)

// TierFunc returns the tier a request is limited at: a tier of the rule's
// limiter (ratelimit.Limiter.Tier), such as the one for the caller's plan,
// or nil for the limiter's own numbers.
type TierFunc func(*http.Request) *ratelimit.Tier

// maxTierRules bounds the serialised policies a rule keeps for its tiers.
// Tiers made once at start-up (a few plans) always fit; numbers made per
// request beyond it are serialised per request.
const maxTierRules = 256

// tierRules holds a rule as it applies at each tier's numbers, by policy,
// so that tiers with the same numbers share one and each is serialised
// once.
type tierRules struct {
	mu sync.RWMutex
	m  map[algorithms.Policy]*rule
}

// at returns the rule as it applies at tier t: ru itself for a nil t, and
// otherwise a copy whose RateLimit-Policy member and quota are t's. A tier
// of another limiter is an error wrapping ErrInvalidConfig.
func (ru *rule) at(r *http.Request, t *ratelimit.Tier) (*rule, error) {
	if t == nil {
		return ru, nil
	}
	if t.Limiter() != ru.Limiter {
		return nil, fmt.Errorf("%w: rule %q: the tier for %s %s is not a tier of the rule's limiter", ErrInvalidConfig, ru.Name, r.Method, r.URL.Path)
	}
	p, ok := t.Policy()
	if !ok {
		// No numbers to state: the rule's own answer without a policy,
		// or a composite's, one per limit at the tier's numbers.
		tr := *ru
		tr.policy, tr.quota, tr.hasQuota = "", 0, false
		var err error
		if tr.limits, err = compositeItems(ru.Name, t.Algorithm()); err != nil {
			return nil, err
		}
		tr.policy = compositePolicy(tr.limits)
		return &tr, nil
	}
	c := ru.tiers
	c.mu.RLock()
	tr, ok := c.m[p]
	c.mu.RUnlock()
	if ok {
		return tr, nil
	}
	tr = &rule{Rule: ru.Rule, item: ru.item, quota: p.Quota, hasQuota: true}
	var err error
	if tr.policy, err = policyItem(ru.Name, &p); err != nil {
		return nil, err
	}
	c.mu.Lock()
	if len(c.m) < maxTierRules {
		c.m[p] = tr
	}
	c.mu.Unlock()
	return tr, nil
}

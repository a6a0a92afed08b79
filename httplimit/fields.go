package httplimit

import (
	"fmt"
	"strconv"
	"strings"

	"github.com/dunglas/httpsfv"
	"github.com/ratelimitkit/ratelimit"
	"github.com/ratelimitkit/ratelimit/algorithms"
)

// The RateLimit-Policy and RateLimit fields of
// draft-ietf-httpapi-ratelimit-headers are Structured Field Lists (RFC
// 9651) whose members are Strings naming a policy, with parameters:
//
//	RateLimit-Policy: "api";q=20;w=12
//	RateLimit: "api";r=19;t=1
//
// The parts that are fixed for a rule (the quoted name, the whole policy)
// are serialised once, by httpsfv, when the Middleware is built. Per
// request only two non-negative Integers are appended, which is the whole
// of RFC 9651's serialisation of an Integer (its decimal digits).

// policyItem serialises a rule's policy member, `"name";q=…;w=…`, or just
// its name, `"name"`, when p is nil.
func policyItem(name string, p *algorithms.Policy) (string, error) {
	item := httpsfv.NewItem(name)
	if p != nil {
		item.Params.Add("q", p.Quota)
		item.Params.Add("w", windowSeconds(*p))
	}
	s, err := httpsfv.Marshal(item)
	if err != nil {
		return "", fmt.Errorf("%w: rule name %q cannot be a structured field string (printable ASCII only): %v", ErrInvalidConfig, name, err)
	}
	return s, nil
}

// rateLimitItem serialises one RateLimit member: item (the quoted name)
// with r (remaining) and t (seconds until back to the quota).
func rateLimitItem(item string, r int, t int64) string {
	var buf [128]byte
	b := append(buf[:0], item...)
	b = append(b, ";r="...)
	b = strconv.AppendInt(b, int64(max(r, 0)), 10)
	b = append(b, ";t="...)
	b = strconv.AppendInt(b, t, 10)
	return string(b)
}

// joinPolicies is the RateLimit-Policy value for the rules that applied
// to a request, or "" when none states a policy.
func joinPolicies(outs []outcome) string {
	var b strings.Builder
	for _, o := range outs {
		if o.rule.policy == "" {
			continue
		}
		if b.Len() > 0 {
			b.WriteString(", ")
		}
		b.WriteString(o.rule.policy)
	}
	return b.String()
}

// limitItem is one limit of a rule whose limiter's algorithm is a
// composite (algorithms.All): the rule states one policy per limit, named
// "<rule>-<algorithm>" (or "<rule>-<part name>", Composite.PartNames, when
// two limits share an algorithm), and one RateLimit member per limit.
type limitItem struct {
	policy   string // `"name";q=…;w=…`, or "" when the part states no policy
	item     string // `"name"`
	quota    int64
	hasQuota bool
}

// compositeItems returns the limit items of a rule named name whose
// algorithm is alg, one per part in order, and nil when alg is not a
// composite.
func compositeItems(name string, alg algorithms.Algorithm) ([]limitItem, error) {
	c, ok := alg.(algorithms.Composite)
	if !ok {
		return nil, nil
	}
	parts := c.Parts()
	byIndex := false
	seen := map[string]bool{}
	for _, p := range parts {
		byIndex = byIndex || seen[p.Name()]
		seen[p.Name()] = true
	}
	names := c.PartNames()
	items := make([]limitItem, len(parts))
	for i, p := range parts {
		n := name + "-" + p.Name()
		if byIndex {
			n = name + "-" + names[i]
		}
		var err error
		if items[i].item, err = policyItem(n, nil); err != nil {
			return nil, err
		}
		if ps, ok := p.(algorithms.PolicyStater); ok {
			pol := ps.Policy()
			items[i].quota, items[i].hasQuota = pol.Quota, true
			if items[i].policy, err = policyItem(n, &pol); err != nil {
				return nil, err
			}
		}
	}
	return items, nil
}

// compositePolicy is the RateLimit-Policy value of a composite rule's
// limits: every limit's policy that states one.
func compositePolicy(items []limitItem) string {
	var ps []string
	for _, it := range items {
		if it.policy != "" {
			ps = append(ps, it.policy)
		}
	}
	return strings.Join(ps, ", ")
}

// compositeRateLimit is the RateLimit value of a composite rule's decision
// d: one member per limit, with that limit's own remaining and reset; and
// the quota of the limit with the least remaining (the one d's Remaining
// is), for the legacy fields. ok is false when d carries no per-limit
// figures (a decision the store did not make).
func compositeRateLimit(items []limitItem, d ratelimit.Decision) (value string, quota int64, hasQuota, ok bool) {
	if len(items) == 0 || len(d.Limits) != len(items) {
		return "", 0, false, false
	}
	var b strings.Builder
	least := 0
	for i, l := range d.Limits {
		if i > 0 {
			b.WriteString(", ")
		}
		b.WriteString(rateLimitItem(items[i].item, l.Remaining, ceilSeconds(l.ResetAfter)))
		if l.Remaining < d.Limits[least].Remaining {
			least = i
		}
	}
	return b.String(), items[least].quota, items[least].hasQuota, true
}

package httplimit

import (
	"fmt"
	"strconv"
	"strings"

	"github.com/dunglas/httpsfv"
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

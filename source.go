package ratelimit

// Source says where a Decision came from. The zero value, SourceNone, is the
// source of the empty Decision returned with an input error (a bad key,
// cost or clock reading): nothing was decided.
type Source uint8

const (
	// SourceNone: nothing was decided; the call returned an input error.
	SourceNone Source = iota
	// SourceStore: the store decided. This is the source of every decision
	// of a limiter whose store works.
	SourceStore
	// SourceFallback: the store failed (or the circuit breaker kept the
	// limiter from calling it) and the local fallback limiter decided,
	// with its share of the limit (WithFallback). The error is returned
	// with the decision.
	SourceFallback
	// SourceDenyCache: the local deny cache denied the request without
	// calling the store, because the store denied this key until a time
	// that has not come yet (WithDenyCache).
	SourceDenyCache
	// SourceFailurePolicy: the store failed, there was no fallback to ask,
	// and the failure policy decided (WithFailurePolicy). The error is
	// returned with the decision.
	SourceFailurePolicy
)

var sourceNames = [...]string{"none", "store", "fallback", "deny_cache", "failure_policy"}

// String returns the source's name as metrics label it: "none", "store",
// "fallback", "deny_cache" or "failure_policy".
func (s Source) String() string {
	if int(s) < len(sourceNames) {
		return sourceNames[s]
	}
	return "unknown"
}

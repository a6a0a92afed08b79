package ratelimit

// UsesFastPath reports whether l decides through its store's in-process
// decision function (internal/fastpath), for the tests of package
// ratelimit_test.
func UsesFastPath(l *Limiter) bool { return l.storeLink.to != nil }

// DefaultStoreTimeout is the store budget of a limiter without
// WithStoreTimeout, for the tests of package ratelimit_test.
const DefaultStoreTimeout = defaultStoreTimeout

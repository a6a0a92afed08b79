package memory

// DecideTo is the store's in-process decision, which the limiter finds
// through internal/fastpath, for the tests of package memory_test.
var DecideTo = (*Store).decideTo

package memory

import "github.com/ratelimitkit/ratelimit/internal/fastpath"

// The limiter's default path on this store is decideTo, found by the
// store's type (internal/fastpath), not an exported method.
func init() {
	fastpath.RegisterDecideTo((*Store)(nil), func(s any) any { return s.(*Store).decideTo })
}

package redis

import (
	"fmt"

	"github.com/ratelimitkit/ratelimit"
)

func errorf(format string, args ...any) error {
	return fmt.Errorf("redis: "+format+": %w", append(args, ratelimit.ErrInvalidParams)...)
}

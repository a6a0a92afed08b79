package valkey

import (
	"fmt"

	"github.com/ratelimitkit/ratelimit"
)

func errorf(format string, args ...any) error {
	return fmt.Errorf("valkey: "+format+": %w", append(args, ratelimit.ErrInvalidParams)...)
}

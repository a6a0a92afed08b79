package redis

import (
	"context"
	"fmt"
	"sync"

	goredis "github.com/redis/go-redis/v9"

	"github.com/ratelimitkit/ratelimit/internal/redisengine"
	"github.com/ratelimitkit/ratelimit/store"
)

var (
	_ store.Exporter = (*Store)(nil)
	_ store.Importer = (*Store)(nil)
)

// Scan implements the engine's Scanner: SCAN on the server, or on every
// master of a cluster client, or every shard of a ring, each SCAN bounded
// by redisengine.ExportTimeout. Any other client
// (one of the caller's own implementing UniversalClient) cannot be known
// to reach every node, so it is unsupported.
func (b backend) Scan(ctx context.Context, match string, fn func(keys []string) error) error {
	var mu sync.Mutex // fn runs for one node at a time
	scan := func(ctx context.Context, c *goredis.Client) error {
		var cursor uint64
		for {
			var keys []string
			var next uint64
			err := redisengine.Bounded(ctx, func(ctx context.Context) error {
				var err error
				keys, next, err = c.Scan(ctx, cursor, match, redisengine.ScanBatch).Result()
				return err
			})
			if err != nil {
				return fmt.Errorf("redis: scan %s: %w", c.Options().Addr, err)
			}
			mu.Lock()
			err = fn(keys)
			mu.Unlock()
			if err != nil {
				return err
			}
			if cursor = next; cursor == 0 {
				return nil
			}
		}
	}
	switch c := b.c.(type) {
	case *goredis.Client:
		return scan(ctx, c)
	case *goredis.ClusterClient:
		return c.ForEachMaster(ctx, scan)
	case *goredis.Ring:
		return c.ForEachShard(ctx, scan)
	default:
		return fmt.Errorf("redis: cannot scan every node through a %T: %w", b.c, store.ErrUnsupported)
	}
}

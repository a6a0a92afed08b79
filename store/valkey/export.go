package valkey

import (
	"context"
	"fmt"
	"sync"

	vk "github.com/valkey-io/valkey-go"

	"github.com/ratelimitkit/ratelimit/internal/redisengine"
	"github.com/ratelimitkit/ratelimit/store"
)

var (
	_ store.Exporter = (*Store)(nil)
	_ store.Importer = (*Store)(nil)
)

// Scan implements the engine's Scanner: SCAN on every node the client
// knows that is a primary (ROLE), so that a cluster's replicas do not
// yield their primaries' keys twice; each command bounded by
// redisengine.ExportTimeout.
func (b backend) Scan(ctx context.Context, match string, fn func(keys []string) error) error {
	nodes := b.c.Nodes()
	if b.c.Mode() != vk.ClientModeCluster {
		nodes = map[string]vk.Client{"": b.c}
	}
	var mu sync.Mutex
	for addr, c := range nodes {
		if b.c.Mode() == vk.ClientModeCluster {
			var role []vk.ValkeyMessage
			err := redisengine.Bounded(ctx, func(ctx context.Context) error {
				var err error
				role, err = c.Do(ctx, c.B().Role().Build()).ToArray()
				return err
			})
			if err != nil {
				return fmt.Errorf("valkey: role of %s: %w", addr, err)
			}
			if len(role) == 0 {
				continue
			}
			if r, _ := role[0].ToString(); r != "master" {
				continue
			}
		}
		var cursor uint64
		for {
			var e vk.ScanEntry
			err := redisengine.Bounded(ctx, func(ctx context.Context) error {
				var err error
				e, err = c.Do(ctx, c.B().Scan().Cursor(cursor).Match(match).Count(redisengine.ScanBatch).Build()).AsScanEntry()
				return err
			})
			if err != nil {
				return fmt.Errorf("valkey: scan %s: %w", addr, err)
			}
			mu.Lock()
			err = fn(e.Elements)
			mu.Unlock()
			if err != nil {
				return err
			}
			if cursor = e.Cursor; cursor == 0 {
				break
			}
		}
	}
	return nil
}

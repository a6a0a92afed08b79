package redis

import (
	"context"
	"sync"

	goredis "github.com/redis/go-redis/v9"

	"github.com/ratelimitkit/ratelimit/internal/redisengine"
)

// Node implements redisengine.Router: on a cluster client, the client of
// the master that serves key's slot, as the cluster client last saw the
// cluster; nil on a client of another kind. The engine sends the
// decisions of a batch on keys of one master, whatever their slots, as one
// script run there (redisengine's node form), and each decision whose key
// that master turns out not to serve again through the cluster client.
func (b backend) Node(key string) any {
	cc, ok := b.c.(*goredis.ClusterClient)
	if !ok {
		return nil
	}
	n, err := cc.MasterForKey(context.Background(), key)
	if err != nil || n == nil {
		return nil
	}
	return n
}

// Missed implements redisengine.Router. The cluster client refreshes its
// view of the slots by itself on the MOVED replies the decisions sent
// again meet, so it has nothing to do.
func (b backend) Missed() {}

// onNodes reports whether some call must go to a node of its own.
func onNodes(calls []*redisengine.Call) bool {
	for _, c := range calls {
		if c.Node != nil {
			return true
		}
	}
	return false
}

// send sends each command, words[i], to the master nodes[i] names (a
// *goredis.Client from Node) when it names one, and otherwise through the
// client, which routes it by its key: one pipeline per master named and one
// of the client, all at once. It returns when every command has its reply.
func (b backend) send(ctx context.Context, words [][]any, nodes []any) []*goredis.Cmd {
	cmds := make([]*goredis.Cmd, len(words))
	var pipe goredis.Pipeliner
	byNode := make(map[*goredis.Client]goredis.Pipeliner, 4)
	for i, w := range words {
		if n, ok := nodes[i].(*goredis.Client); ok {
			p := byNode[n]
			if p == nil {
				p = n.Pipeline()
				byNode[n] = p
			}
			cmds[i] = sendOnce(ctx, p, w...)
			continue
		}
		if pipe == nil {
			pipe = b.c.Pipeline()
		}
		cmds[i] = sendOnce(ctx, pipe, w...)
	}
	// Every pipeline at once: all but one on goroutines of their own, the
	// last on this one (a batch of one node's decisions, the usual case,
	// starts none). Every command's error is its own, read by the caller.
	if pipe != nil {
		byNode[nil] = pipe
	}
	var wg sync.WaitGroup
	var last goredis.Pipeliner
	for _, p := range byNode {
		if last != nil {
			wg.Add(1)
			go func(p goredis.Pipeliner) {
				defer wg.Done()
				_, _ = p.Exec(ctx)
			}(last)
		}
		last = p
	}
	_, _ = last.Exec(ctx)
	wg.Wait()
	return cmds
}

package valkey

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	vk "github.com/valkey-io/valkey-go"

	"github.com/ratelimitkit/ratelimit/internal/redisengine"
)

// router is the backend's map of a cluster's slots to its masters' clients
// (redisengine.Router): valkey-go keeps its own but does not show it, so
// the store reads CLUSTER SLOTS itself, once at first use and again when a
// run finds a key its master does not serve, at most every refreshEvery.
// Until the map is read, decisions are coalesced by slot alone.
type router struct {
	c       vk.Client
	slots   atomic.Pointer[slotMap]
	loading atomic.Bool
	last    atomic.Int64 // when the last read started, in Unix nanoseconds
	// clients keeps each master's client from one reading to the next, so
	// that a master keeps its batcher (and the engine's count of them
	// stays that of the masters). Only the reading goroutine uses it.
	clients map[string]vk.Client
}

// slotMap is one reading of CLUSTER SLOTS: each slot's master's client.
type slotMap struct{ node [16384]vk.Client }

// refreshEvery bounds how often the router reads CLUSTER SLOTS.
const refreshEvery = 100 * time.Millisecond

// refreshTimeout bounds one reading of CLUSTER SLOTS.
const refreshTimeout = 2 * time.Second

func newRouter(c vk.Client) *router {
	if c.Mode() != vk.ClientModeCluster {
		return nil
	}
	return &router{c: c}
}

// Node implements redisengine.Router: the client of the master that serves
// key's slot, by the last reading of CLUSTER SLOTS, or nil before the first
// reading is in (which it starts) and on a client that is not a cluster's.
func (b backend) Node(key string) any {
	if b.r == nil {
		return nil
	}
	m := b.r.slots.Load()
	if m == nil {
		b.r.refresh()
		return nil
	}
	if n := m.node[redisengine.ClusterSlot(key)]; n != nil {
		return n
	}
	return nil
}

// Missed implements redisengine.Router: the map is stale, so it is read
// again.
func (b backend) Missed() {
	if b.r != nil {
		b.r.refresh()
	}
}

// refresh reads CLUSTER SLOTS on a goroutine of its own, unless a reading
// is in flight or one started less than refreshEvery ago; the goroutine
// ends with the reading, within refreshTimeout.
func (r *router) refresh() {
	now := time.Now().UnixNano()
	if now-r.last.Load() < int64(refreshEvery) || !r.loading.CompareAndSwap(false, true) {
		return
	}
	r.last.Store(now)
	go func() {
		defer r.loading.Store(false)
		ctx, cancel := context.WithTimeout(context.Background(), refreshTimeout)
		defer cancel()
		if m, err := r.read(ctx); err == nil {
			r.slots.Store(m)
		}
	}()
}

// read reads CLUSTER SLOTS into a slotMap of the clients of valkey-go's
// nodes.
func (r *router) read(ctx context.Context) (*slotMap, error) {
	ranges, err := r.c.Do(ctx, r.c.B().ClusterSlots().Build()).ToArray()
	if err != nil {
		return nil, err
	}
	nodes := r.c.Nodes()
	m := new(slotMap)
	for _, rg := range ranges {
		f, err := rg.ToArray()
		if err != nil || len(f) < 3 {
			return nil, fmt.Errorf("valkey: unexpected CLUSTER SLOTS entry")
		}
		start, err1 := f[0].AsInt64()
		end, err2 := f[1].AsInt64()
		master, err3 := f[2].ToArray()
		if err1 != nil || err2 != nil || err3 != nil || len(master) < 2 || start < 0 || end >= int64(len(m.node)) || start > end {
			return nil, fmt.Errorf("valkey: unexpected CLUSTER SLOTS entry")
		}
		host, err1 := master[0].ToString()
		port, err2 := master[1].AsInt64()
		if err1 != nil || err2 != nil {
			return nil, fmt.Errorf("valkey: unexpected CLUSTER SLOTS entry")
		}
		addr := fmt.Sprintf("%s:%d", host, port)
		n := r.clients[addr]
		if n == nil {
			n = nodes[addr]
			if n != nil {
				if r.clients == nil {
					r.clients = map[string]vk.Client{}
				}
				r.clients[addr] = n
			}
		}
		for s := start; s <= end; s++ {
			m.node[s] = n
		}
	}
	return m, nil
}

// doMulti sends cmds, each to the master nodes[i] names when it names one
// (a vk.Client from Node) and otherwise through the cluster client, one
// DoMulti per master named and one of the client, all at once, and returns
// their results in order.
func (b backend) doMulti(ctx context.Context, cmds vk.Commands, nodes []any) []vk.ValkeyResult {
	out := make([]vk.ValkeyResult, len(cmds))
	type group struct {
		c    vk.Client
		idx  []int
		cmds vk.Commands
	}
	var groups []*group
	byNode := map[vk.Client]*group{}
	for i, cmd := range cmds {
		n, _ := nodes[i].(vk.Client)
		if n == nil {
			n = b.c
		}
		g := byNode[n]
		if g == nil {
			g = &group{c: n}
			byNode[n] = g
			groups = append(groups, g)
		}
		g.idx, g.cmds = append(g.idx, i), append(g.cmds, cmd)
	}
	var wg sync.WaitGroup
	send := func(g *group) {
		for j, r := range g.c.DoMulti(ctx, g.cmds...) {
			out[g.idx[j]] = r
		}
	}
	for _, g := range groups[1:] {
		wg.Add(1)
		go func() {
			defer wg.Done()
			send(g)
		}()
	}
	send(groups[0])
	wg.Wait()
	return out
}

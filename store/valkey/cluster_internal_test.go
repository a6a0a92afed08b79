package valkey

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	vk "github.com/valkey-io/valkey-go"

	"github.com/ratelimitkit/ratelimit"
	"github.com/ratelimitkit/ratelimit/algorithms"
	"github.com/ratelimitkit/ratelimit/internal/redisengine"
	"github.com/ratelimitkit/ratelimit/internal/redisengine/storetest"
	"github.com/ratelimitkit/ratelimit/internal/testserver"
)

// missCounter is the store's backend, counting the runs that found keys
// their master does not serve.
type missCounter struct {
	backend
	missed atomic.Int64
}

func (m *missCounter) Missed() {
	m.missed.Add(1)
	m.backend.Missed()
}

// TestClusterStaleSlots checks the store on a map of the cluster's slots
// that names, for every slot, a master that does not serve it (what the
// store holds for a moment after a resharding): the runs sent on it decide
// nothing on the wrong master, every decision is made again on the right
// one, each key admits exactly its limit, no key is written on a master
// that does not serve it, and the map is read again.
func TestClusterStaleSlots(t *testing.T) {
	c, err := vk.NewClient(vk.ClientOption{InitAddress: testserver.RedisClusterAddrs(t), DisableCache: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	ctx := context.Background()
	r := newRouter(c)
	right, err := r.read(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var masters []vk.Client
	for _, n := range right.node {
		if n != nil && (len(masters) == 0 || masters[len(masters)-1] != n) {
			masters = append(masters, n)
		}
	}
	if len(masters) < 2 {
		t.Fatalf("%d masters, want at least 2", len(masters))
	}
	wrong := new(slotMap)
	for s, n := range right.node {
		for i, m := range masters {
			if m == n {
				wrong.node[s] = masters[(i+1)%len(masters)]
			}
		}
	}
	r.slots.Store(wrong)
	b := &missCounter{backend: backend{c, r}}
	prefix := fmt.Sprintf("rltest-stale-%d", time.Now().UnixNano())
	e, err := redisengine.New("valkey", b, redisengine.WithPrefix(prefix))
	if err != nil {
		t.Fatal(err)
	}
	lim, err := ratelimit.New(&Store{engine: e, client: c}, algorithms.GCRA(4, time.Hour, 4))
	if err != nil {
		t.Fatal(err)
	}
	const keys, perKey, limit, callers = 100, 8, 4, 32
	storetest.AdmitsExactly(t, lim, keys, perKey, limit, callers)
	if b.missed.Load() == 0 {
		t.Error("no run met a key its master does not serve: the test sent none to a wrong master")
	}
	addrOf := map[vk.Client]string{} // the masters' clients of the first reading
	for addr, n := range r.clients {
		addrOf[n] = addr
	}
	written := 0
	for addr, n := range c.Nodes() {
		keys, err := n.Do(ctx, n.B().Keys().Pattern(prefix+":*").Build()).AsStrSlice()
		if err != nil {
			t.Fatal(err)
		}
		for _, k := range keys {
			if own := addrOf[right.node[redisengine.ClusterSlot(k)]]; own != addr {
				t.Errorf("key %s written on %s, whose slot %s serves", k, addr, own)
			}
			written++
		}
	}
	if written != keys {
		t.Errorf("%d keys written, want %d", written, keys)
	}
	deadline := time.Now().Add(5 * time.Second)
	for r.slots.Load() == wrong {
		if time.Now().After(deadline) {
			t.Fatal("the store never read the cluster's slots again")
		}
		time.Sleep(10 * time.Millisecond)
	}
}

package redis

import (
	"context"
	"math/bits"
	"reflect"
	"sync"
	"sync/atomic"
	"time"

	goredis "github.com/redis/go-redis/v9"
)

// A go-redis client created without ContextTimeoutEnabled bounds a call's
// socket reads and writes by its own ReadTimeout and WriteTimeout (five
// seconds each by default, and a read that times out is retried), not by
// the call's context; it honours the context only while the call waits
// for a connection, dials one, or sleeps between retries. The limiter's
// store budget (one second by default) reaches the store as the context's
// deadline, so such a client would hold a decision on a hung server past
// it. Instead of running each call on a goroutine apart from its caller,
// which cost a lone caller about a fifth of its decisions per second
// (issue #29 item 9), the store calls a clone of the client
// (Client.WithTimeout, which shares the client's pools) whose
// read and write timeouts are the time left until the deadline, rounded up
// to a step of at most 1/256 of it: the call then ends by the deadline
// (within 0.4% of what was left) on the caller's own goroutine, and a read
// that timed out is not retried, since the retry's sleep finds the
// context ended.
//
// The clones are kept per step (a few in practice: the limiter's budget
// gives calls whose contexts cannot end shared deadlines a millisecond
// apart, so nearly every call is a second from its deadline), at most
// maxClones of them; a call whose step has no clone once that many exist,
// whose deadline has passed, or whose context can end but has no
// deadline, and every call through a client with hooks (which its clones
// would not run; see hookless), is run detached as before
// (backend.direct). A cluster client
// and a ring have no WithTimeout: their calls are detached.

// maxClones is the most clones a store keeps (timeouts).
const maxClones = 256

// stepBits is how finely the time left is rounded: up to a step of
// 1/2^stepBits of it.
const stepBits = 8

// timeouts hands out clones of c whose timeouts end a call by its
// context's deadline. Its map is copied on write: reading it costs an
// atomic load and a lookup.
type timeouts struct {
	c      *goredis.Client
	mu     sync.Mutex // serializes writers of clones
	clones atomic.Pointer[map[time.Duration]*goredis.Client]
}

// within returns the clone of t's client whose read and write timeouts end
// a call started now by ctx's deadline, or nil (see above); t may be nil.
func (t *timeouts) within(ctx context.Context) *goredis.Client {
	if t == nil {
		return nil
	}
	dl, ok := ctx.Deadline()
	if !ok || !hookless(t.c) {
		return nil
	}
	d := stepUp(time.Until(dl))
	if d <= 0 {
		return nil
	}
	if m := t.clones.Load(); m != nil {
		if c := (*m)[d]; c != nil {
			return c
		}
	}
	return t.add(d)
}

// add makes the clone for timeout d, unless maxClones exist.
func (t *timeouts) add(d time.Duration) *goredis.Client {
	t.mu.Lock()
	defer t.mu.Unlock()
	var old map[time.Duration]*goredis.Client
	if m := t.clones.Load(); m != nil {
		old = *m
	}
	if c := old[d]; c != nil {
		return c
	}
	if len(old) >= maxClones {
		return nil
	}
	m := make(map[time.Duration]*goredis.Client, len(old)+1)
	for k, v := range old {
		m[k] = v
	}
	c := t.c.WithTimeout(d)
	m[d] = c
	t.clones.Store(&m)
	return c
}

// stepUp rounds d up to the next multiple of the power of two that is
// 1/2^stepBits of d's own power of two (1ns below 2^stepBits ns), so that
// the result exceeds d by less than 1/2^stepBits of it. It returns 0 for
// d <= 0.
func stepUp(d time.Duration) time.Duration {
	if d <= 0 {
		return 0
	}
	shift := bits.Len64(uint64(d)) - stepBits
	if shift <= 0 {
		return d
	}
	step := time.Duration(1) << shift
	return (d + step - 1) &^ (step - 1)
}

// hookless reports whether c has no hooks (Client.AddHook), as far as the
// store can see: a clone of WithTimeout keeps none of its parent's in this
// go-redis (they live in the baseClient, which the clone copies without
// them), so a client with hooks, whose hooks would then not see the
// store's calls, is not cloned. It reads go-redis's unexported hook state
// by reflection, along the path hookPath found once, and reports false (so
// the store detaches the client's calls as before) whenever that state is
// not where this version keeps it. It is checked on every call (about
// 20ns), so a hook added after the store was made is seen at once.
func hookless(c *goredis.Client) bool {
	path := hookPath()
	if !path.ok {
		return false
	}
	base := reflect.ValueOf(c).Elem().Field(path.base)
	if base.IsNil() {
		return false
	}
	state := base.Elem().FieldByIndex(path.state) // *atomic.Pointer[hooksState]
	if state.IsNil() {
		return false
	}
	p := state.Elem().Field(path.v).UnsafePointer()
	if p == nil {
		return false
	}
	return reflect.NewAt(path.hooksState, p).Elem().Field(path.slice).Len() == 0
}

// hookPath is where go-redis keeps a client's hooks: Client.baseClient
// (*baseClient) .hooksMixin.state (*atomic.Pointer[hooksState]) .v
// (unsafe.Pointer to a hooksState) and hooksState.slice ([]Hook), as field
// indexes; ok is false when any of it is not there, as in another version.
var hookPath = sync.OnceValue(func() (path struct {
	ok             bool
	base, v, slice int
	state          []int
	hooksState     reflect.Type
}) {
	client := reflect.TypeFor[goredis.Client]()
	base, ok := client.FieldByName("baseClient")
	if !ok || base.Type.Kind() != reflect.Pointer || base.Type.Elem().Kind() != reflect.Struct {
		return path
	}
	mixin, ok := base.Type.Elem().FieldByName("hooksMixin")
	if !ok || mixin.Type.Kind() != reflect.Struct {
		return path
	}
	state, ok := mixin.Type.FieldByName("state")
	if !ok || state.Type.Kind() != reflect.Pointer || state.Type.Elem().Kind() != reflect.Struct {
		return path
	}
	atom := state.Type.Elem()
	v, ok1 := atom.FieldByName("v")
	typ, ok2 := atom.FieldByName("_") // [0]*hooksState
	if !ok1 || !ok2 || v.Type.Kind() != reflect.UnsafePointer || typ.Type.Kind() != reflect.Array ||
		typ.Type.Elem().Kind() != reflect.Pointer || typ.Type.Elem().Elem().Kind() != reflect.Struct {
		return path
	}
	hs := typ.Type.Elem().Elem()
	slice, ok := hs.FieldByName("slice")
	if !ok || slice.Type.Kind() != reflect.Slice || len(base.Index) != 1 || len(v.Index) != 1 || len(slice.Index) != 1 {
		return path
	}
	path.ok = true
	path.base, path.v, path.slice = base.Index[0], v.Index[0], slice.Index[0]
	path.state = append(append([]int{}, mixin.Index...), state.Index...)
	path.hooksState = hs
	return path
})

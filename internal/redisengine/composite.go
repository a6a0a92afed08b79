package redisengine

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"

	"github.com/ratelimitkit/ratelimit"
	"github.com/ratelimitkit/ratelimit/algorithms"
	"github.com/ratelimitkit/ratelimit/algorithms/forms"
)

// allScript is the composite Lua form (forms.CompositeLua): one script
// for every composite of algorithms with generated Lua forms, which names
// its parts in its arguments.
var allScript = NewScript("all", forms.CompositeLua(), 0)

// compositeArgs are a composite's script arguments after the fixed ones:
// the parts' packed parameters, then their names, boxed once.
type compositeArgs struct {
	tail  []any
	slack any
	parts int
}

// composites caches compositeArgs by composite, up to maxCachedParams.
type composites struct {
	m sync.Map // algorithms.Composite → *compositeArgs
	n atomic.Int64
}

// args returns c's compositeArgs, and nil when a part has no generated Lua
// form (forms.CompositeForm).
func (e *Engine) compositeArgs(c algorithms.Composite) *compositeArgs {
	if v, ok := e.comps.m.Load(c); ok {
		return v.(*compositeArgs)
	}
	names, args, ok := forms.CompositeForm(c)
	if !ok {
		return nil
	}
	a := &compositeArgs{tail: []any{forms.PackLuaArgs(args)}, slack: e.slackFor(c), parts: len(names)}
	for _, n := range names {
		a.tail = append(a.tail, n)
	}
	if e.comps.n.Load() < maxCachedParams {
		e.comps.n.Add(1)
		e.comps.m.Store(c, a)
	}
	return a
}

// decideAll decides a composite with one EVALSHA of the composite Lua form,
// atomic on the server, with no retries: the script runs every part's
// decide as a peek, and only when all admit, for real, writing every
// part's state under the one key (see forms.CompositeLua). For a composite
// with a part that has no generated Lua form it returns an error wrapping
// ratelimit.ErrUnsupported without sending anything.
func (e *Engine) decideAll(ctx context.Context, key ratelimit.Key, c algorithms.Composite, req algorithms.Request) (algorithms.Decision, error) {
	a := e.compositeArgs(c)
	if a == nil {
		return algorithms.Decision{}, fmt.Errorf("%s: composite %v has a part without a generated Lua form: %w", e.name, c, ratelimit.ErrUnsupported)
	}
	what := fmt.Sprintf("decide %s for %q", c.Name(), key.String())
	p := &pending{}
	p.key[0] = StateKey(e.prefix, key)
	args := make([]any, 0, forms.LuaFixedArgs+len(a.tail))
	args = append(args, req.Now, req.Cost, flag(req.Peek), flag(e.serverClock), a.slack)
	args = append(args, a.tail...)
	p.Script, p.Keys, p.Args, p.Ints = allScript, p.key[:], args, true
	var r any
	var err error
	if e.batch == nil {
		r, err = e.run(ctx, allScript, p.Keys, p.Args)
	} else if err = e.batch.do(ctx, p); err == nil {
		r, err = p.Reply, p.Err
	}
	if err != nil {
		return algorithms.Decision{}, wrap(ctx, e.name, what, err)
	}
	f := make([]int64, forms.LuaReplyLen*a.parts)
	if err := Ints(r, f); err != nil {
		return algorithms.Decision{}, fmt.Errorf("%s: %s: %w", e.name, what, err)
	}
	parts := make([]algorithms.Decision, a.parts)
	for i := range parts {
		parts[i] = decision(f[forms.LuaReplyLen*i:])
	}
	return algorithms.Combine(parts), nil
}

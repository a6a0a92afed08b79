package redisengine

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/ratelimitkit/ratelimit/algorithms"
	"github.com/ratelimitkit/ratelimit/algorithms/forms"
	"github.com/ratelimitkit/ratelimit/store"
)

// allScript is the composite Lua form (forms.CompositeLua): one script
// for every composite of built-in algorithms, which names its parts in its
// arguments; its coalesced form (lua/many/all.lua) decides a batch's
// composite decisions on keys that share a run, as a single algorithm's
// does (see batcher).
var allScript = func() *Script {
	s := NewScript("all", forms.CompositeLua(), 0)
	if many, ok := forms.ManyLua("all"); ok {
		s.Many = NewScript("all (many)", many, 0)
	}
	return s
}()

// compositeArgs are a composite's script arguments after the fixed ones:
// its parts (their names, separated by spaces, a newline, then their
// packed parameters: the composite forms' ARGV[6]), boxed once.
type compositeArgs struct {
	parts any
	slack any
	n     int // how many parts
}

// composites caches compositeArgs by composite, up to maxCachedParams.
type composites struct {
	m sync.Map // algorithms.Composite → *compositeArgs
	n atomic.Int64
}

// args returns c's compositeArgs, and nil when a part has no composite Lua
// form (forms.CompositeForm).
func (e *Engine) compositeArgs(c algorithms.Composite) *compositeArgs {
	if v, ok := e.comps.m.Load(c); ok {
		return v.(*compositeArgs)
	}
	names, args, ok := forms.CompositeForm(c)
	if !ok {
		return nil
	}
	a := &compositeArgs{parts: strings.Join(names, " ") + "\n" + forms.PackLuaArgs(args), slack: e.slackFor(c), n: len(names)}
	if e.comps.n.Load() < maxCachedParams {
		e.comps.n.Add(1)
		e.comps.m.Store(c, a)
	}
	return a
}

// decideAll decides a composite with one EVALSHA of the composite Lua form,
// atomic on the server, with no retries: the script runs every part's
// decide as a peek, and only when all admit, for real, writing every
// part's state under the one key (see algorithms/forms/lua.go). Concurrent
// decisions share round trips, and a batch's decisions of one composite
// on keys that share a run are decided in one run of the coalesced form,
// as a single algorithm's are (see batcher). For a composite with a part
// that has no composite Lua form it returns an error wrapping
// store.ErrUnsupported without sending anything.
func (e *Engine) decideAll(ctx context.Context, key store.Key, c algorithms.Composite, req algorithms.Request) (algorithms.Decision, error) {
	a := e.compositeArgs(c)
	if a == nil {
		return algorithms.Decision{}, fmt.Errorf("%s: composite %v has a part without a composite Lua form: %w", e.name, c, store.ErrUnsupported)
	}
	what := fmt.Sprintf("decide %s for %q", c.Name(), key.String())
	p := &pending{}
	p.key[0] = StateKey(e.prefix, key)
	p.args = [...]any{req.Now, req.Cost, flag(req.Peek), flag(e.serverClock), a.slack, a.parts, req.MaxDelay, flag(req.Refund), req.Act}
	p.Script, p.Keys, p.Args, p.Ints = allScript, p.key[:], p.args[:forms.LuaFixedArgs+1], true
	if req.MaxDelay != 0 || req.Refund {
		p.Args = p.args[:] // see Engine.decide
	}
	p.req, p.width = req, forms.LuaReplyLen*a.n
	f := make([]int64, forms.LuaReplyLen*a.n)
	var err error
	decoded := true
	if e.batch == nil {
		var r any
		if r, err = e.run(ctx, allScript, p.Keys, p.Args); err != nil {
			decoded = false
		} else {
			err = Ints(r, f)
		}
	} else if err = e.batch.do(ctx, p); err != nil {
		decoded = false
	} else {
		switch {
		case p.Err != nil:
			decoded, err = false, p.Err
		case p.ints != nil:
			err = ints(p.ints, nil, f)
		case p.fields != nil:
			err = fields(p.fields, f)
		default:
			err = Ints(p.Reply, f)
		}
	}
	if err != nil {
		if decoded {
			return algorithms.Decision{}, fmt.Errorf("%s: %s: %w", e.name, what, err)
		}
		return algorithms.Decision{}, wrap(ctx, e.name, what, err)
	}
	parts := make([]algorithms.Decision, a.n)
	for i := range parts {
		parts[i] = decision(f[forms.LuaReplyLen*i:])
	}
	return algorithms.Combine(parts), nil
}

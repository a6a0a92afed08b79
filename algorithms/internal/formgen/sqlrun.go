package main

import (
	"fmt"
	"sort"
	"strconv"
	"strings"
)

// The symbolic run of decide (see sql.go): expressions as shared nodes,
// returns as a tree of outcomes.

// snode is a node of the expressions the symbolic run builds. Equal nodes
// are shared (hash-consed), so a value computed twice in Go is one node.
type snode struct {
	id   int
	t    typ
	op   string // "leaf", "bin", "not", "neg", "call", "case"
	text string // a leaf's SQL, a bin's operator, a call's function
	kids []*snode
	def  *site // where the Go form first gives it a value, for its name; or nil

	mat     string // the variable that holds it, when materialized
	place   *outcome
	placeOK bool
}

// outcome is the tree the returns of decide form: a branch on cond, or a
// return with the values it replies.
type outcome struct {
	cond      *snode
	then, els *outcome
	parent    *outcome
	val       *snode            // the TTL, or a helper's value
	env       map[string]*snode // the variables at the return
	dec       string
	mats      []*snode // nodes computed at the start of this branch
	at        []goLine // the Go ifs (a branch) or returns (a return) it comes from
}

type sqlGen struct {
	f *form
	// unpacked: the form's function reads each parameter from args, and
	// each state field from state, once into a variable (arg_<name>,
	// st_<name>), and its expressions read the variables. PostgreSQL sets
	// up every array subscript of an expression again in each transaction
	// (a decision is one), which costs far more than the variable.
	unpacked bool
	// row: the node table of the row form (see sqlRowForm), which never
	// peeks and takes the algorithm's parameters one by one.
	row    bool
	nodes  map[string]*snode
	all    []*snode
	funcs  []*helper
	isFunc map[*helper]bool
}

func (g *sqlGen) intern(n *snode) *snode {
	var k strings.Builder
	fmt.Fprintf(&k, "%s|%s|%d", n.op, n.text, n.t)
	for _, c := range n.kids {
		fmt.Fprintf(&k, "|%d", c.id)
	}
	if m, ok := g.nodes[k.String()]; ok {
		return m
	}
	n.id = len(g.all) + 1
	g.nodes[k.String()] = n
	g.all = append(g.all, n)
	return n
}

func (g *sqlGen) leaf(text string, t typ) *snode {
	return g.intern(&snode{op: "leaf", text: text, t: t})
}

func (g *sqlGen) isConst(n *snode) (string, bool) {
	if n.op == "leaf" && (n.text == "true" || n.text == "false") {
		return n.text, true
	}
	return "", false
}

func (g *sqlGen) not(x *snode) *snode {
	if c, ok := g.isConst(x); ok {
		return g.leaf(strconv.FormatBool(c != "true"), tBool)
	}
	if x.op == "not" {
		return x.kids[0]
	}
	return g.intern(&snode{op: "not", t: tBool, kids: []*snode{x}})
}

func (g *sqlGen) bin(op string, x, y *snode) *snode {
	t := eBin{op: op}.exprType()
	if op == "&&" || op == "||" {
		cx, okx := g.isConst(x)
		cy, oky := g.isConst(y)
		switch {
		case okx && (cx == "true") == (op == "&&"):
			return y
		case oky && (cy == "true") == (op == "&&"):
			return x
		case okx:
			return x
		case oky:
			return y
		}
	}
	return g.intern(&snode{op: "bin", text: op, t: t, kids: []*snode{x, y}})
}

func (g *sqlGen) caseOf(c, a, b *snode) *snode {
	if a == b {
		return a
	}
	if v, ok := g.isConst(c); ok {
		if v == "true" {
			return a
		}
		return b
	}
	return g.intern(&snode{op: "case", t: a.t, kids: []*snode{c, a, b}})
}

// eval builds the node of e with the variables in env.
func (g *sqlGen) eval(e expr, env map[string]*snode) *snode {
	switch e := e.(type) {
	case eConst:
		if e.t == tBool {
			return g.leaf(strconv.FormatBool(e.v == 1), tBool)
		}
		return g.leaf(strconv.FormatInt(e.v, 10), tInt)
	case eVar:
		n, ok := env[e.name]
		if !ok {
			panic("formgen: SQL: " + e.name + " read before it is assigned")
		}
		return n
	case eArg:
		if g.unpacked {
			return g.leaf("arg_"+snake(e.name), tInt)
		}
		return g.leaf(fmt.Sprintf("args[%d]", e.i+1), tInt)
	case eIn:
		switch e.name {
		case "now":
			return g.leaf("now_us", tInt)
		case "live":
			// The stored state is checked before anything else is
			// computed (see SQL), so live is whether there is state.
			return g.leaf("(state IS NOT NULL)", tBool)
		case "peek", "refund":
			if g.row {
				return g.leaf("false", tBool)
			}
		case "max_delay", "act":
			if g.row {
				return g.leaf("0", tInt)
			}
		}
		return g.leaf(e.name, e.exprType())
	case eNot:
		return g.not(g.eval(e.x, env))
	case eNeg:
		return g.intern(&snode{op: "neg", t: tInt, kids: []*snode{g.eval(e.x, env)}})
	case eBin:
		return g.bin(e.op, g.eval(e.x, env), g.eval(e.y, env))
	case eCall:
		var kids []*snode
		for _, a := range e.args {
			kids = append(kids, g.eval(a, env))
		}
		return g.intern(&snode{op: "call", text: e.fn, t: tInt, kids: kids})
	case eHelper:
		var kids []*snode
		for _, a := range e.args {
			kids = append(kids, g.eval(a, env))
		}
		if e.h.loops {
			g.function(e.h)
			kids = append(kids, g.leaf(g.argsArray(), tInt))
			return g.intern(&snode{op: "call", text: g.funcName(e.h), t: e.h.result, kids: kids})
		}
		henv := map[string]*snode{}
		for i, p := range e.h.params {
			henv[p.name] = kids[i]
		}
		o, _ := g.exec(nest(e.h.body), henv, nil)
		return g.fold(o)
	}
	panic(fmt.Sprintf("formgen: unexpected %T", e))
}

// argsArray is the algorithm's parameters as a bigint[], as its helper
// functions take them: the form's args, or in the row form an array of its
// parameters.
func (g *sqlGen) argsArray() string {
	if !g.row {
		return "args"
	}
	var a []string
	for _, n := range g.f.args {
		a = append(a, "arg_"+snake(n))
	}
	return "ARRAY[" + strings.Join(a, ", ") + "]"
}

func (g *sqlGen) funcName(h *helper) string { return "ratelimit_" + g.f.name + "_" + snake(h.name) }

func (g *sqlGen) function(h *helper) {
	if !g.isFunc[h] {
		g.isFunc[h] = true
		g.funcs = append(g.funcs, h)
	}
}

// fold turns a helper's outcome into its value.
func (g *sqlGen) fold(o *outcome) *snode {
	if o.cond == nil {
		return o.val
	}
	return g.caseOf(o.cond, g.fold(o.then), g.fold(o.els))
}

func clone(env map[string]*snode) map[string]*snode {
	c := make(map[string]*snode, len(env))
	for k, v := range env {
		c[k] = v
	}
	return c
}

// exec runs a block (nested: returns only end the branches of a tree of
// ifs) over env. It returns the outcome when the block returns, or the
// variables at its end when it falls through.
func (g *sqlGen) exec(b []stmt, env map[string]*snode, parent *outcome) (*outcome, map[string]*snode) {
	for _, s := range b {
		switch s := s.(type) {
		case sAssign:
			vals := make([]*snode, len(s.rhs))
			for i, r := range s.rhs {
				vals[i] = g.eval(r, env)
			}
			for i, v := range s.lhs {
				if vals[i].def == nil && isSite(s.rhs[i]) {
					vals[i].def = &site{v: g.f.goName(v.name), at: s.at}
				}
				env[v.name] = vals[i]
			}
		case sIf:
			c := g.eval(s.cond, env)
			if c.def == nil && c.op != "leaf" {
				c.def = &site{at: s.at}
			}
			if hasReturn(s.then) || hasReturn(s.els) {
				o := &outcome{cond: c, parent: parent, at: []goLine{s.at}}
				o.then, _ = g.exec(s.then, clone(env), o)
				o.els, _ = g.exec(s.els, clone(env), o)
				return o, nil
			}
			_, te := g.exec(s.then, clone(env), parent)
			_, ee := g.exec(s.els, clone(env), parent)
			keys := make([]string, 0, len(env))
			for k := range env {
				keys = append(keys, k)
			}
			sort.Strings(keys) // node ids, and so names, do not depend on map order
			for _, k := range keys {
				env[k] = g.caseOf(c, te[k], ee[k])
				if env[k].def == nil && env[k].op != "leaf" {
					env[k].def = &site{v: g.f.goName(k), at: s.at, join: true}
				}
			}
		case sFor:
			panic("formgen: SQL: a loop outside a helper")
		case sReturn:
			return &outcome{val: g.eval(s.val, env), env: env, dec: s.dec, parent: parent, at: []goLine{s.at}}, nil
		}
	}
	return nil, env
}

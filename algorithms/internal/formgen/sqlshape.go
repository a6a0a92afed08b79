package main

import (
	"slices"
	"strconv"
	"strings"
)

// The returns' shape: what each RETURN replies, denials merged, and the
// row form's returns split on the decision's allowed flag.

// rows sets, for every return, the nodes of its ROW: next_state and ttl
// (both NULL when the TTL is the constant 0: nothing to store), then the
// decision's fields.
func (g *sqlGen) rows(o *outcome, rows map[*outcome][]*snode) {
	if o.cond != nil {
		g.rows(o.then, rows)
		g.rows(o.els, rows)
		return
	}
	null := g.leaf("NULL", tInt)
	r := []*snode{null, null}
	if !g.zero(o.val) {
		var st []*snode
		for _, s := range g.f.state {
			st = append(st, o.env["s_"+s.name])
		}
		r = []*snode{g.intern(&snode{op: "array", kids: st}), o.val}
	}
	for _, f := range g.f.decision {
		r = append(r, o.env[o.dec+"_"+f.name])
	}
	rows[o] = r
}

func (g *sqlGen) zero(n *snode) bool { return n.op == "leaf" && n.text == "0" }

// callsHelper reports whether evaluating the nodes calls a helper
// function (a loop): such a RETURN stays behind its own IF, so that only
// the requests that need the call make it.
func callsHelper(ns []*snode) bool {
	seen := map[*snode]bool{}
	var walk func(n *snode) bool
	walk = func(n *snode) bool {
		if seen[n] {
			return false
		}
		seen[n] = true
		if n.op == "call" && strings.HasPrefix(n.text, "ratelimit_") {
			return true
		}
		return slices.ContainsFunc(n.kids, walk)
	}
	return slices.ContainsFunc(ns, walk)
}

// mergeReturns turns IF c1 THEN RETURN a; IF c2 THEN RETURN b; ... into
// IF c1 OR c2 THEN RETURN (a or b, field by field); ... when neither a nor
// b stores state (a denial, a peek) or calls a helper function: one IF
// less to prepare on the path that goes on, usually the admitted
// request's.
func (g *sqlGen) mergeReturns(o *outcome, rows map[*outcome][]*snode) {
	if o.cond == nil {
		return
	}
	for o.then.cond == nil && g.zero(o.then.val) && o.els.cond != nil &&
		o.els.then.cond == nil && g.zero(o.els.then.val) &&
		!callsHelper(rows[o.then]) && !callsHelper(rows[o.els.then]) {
		a, b := rows[o.then], rows[o.els.then]
		leaf := &outcome{val: o.then.val, parent: o, at: append(slices.Clone(o.then.at), o.els.then.at...)}
		r := make([]*snode, len(a))
		for i := range a {
			r[i] = g.caseOf(o.cond, a[i], b[i])
		}
		rows[leaf] = r
		o.cond = g.bin("||", o.cond, o.els.cond)
		o.at = append(o.at, o.els.at...)
		o.then, o.els = leaf, o.els.els
		o.els.parent = o
	}
	g.mergeReturns(o.then, rows)
	g.mergeReturns(o.els, rows)
}

// splitAllowed turns every return whose decision's allowed field is not a
// constant into IF allowed THEN (the return, allowed true) ELSE (the
// return, allowed false), each folded with what it knows: PostgreSQL sets
// up only the RETURN a request takes, and each is smaller than both in one
// (an admitted request's retry time is 0, a denied one's state is not
// advanced). The row form does it: its requests never peek, so most are
// admitted ones that write.
func (g *sqlGen) splitAllowed(o *outcome, rows map[*outcome][]*snode) {
	if o.cond != nil {
		g.splitAllowed(o.then, rows)
		g.splitAllowed(o.els, rows)
		return
	}
	i := slices.IndexFunc(g.f.decision, func(f field) bool { return f.t == tBool })
	if i < 0 {
		return
	}
	a := rows[o][2+i]
	if _, ok := g.isConst(a); ok {
		return
	}
	// What the IFs on the way here tell about a: a conjunct of a
	// condition taken is true, a disjunct of one not taken false.
	for c, p := o, o.parent; p != nil; c, p = p, p.parent {
		if v, ok := g.implies(p.cond, c == p.then, a); ok {
			rows[o] = g.substRow(rows[o], a, v)
			return
		}
	}
	var then, els *outcome
	for _, v := range []bool{true, false} {
		leaf := &outcome{val: o.val, env: o.env, dec: o.dec, parent: o, at: o.at}
		rows[leaf] = g.substRow(slices.Clone(rows[o]), a, v)
		if v {
			then = leaf
		} else {
			els = leaf
		}
	}
	delete(rows, o)
	o.cond, o.then, o.els, o.val, o.env = a, then, els, nil, nil
	o.at = nil
	if a.def != nil {
		o.at = []goLine{a.def.at}
	}
}

// substRow replaces, in place, the node a by the constant v in each node of
// a return's row, folded, and returns the row.
func (g *sqlGen) substRow(row []*snode, a *snode, v bool) []*snode {
	memo := map[*snode]*snode{}
	c := g.leaf(strconv.FormatBool(v), tBool)
	for j, n := range row {
		row[j] = g.subst(n, a, c, memo)
	}
	return row
}

// implies reports the value of a when cond is known to be taken (true) or
// not: a or its negation among the conjuncts of a condition that holds, or
// among the disjuncts of one that does not.
func (g *sqlGen) implies(cond *snode, taken bool, a *snode) (v, ok bool) {
	op := "&&"
	if !taken {
		op = "||"
	}
	if cond.op == "bin" && cond.text == op {
		if v, ok := g.implies(cond.kids[0], taken, a); ok {
			return v, ok
		}
		return g.implies(cond.kids[1], taken, a)
	}
	switch {
	case cond == a:
		return taken, true
	case cond.op == "not" && cond.kids[0] == a:
		return !taken, true
	}
	return false, false
}

// subst returns n with every occurrence of the node a replaced by v, folded.
func (g *sqlGen) subst(n, a, v *snode, memo map[*snode]*snode) *snode {
	if n == a {
		return v
	}
	if m, ok := memo[n]; ok {
		return m
	}
	m := n
	if len(n.kids) > 0 {
		kids := make([]*snode, len(n.kids))
		changed := false
		for i, k := range n.kids {
			kids[i] = g.subst(k, a, v, memo)
			changed = changed || kids[i] != k
		}
		if changed {
			switch n.op {
			case "case":
				m = g.caseOf(kids[0], kids[1], kids[2])
			case "not":
				m = g.not(kids[0])
			case "bin":
				m = g.bin(n.text, kids[0], kids[1])
			default:
				m = g.intern(&snode{op: n.op, text: n.text, t: n.t, kids: kids})
			}
			if m.def == nil {
				m.def = n.def
			}
		}
	}
	memo[n] = m
	return m
}

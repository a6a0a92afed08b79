package main

import (
	"slices"
	"strings"
)

// The cost model: which nodes become variables, and where each is computed.

// paths returns, for every RETURN, the nodes evaluated on the way to it:
// the conditions of the IFs taken, then its ROW.
func (g *sqlGen) paths(o *outcome, rows map[*outcome][]*snode, prefix []*snode, out *[][]*snode) {
	if o.cond == nil {
		*out = append(*out, append(slices.Clone(prefix), rows[o]...))
		return
	}
	p := append(slices.Clone(prefix), o.cond)
	g.paths(o.then, rows, p, out)
	g.paths(o.els, rows, p, out)
}

func addCounts(dst, src map[*snode]int) {
	for k, v := range src {
		dst[k] += v
	}
}

// evals returns how many times evaluating roots evaluates each node when
// the nodes in mat are computed once, into a variable: a CASE evaluates its
// condition and one of its arms. With setup, it counts how many times the
// nodes are set up instead, as PostgreSQL does for every expression it
// reaches in a transaction: a CASE sets up both arms.
func evals(roots []*snode, mat map[*snode]bool, setup ...bool) map[*snode]int {
	both := len(setup) > 0 && setup[0]
	memo := map[*snode]map[*snode]int{}
	var body func(n *snode) map[*snode]int
	var ev func(n *snode) map[*snode]int
	ev = func(n *snode) map[*snode]int {
		if m, ok := memo[n]; ok {
			return m
		}
		r := map[*snode]int{n: 1}
		if !mat[n] {
			addCounts(r, body(n))
		}
		memo[n] = r
		return r
	}
	body = func(n *snode) map[*snode]int {
		r := map[*snode]int{}
		if n.op == "case" && !both {
			addCounts(r, ev(n.kids[0]))
			a, b := ev(n.kids[1]), ev(n.kids[2])
			for k, v := range a {
				r[k] += max(v, b[k])
			}
			for k, v := range b {
				if _, ok := a[k]; !ok {
					r[k] += v
				}
			}
			return r
		}
		for _, k := range n.kids {
			addCounts(r, ev(k))
		}
		return r
	}
	total := map[*snode]int{}
	for _, n := range roots {
		addCounts(total, ev(n))
	}
	// Each variable the path reads is computed once.
	defined := map[*snode]bool{}
	for {
		var next *snode
		for n := range total {
			if mat[n] && !defined[n] && (next == nil || n.id < next.id) {
				next = n
			}
		}
		if next == nil {
			return total
		}
		defined[next] = true
		addCounts(total, body(next))
	}
}

// size is about how many operations n computes, not counting variables':
// an operator is one, the float helpers' casts, product, quotient and floor
// seven, and a call of a helper function, which loops, a hundred.
func size(n *snode, mat map[*snode]bool, top bool) int {
	if n.op == "leaf" || mat[n] && !top {
		return 0
	}
	s := 1
	if n.op == "call" {
		switch {
		case n.text == "ceilDiv":
			s = 3
		case n.text == "mulDivFloor" || n.text == "divMulFloor":
			s = 7
		case strings.HasPrefix(n.text, "ratelimit_"):
			s = 100
		}
	}
	for _, k := range n.kids {
		s += size(k, mat, false)
	}
	return s
}

// inlineBelow is how many operations a path may compute again rather than
// keep in a variable: every variable is one more expression for PL/pgSQL
// to prepare in each transaction, which costs more than a few additions.
const inlineBelow = 6

// materialize chooses the nodes kept in variables, from the largest
// (created last) down: those a path would otherwise compute more than
// once, at a cost of inlineBelow operations or more.
func (g *sqlGen) materialize(root *outcome, rows map[*outcome][]*snode) {
	var ps [][]*snode
	g.paths(root, rows, nil, &ps)
	mat := map[*snode]bool{}
	worth := func(n *snode) bool {
		uses := 0
		for _, p := range ps {
			uses = max(uses, evals(p, mat, g.row)[n])
		}
		return uses >= 2 && (uses-1)*size(n, mat, true) >= inlineBelow
	}
	for i := len(g.all) - 1; i >= 0; i-- {
		if n := g.all[i]; n.op != "leaf" && n.op != "array" && worth(n) {
			mat[n] = true
		}
	}
	// A node chosen before its operands were is smaller than it looked:
	// check again, smallest first, until nothing changes.
	for changed := true; changed; {
		changed = false
		for _, n := range g.all {
			if !mat[n] {
				continue
			}
			delete(mat, n)
			if worth(n) {
				mat[n] = true
			} else {
				changed = true
			}
		}
	}
	g.nameVars(mat)
}

// placeAll puts every materialized node at the outcome where all the paths
// that evaluate it part (the lowest common ancestor of its uses).
func (g *sqlGen) placeAll(root *outcome, rows map[*outcome][]*snode) {
	mat := map[*snode]bool{}
	for _, n := range g.all {
		if n.mat != "" {
			mat[n] = true
		}
	}
	var walk func(o *outcome)
	walk = func(o *outcome) {
		if o.cond != nil {
			for n := range evals([]*snode{o.cond}, mat) {
				if mat[n] {
					n.place = lca(n.place, o, n.placeOK)
					n.placeOK = true
				}
			}
			walk(o.then)
			walk(o.els)
			return
		}
		for n := range evals(rows[o], mat) {
			if mat[n] {
				n.place = lca(n.place, o, n.placeOK)
				n.placeOK = true
			}
		}
	}
	walk(root)
	for _, n := range g.all {
		if n.mat != "" {
			n.place.mats = append(n.place.mats, n)
		}
	}
}

func lca(a, b *outcome, aSet bool) *outcome {
	if !aSet {
		return b
	}
	depth := func(o *outcome) int {
		d := 0
		for ; o.parent != nil; o = o.parent {
			d++
		}
		return d
	}
	da, db := depth(a), depth(b)
	for ; da > db; da-- {
		a = a.parent
	}
	for ; db > da; db-- {
		b = b.parent
	}
	for a != b {
		a, b = a.parent, b.parent
	}
	return a
}

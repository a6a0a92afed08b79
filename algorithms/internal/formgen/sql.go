package main

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
)

// The PL/pgSQL form is computed symbolically: decide's statements are run
// over expressions instead of values, so that every variable ends up as
// one SQL expression of the function's arguments (an if that assigns
// becomes a CASE), and every return as one ROW(...) behind the IFs of the
// Go form's early returns: PL/pgSQL prepares an expression only when it
// first reaches it in a transaction, so a RETURN the request does not take
// costs nothing. Expressions that a path would compute again become
// variables when that saves more than inlineBelow operations, computed
// once where the paths that need them part; the rest stays inline. A helper that holds a loop becomes a
// function of its own, written statement by statement.

// snode is a node of the expressions the symbolic run builds. Equal nodes
// are shared (hash-consed), so a value computed twice in Go is one node.
type snode struct {
	id   int
	t    typ
	op   string // "leaf", "bin", "not", "neg", "call", "case"
	text string // a leaf's SQL, a bin's operator, a call's function
	kids []*snode
	hint string // the Go variable it was first assigned to, for naming

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
		case "peek":
			if g.row {
				return g.leaf("false", tBool)
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
				if vals[i].hint == "" {
					vals[i].hint = v.name
				}
				env[v.name] = vals[i]
			}
		case sIf:
			c := g.eval(s.cond, env)
			if hasReturn(s.then) || hasReturn(s.els) {
				o := &outcome{cond: c, parent: parent}
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
				if env[k].hint == "" {
					env[k].hint = k
				}
			}
		case sFor:
			panic("formgen: SQL: a loop outside a helper")
		case sReturn:
			return &outcome{val: g.eval(s.val, env), env: env, dec: s.dec, parent: parent}, nil
		}
	}
	return nil, env
}

// SQL returns the PL/pgSQL form of f: the shared prelude, the helper
// functions, the form (ratelimit_<name>, see algorithms/sql.go) and its row
// form (ratelimit_<name>_row, see sqlRowForm).
func SQL(f *form) (string, error) {
	g, err := newSQLForm(f, false)
	if err != nil {
		return "", err
	}
	rg, err := newSQLForm(f, true)
	if err != nil {
		return "", err
	}
	var b strings.Builder
	w := func(format string, args ...any) { fmt.Fprintf(&b, format+"\n", args...) }
	w("-- Code generated by formgen from %s; DO NOT EDIT.", f.file)
	w("")
	w("-- %s: the SQL form of the algorithm in algorithms/%s (%s.decide).", f.name, f.file, f.goType)
	w("-- Calling convention: see algorithms/sql.go. args: [%s]. state: [%s],", strings.Join(f.args, ", "), g.stateNames())
	w("-- or NULL for a key with no live state.")
	w("")
	b.WriteString(sqlPrelude)
	for _, h := range g.funcs {
		// A node table of its own: the function's expressions are not
		// the main function's variables.
		fg := &sqlGen{f: f, nodes: map[string]*snode{}, isFunc: g.isFunc}
		fg.writeFunction(&b, h)
	}
	w("")
	w("CREATE OR REPLACE FUNCTION ratelimit_%s(", f.name)
	w("    state bigint[], now_us bigint, cost bigint, peek boolean, args bigint[])")
	w("RETURNS ratelimit_step LANGUAGE plpgsql IMMUTABLE PARALLEL SAFE AS $$")
	g.writeBody(&b)
	w("$$;")
	w("")
	w("-- ratelimit_%s_row is the same decision for a request that consumes (not a", f.name)
	w("-- peek), in the shape a store's one-statement update wants it: see")
	w("-- algorithms/sql.go (row forms).")
	var params []string
	for _, a := range f.args {
		params = append(params, "arg_"+snake(a)+" bigint")
	}
	w("CREATE OR REPLACE FUNCTION ratelimit_%s_row(", f.name)
	w("    p_state bigint[], p_expires_at bigint, p_now bigint, cost bigint,")
	w("    %s)", strings.Join(params, ", "))
	w("RETURNS ratelimit_row_step LANGUAGE plpgsql VOLATILE PARALLEL SAFE AS $$")
	rg.writeBody(&b)
	w("$$;")
	return b.String(), nil
}

// sqlClock is the server's clock in microseconds since the Unix epoch, as
// the row forms read it when the request brings no time (the same
// expression as the PostgreSQL store's).
const sqlClock = "(extract(epoch FROM clock_timestamp()) * 1000000)::bigint"

// sqlForm is the symbolic run of a form's decide core, ready to write.
type sqlForm struct {
	*sqlGen
	root *outcome
	rows map[*outcome][]*snode
	env  map[string]*snode
}

// newSQLForm runs f's decide core symbolically: for the form, or with row
// set for its row form, which never peeks (so the branches a peek takes
// fold away) and takes the algorithm's parameters one by one.
func newSQLForm(f *form, row bool) (*sqlForm, error) {
	g := &sqlGen{f: f, nodes: map[string]*snode{}, isFunc: map[*helper]bool{}, unpacked: true, row: row}
	env := map[string]*snode{}
	for _, s := range f.state {
		env["s_"+s.name] = g.leaf("st_"+snake(s.name), s.t)
	}
	root, _ := g.exec(nest(f.body), env, nil)
	if root == nil {
		return nil, fmt.Errorf("formgen: %s.decide does not always return", f.goType)
	}
	rows := map[*outcome][]*snode{}
	g.rows(root, rows)
	g.mergeReturns(root, rows)
	if row {
		g.splitAllowed(root, rows)
	}
	g.materialize(root, rows)
	g.placeAll(root, rows)
	return &sqlForm{g, root, rows, env}, nil
}

// writeBody writes the function's DECLARE section and body.
func (g *sqlForm) writeBody(b *strings.Builder) {
	f := g.f
	w := func(format string, args ...any) { fmt.Fprintf(b, format+"\n", args...) }
	w("DECLARE")
	if g.row {
		// The time of the decision, read here, and the state, which
		// counts as none once it has expired.
		w("    now_us bigint := coalesce(p_now, %s);", sqlClock)
		w("    state bigint[] := CASE WHEN p_expires_at > now_us THEN p_state END;")
	}
	for i, s := range f.state {
		w("    st_%s bigint := state[%d];", snake(s.name), i+1)
	}
	if !g.row {
		for i, a := range f.args {
			w("    arg_%s bigint := args[%d];", snake(a), i+1)
		}
	}
	// The stored state is checked in the first declaration, before
	// anything else reads it: state a form cannot read raises SQLSTATE
	// RL001 (through ratelimit_corrupt).
	check := fmt.Sprintf("cardinality(state) <> %d", len(f.state))
	// Every field in 0..MaxExact, as the Go form's decodeFields and the
	// Lua form require: a value the store never wrote is corrupt state,
	// not an overflow or a silent answer. Several fields are checked
	// with least and greatest, which PostgreSQL sets up in each
	// transaction for less than two comparisons each.
	if len(f.state) == 1 {
		check += fmt.Sprintf(" OR st_%s NOT BETWEEN 0 AND 9007199254740992", snake(f.state[0].name))
	} else {
		var sts []string
		for _, s := range f.state {
			sts = append(sts, "st_"+snake(s.name))
		}
		list := strings.Join(sts, ", ")
		check += fmt.Sprintf(" OR least(%s) < 0 OR greatest(%s) > 9007199254740992", list, list)
	}
	if f.valid != nil {
		vg := &sqlGen{f: f, nodes: map[string]*snode{}, unpacked: true}
		check += " OR NOT " + vg.render(vg.eval(f.valid, g.env), sqlNot+1)
	}
	check = fmt.Sprintf("state IS NOT NULL AND (%s)", check)
	corrupt := fmt.Sprintf("ratelimit_corrupt(format('%s state %%s', state))", f.name)
	checked := false
	var later []*snode
	for _, n := range g.all {
		if n.mat == "" {
			continue
		}
		if n.place != g.root {
			later = append(later, n)
			continue
		}
		def := g.render(n, 0)
		if !checked {
			c := corrupt
			if n.t == tBool {
				c += " IS NULL"
			}
			def = fmt.Sprintf("CASE WHEN %s\n        THEN %s ELSE %s END", check, c, def)
			checked = true
		}
		w("    %s %s := %s;", n.mat, sqlType(n.t), def)
	}
	if !checked {
		w("    v_checked boolean := CASE WHEN %s\n        THEN %s IS NULL END;", check, corrupt)
	}
	sort.Slice(later, func(i, j int) bool { return later[i].mat < later[j].mat })
	for _, n := range later {
		w("    %s %s;", n.mat, sqlType(n.t))
	}
	w("BEGIN")
	g.writeOutcome(b, g.root, g.rows, 1, true)
	w("END")
}

func (g *sqlGen) stateNames() string {
	var s []string
	for _, f := range g.f.state {
		s = append(s, f.name)
	}
	return strings.Join(s, ", ")
}

func sqlType(t typ) string {
	if t == tBool {
		return "boolean"
	}
	return "bigint"
}

// sqlPrelude creates the result types and the error helper every form
// shares, so that each file runs on its own.
const sqlPrelude = `-- The result types shared by every SQL form (ratelimit_step) and row form
-- (ratelimit_row_step), and the error raised for state a form cannot read.
-- Each form's file creates them if missing, so that any file runs on its own.
DO $$ BEGIN
    CREATE TYPE ratelimit_step AS (
        next_state bigint[], ttl bigint, allowed boolean, lim bigint,
        remaining bigint, retry_after bigint, reset_after bigint, delay bigint);
EXCEPTION WHEN duplicate_object THEN NULL;
END $$;

DO $$ BEGIN
    CREATE TYPE ratelimit_row_step AS (
        next_state bigint[], expires_at bigint, decision bigint[]);
EXCEPTION WHEN duplicate_object THEN NULL;
END $$;

CREATE OR REPLACE FUNCTION ratelimit_corrupt(msg text) RETURNS bigint
LANGUAGE plpgsql VOLATILE AS $$
BEGIN
    RAISE EXCEPTION USING ERRCODE = 'RL001', MESSAGE = 'ratelimit: corrupt state: ' || msg;
END
$$;
`

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
		leaf := &outcome{val: o.then.val, parent: o}
		r := make([]*snode, len(a))
		for i := range a {
			r[i] = g.caseOf(o.cond, a[i], b[i])
		}
		rows[leaf] = r
		o.cond = g.bin("||", o.cond, o.els.cond)
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
		leaf := &outcome{val: o.val, env: o.env, dec: o.dec, parent: o}
		rows[leaf] = g.substRow(slices.Clone(rows[o]), a, v)
		if v {
			then = leaf
		} else {
			els = leaf
		}
	}
	delete(rows, o)
	o.cond, o.then, o.els, o.val, o.env = a, then, els, nil, nil
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
			if m.hint == "" {
				m.hint = n.hint
			}
		}
	}
	memo[n] = m
	return m
}

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
	names := map[string]bool{"v_checked": true, "state": true, "now_us": true, "cost": true, "peek": true, "args": true}
	// The unpacked parameters and fields (st_, arg_) cannot clash with
	// the variables, which all start with v_.
	for _, n := range g.all {
		if !mat[n] {
			continue
		}
		base := "v_" + n.hint
		if n.hint == "" {
			base = "v_t"
		}
		name := base
		for i := 2; names[name]; i++ {
			name = fmt.Sprintf("%s%d", base, i)
		}
		names[name] = true
		n.mat = name
	}
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

func (g *sqlGen) writeOutcome(b *strings.Builder, o *outcome, rows map[*outcome][]*snode, depth int, root bool) {
	in := strings.Repeat("    ", depth)
	if !root {
		for _, n := range o.mats {
			fmt.Fprintf(b, "%s%s := %s;\n", in, n.mat, g.render(n, 0))
		}
	}
	if o.cond != nil {
		fmt.Fprintf(b, "%sIF %s THEN\n", in, ifCond(g.ref(o.cond, 0)))
		g.writeOutcome(b, o.then, rows, depth+1, false)
		fmt.Fprintf(b, "%sEND IF;\n", in)
		g.writeOutcome(b, o.els, rows, depth, false)
		return
	}
	if g.row {
		fmt.Fprintf(b, "%sRETURN %s;\n", in, g.rowStep(rows[o], in))
		return
	}
	var fields []string
	for _, n := range rows[o] {
		fields = append(fields, g.ref(n, 0))
	}
	fmt.Fprintf(b, "%sRETURN ROW(%s)::ratelimit_step;\n", in, strings.Join(fields, ",\n"+in+"    "))
}

// rowStep renders a return's ROW (next_state, ttl, then the decision's
// fields) as the row form's ratelimit_row_step: the next state, its expiry
// (now_us + ttl, NULL when there is nothing to store) and the decision as
// a bigint[], allowed as 1 or 0 (a CASE: PostgreSQL sets it up for less
// than the two casts).
func (g *sqlGen) rowStep(r []*snode, in string) string {
	exp := "NULL"
	if !(r[0].op == "leaf" && r[0].text == "NULL") {
		exp = "now_us + " + g.ref(r[1], sqlAdd+1)
	}
	var dec []string
	for i, n := range r[2:] {
		if g.f.decision[i].t == tBool {
			switch c, ok := g.isConst(n); {
			case ok && c == "true":
				dec = append(dec, "1")
			case ok:
				dec = append(dec, "0")
			default:
				dec = append(dec, "CASE WHEN "+g.ref(n, 0)+" THEN 1::bigint ELSE 0::bigint END")
			}
			continue
		}
		dec = append(dec, g.ref(n, 0))
	}
	return fmt.Sprintf("ROW(%s,\n%s    %s,\n%s    ARRAY[%s])::ratelimit_row_step", g.ref(r[0], 0), in, exp, in, strings.Join(dec, ",\n"+in+"        "))
}

// ifCond parenthesizes an IF's condition that holds a CASE: PL/pgSQL
// ends the condition at the first THEN it finds outside parentheses.
func ifCond(c string) string {
	if strings.Contains(c, "CASE") {
		return "(" + c + ")"
	}
	return c
}

// SQL operator precedences (higher binds tighter).
const (
	sqlOr = 1 + iota
	sqlAnd
	sqlNot
	sqlCmp
	sqlAdd
	sqlMul
	sqlUnary
	sqlAtom
)

var sqlOps = map[string]struct {
	s    string
	prec int
}{
	"||": {"OR", sqlOr}, "&&": {"AND", sqlAnd},
	"==": {"=", sqlCmp}, "!=": {"<>", sqlCmp}, "<": {"<", sqlCmp}, "<=": {"<=", sqlCmp}, ">": {">", sqlCmp}, ">=": {">=", sqlCmp},
	"+": {"+", sqlAdd}, "-": {"-", sqlAdd}, "*": {"*", sqlMul}, "/": {"/", sqlMul}, "%": {"%", sqlMul},
}

func sqlWrap(s string, prec, need int) string {
	if prec < need {
		return "(" + s + ")"
	}
	return s
}

// render writes n as SQL, wrapped in parentheses when its precedence is
// below need; a materialized node is its variable.
func (g *sqlGen) render(n *snode, need int) string {
	s, p := g.renderTop(n, true)
	return sqlWrap(s, p, need)
}

func (g *sqlGen) ref(n *snode, need int) string {
	s, p := g.renderTop(n, false)
	return sqlWrap(s, p, need)
}

// renderTop renders n; top reports that n itself is being defined, so its
// own variable does not stand for it.
func (g *sqlGen) renderTop(n *snode, top bool) (string, int) {
	if n.mat != "" && !top {
		return n.mat, sqlAtom
	}
	switch n.op {
	case "leaf":
		if strings.HasPrefix(n.text, "-") {
			return n.text, sqlUnary
		}
		return n.text, sqlAtom
	case "not":
		return "NOT " + g.ref(n.kids[0], sqlNot+1), sqlNot
	case "neg":
		return "-" + g.ref(n.kids[0], sqlAtom), sqlUnary
	case "bin":
		op := sqlOps[n.text]
		needL, needR := op.prec, op.prec+1
		if op.prec == sqlCmp {
			needL = sqlCmp + 1
		}
		return g.ref(n.kids[0], needL) + " " + op.s + " " + g.ref(n.kids[1], needR), op.prec
	case "case":
		var b strings.Builder
		b.WriteString("CASE")
		for {
			fmt.Fprintf(&b, " WHEN %s THEN %s", g.ref(n.kids[0], 0), g.ref(n.kids[1], 0))
			e := n.kids[2]
			if e.op == "leaf" && e.text == "NULL" {
				b.WriteString(" END")
				break
			}
			if e.op != "case" || e.mat != "" {
				fmt.Fprintf(&b, " ELSE %s END", g.ref(e, 0))
				break
			}
			n = e
		}
		return b.String(), sqlAtom
	case "array":
		var a []string
		for _, k := range n.kids {
			a = append(a, g.ref(k, 0))
		}
		return "ARRAY[" + strings.Join(a, ", ") + "]", sqlAtom
	case "call":
		var a []string
		for _, k := range n.kids {
			a = append(a, g.ref(k, 0))
		}
		switch n.text {
		case "min":
			return "least(" + strings.Join(a, ", ") + ")", sqlAtom
		case "max":
			return "greatest(" + strings.Join(a, ", ") + ")", sqlAtom
		case "ceilDiv":
			return fmt.Sprintf("(%s + %s - 1) / %s", g.ref(n.kids[0], sqlAdd), g.ref(n.kids[1], sqlAdd+1), g.ref(n.kids[1], sqlMul+1)), sqlMul
		case "mulDivFloor", "divMulFloor":
			var f [3]string
			for i, k := range n.kids {
				f[i] = g.ref(k, sqlAtom) + "::float8"
			}
			op1, op2 := "*", "/"
			if n.text == "divMulFloor" {
				op1, op2 = "/", "*"
			}
			return fmt.Sprintf("least(floor(%s %s %s %s %s), 9007199254740992)::bigint", f[0], op1, f[1], op2, f[2]), sqlAtom
		}
		return n.text + "(" + strings.Join(a, ", ") + ")", sqlAtom
	}
	panic("formgen: unexpected node " + n.op)
}

// writeFunction writes a helper that holds a loop as a PL/pgSQL function
// of its own, statement by statement; it takes the form's args last.
func (g *sqlGen) writeFunction(b *strings.Builder, h *helper) {
	var params []string
	for _, p := range h.params {
		params = append(params, p.name+" bigint")
	}
	params = append(params, "args bigint[]")
	fmt.Fprintf(b, "\n-- %s is the Go form's helper %s.\n", g.funcName(h), h.name)
	fmt.Fprintf(b, "CREATE OR REPLACE FUNCTION %s(%s)\n", g.funcName(h), strings.Join(params, ", "))
	fmt.Fprintf(b, "RETURNS %s LANGUAGE plpgsql IMMUTABLE PARALLEL SAFE AS $$\n", sqlType(h.result))
	env := map[string]*snode{}
	for _, p := range h.params {
		env[p.name] = g.leaf(p.name, p.t)
	}
	if len(h.locals) > 0 {
		b.WriteString("DECLARE\n")
		for _, v := range h.locals {
			fmt.Fprintf(b, "    %s %s;\n", v.name, sqlType(v.t))
			env[v.name] = g.leaf(v.name, v.t)
		}
	}
	b.WriteString("BEGIN\n")
	g.writeStmts(b, h.body, env, 1)
	b.WriteString("END\n$$;\n")
}

func (g *sqlGen) writeStmts(b *strings.Builder, list []stmt, env map[string]*snode, depth int) {
	in := strings.Repeat("    ", depth)
	for _, s := range list {
		switch s := s.(type) {
		case sAssign:
			if len(s.lhs) > 1 {
				panic("formgen: SQL: a parallel assignment in a loop helper")
			}
			fmt.Fprintf(b, "%s%s := %s;\n", in, s.lhs[0].name, g.render(g.eval(s.rhs[0], env), 0))
		case sIf:
			fmt.Fprintf(b, "%sIF %s THEN\n", in, ifCond(g.render(g.eval(s.cond, env), 0)))
			g.writeStmts(b, s.then, env, depth+1)
			if len(s.els) > 0 {
				fmt.Fprintf(b, "%sELSE\n", in)
				g.writeStmts(b, s.els, env, depth+1)
			}
			fmt.Fprintf(b, "%sEND IF;\n", in)
		case sFor:
			fmt.Fprintf(b, "%sWHILE %s LOOP\n", in, g.render(g.eval(s.cond, env), 0))
			g.writeStmts(b, s.body, env, depth+1)
			fmt.Fprintf(b, "%sEND LOOP;\n", in)
		case sReturn:
			fmt.Fprintf(b, "%sRETURN %s;\n", in, g.render(g.eval(s.val, env), 0))
		}
	}
}

// The hand-written SQL forms: the sliding log's keeps an array of (time,
// cost) pairs, which the subset does not express, so it is written by hand
// beside its Go form (algorithms/slidinglog.sql) and copied to
// sql/sliding_log.sql with versioned function names like every other form.
var handWrittenSQL = map[string]string{"slidinglog.sql": "sliding_log"}

// preludeMark is the line of a hand-written SQL form that the shared
// prelude (sqlPrelude) replaces.
const preludeMark = "-- formgen: prelude\n"

// addHandWrittenSQL adds the hand-written SQL forms found in dir to out,
// under the generated-code header (the copy in sql/ is generated), with
// the prelude every form shares (sqlPrelude) in place of preludeMark.
func addHandWrittenSQL(dir string, out map[string][]byte) error {
	for src, name := range handWrittenSQL {
		b, err := os.ReadFile(filepath.Join(dir, src))
		if errors.Is(err, fs.ErrNotExist) {
			continue
		}
		if err != nil {
			return err
		}
		// The line "-- formgen: prelude" stands for the shared prelude.
		text := string(b)
		if !strings.Contains(text, preludeMark) {
			return fmt.Errorf("formgen: %s has no line %q where the shared prelude goes", src, strings.TrimSpace(preludeMark))
		}
		text = strings.Replace(text, preludeMark, sqlPrelude, 1)
		out[filepath.Join("sql", name+".sql")] = []byte("-- Code generated by formgen from " + src + " (written by hand); DO NOT EDIT.\n\n" + text)
	}
	return nil
}

// sqlDefinition finds the functions a SQL file defines.
var sqlDefinition = regexp.MustCompile(`CREATE OR REPLACE FUNCTION (ratelimit_[a-z0-9_]+)\(`)

// sqlIdent is an identifier the forms may define or call.
var sqlIdent = regexp.MustCompile(`\bratelimit_[a-z0-9_]+\b`)

// versionSQL renames every function the SQL files define, ratelimit_<x>,
// to ratelimit_<x>_<version>, where the version is the first 8 hex digits
// of the SHA-256 of the file's text (with its own functions under their
// plain names, and the functions it calls from other files under their
// versioned names: sql/all.sql calls the forms', so it is versioned last,
// and its version changes whenever a form's does). Two versions of a form
// so have two names, and two releases of the SDK that migrate one database
// install their forms side by side instead of replacing each other's. The
// types the forms share (ratelimit_step, ratelimit_all_step) keep their
// names: they never change (a change would need a new name).
func versionSQL(out map[string][]byte) {
	var paths []string
	for p := range out {
		if strings.HasPrefix(p, "sql"+string(filepath.Separator)) && p != filepath.Join("sql", "all.sql") {
			paths = append(paths, p)
		}
	}
	sort.Strings(paths)
	if _, ok := out[filepath.Join("sql", "all.sql")]; ok {
		paths = append(paths, filepath.Join("sql", "all.sql"))
	}
	versioned := map[string]string{} // every earlier file's functions
	for _, p := range paths {
		text := string(out[p])
		own := map[string]bool{}
		for _, m := range sqlDefinition.FindAllStringSubmatch(text, -1) {
			own[m[1]] = true
		}
		text = sqlIdent.ReplaceAllStringFunc(text, func(id string) string {
			if v, ok := versioned[id]; ok && !own[id] {
				return v
			}
			return id
		})
		sum := sha256.Sum256([]byte(text))
		version := hex.EncodeToString(sum[:4])
		text = sqlIdent.ReplaceAllStringFunc(text, func(id string) string {
			if own[id] {
				return id + "_" + version
			}
			return id
		})
		for id := range own {
			versioned[id] = id + "_" + version
		}
		out[p] = []byte(text)
	}
}

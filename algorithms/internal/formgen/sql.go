package main

import (
	"fmt"
	"sort"
	"strconv"
	"strings"
)

// The PL/pgSQL form is computed symbolically: decide's statements are run
// over expressions instead of values, so that every variable ends up as
// one SQL expression of the function's arguments (an if that assigns
// becomes a CASE), and every return as one ROW(...). Expressions that a
// path through the function would compute more than once become variables
// of their own, computed once where the paths that need them part; the
// rest stays inline. A helper that holds a loop becomes a function of its
// own, written statement by statement.

// snode is a node of the expressions the symbolic run builds. Equal nodes
// are shared (hash-consed), so a value computed twice in Go is one node.
type snode struct {
	id   int
	t    typ
	op   string // "leaf", "bin", "not", "neg", "call", "case"
	text string // a leaf's SQL, a bin's operator, a call's function
	kids []*snode
	hint string // the Go variable it was first assigned to, for naming

	uses    int    // how many times the most demanding path uses it
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
	f      *form
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
		return g.leaf(fmt.Sprintf("args[%d]", e.i+1), tInt)
	case eIn:
		switch e.name {
		case "now":
			return g.leaf("now_us", tInt)
		case "live":
			return g.leaf("live", tBool)
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
			kids = append(kids, g.leaf("args", tInt))
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

// SQL returns the PL/pgSQL form of f.
func SQL(f *form) (string, error) {
	g := &sqlGen{f: f, nodes: map[string]*snode{}, isFunc: map[*helper]bool{}}
	env := map[string]*snode{}
	for i, s := range f.state {
		env["s_"+s.name] = g.leaf(fmt.Sprintf("state[%d]", i+1), s.t)
	}
	root, _ := g.exec(nest(f.body), env, nil)
	if root == nil {
		return "", fmt.Errorf("formgen: %s.decide does not always return", f.goType)
	}
	rows := map[*outcome][]*snode{}
	g.rows(root, rows)
	g.count(root, rows)
	g.placeAll(root, rows)

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
	w("DECLARE")
	check := fmt.Sprintf("cardinality(state) <> %d", len(f.state))
	if f.valid != nil {
		vg := &sqlGen{f: f, nodes: map[string]*snode{}}
		check += " OR NOT " + vg.render(vg.eval(f.valid, env), sqlNot+1)
	}
	w("    live boolean := CASE WHEN state IS NULL THEN false WHEN %s", check)
	w("        THEN ratelimit_corrupt(format('%s state %%s', state)) IS NULL ELSE true END;", f.name)
	var later []*snode
	for _, n := range g.all {
		if n.mat == "" {
			continue
		}
		if n.place == root {
			w("    %s %s := %s;", n.mat, sqlType(n.t), g.render(n, 0))
		} else {
			later = append(later, n)
		}
	}
	sort.Slice(later, func(i, j int) bool { return later[i].mat < later[j].mat })
	for _, n := range later {
		w("    %s %s;", n.mat, sqlType(n.t))
	}
	w("BEGIN")
	g.writeOutcome(&b, root, rows, 1, true)
	w("END")
	w("$$;")
	return b.String(), nil
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

// sqlPrelude creates the result type and the error helper every form
// shares, so that each file runs on its own.
const sqlPrelude = `-- The result type shared by every SQL form, and the error raised for state a
-- form cannot read. Each form's file creates them if missing, so that any
-- file runs on its own.
DO $$ BEGIN
    CREATE TYPE ratelimit_step AS (
        next_state bigint[], ttl bigint, allowed boolean, lim bigint,
        remaining bigint, retry_after bigint, reset_after bigint, delay bigint);
EXCEPTION WHEN duplicate_object THEN NULL;
END $$;

CREATE OR REPLACE FUNCTION ratelimit_corrupt(msg text) RETURNS bigint
LANGUAGE plpgsql VOLATILE AS $$
BEGIN
    RAISE EXCEPTION USING ERRCODE = 'RL001', MESSAGE = 'ratelimit: corrupt state: ' || msg;
END
$$;
`

// rows returns the nodes a return's ROW holds: the next state and TTL
// (when the TTL may be positive), then the decision's fields.
func (g *sqlGen) rows(o *outcome, rows map[*outcome][]*snode) {
	if o.cond != nil {
		g.rows(o.then, rows)
		g.rows(o.els, rows)
		return
	}
	var r []*snode
	if !g.zero(o.val) {
		pos := g.bin(">", o.val, g.leaf("0", tInt))
		for _, s := range g.f.state {
			r = append(r, o.env["s_"+s.name])
		}
		r = append(r, pos, pos, o.val)
	}
	for _, f := range g.f.decision {
		r = append(r, o.env[o.dec+"_"+f.name])
	}
	rows[o] = r
}

// small reports a node that costs less to compute again than to keep in a
// variable: a leaf, or one operator over leaves and variables.
func (g *sqlGen) small(n *snode) bool {
	if n.op == "leaf" {
		return true
	}
	if n.op != "bin" && n.op != "not" && n.op != "neg" {
		return false
	}
	for _, k := range n.kids {
		if k.op != "leaf" && k.mat == "" {
			return false
		}
	}
	return true
}

func (g *sqlGen) zero(n *snode) bool { return n.op == "leaf" && n.text == "0" }

// roots returns the nodes an outcome evaluates itself: its condition, or
// its row.
func roots(o *outcome, rows map[*outcome][]*snode) []*snode {
	if o.cond != nil {
		return []*snode{o.cond}
	}
	return rows[o]
}

// count sets every node's uses: the most times one path from the root to
// a return evaluates it (a node inside a CASE arm counts as evaluated).
func (g *sqlGen) count(root *outcome, rows map[*outcome][]*snode) {
	var walk func(o *outcome, acc map[*snode]int)
	walk = func(o *outcome, acc map[*snode]int) {
		var visit func(n *snode)
		visit = func(n *snode) {
			acc[n]++
			if acc[n] > 1 {
				return
			}
			for _, k := range n.kids {
				visit(k)
			}
		}
		for _, n := range roots(o, rows) {
			visit(n)
		}
		if o.cond == nil {
			for n, c := range acc {
				n.uses = max(n.uses, c)
			}
			return
		}
		a := map[*snode]int{}
		for k, v := range acc {
			a[k] = v
		}
		walk(o.then, a)
		walk(o.els, acc)
	}
	walk(root, map[*snode]int{})
	names := map[string]bool{"live": true, "state": true, "now_us": true, "cost": true, "peek": true, "args": true}
	for _, n := range g.all {
		if n.uses < 2 || g.small(n) {
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
	var walk func(o *outcome)
	walk = func(o *outcome) {
		seen := map[*snode]bool{}
		var visit func(n *snode)
		visit = func(n *snode) {
			if seen[n] {
				return
			}
			seen[n] = true
			if n.mat != "" {
				n.place = lca(n.place, o, n.placeOK)
				n.placeOK = true
			}
			for _, k := range n.kids {
				visit(k)
			}
		}
		for _, n := range roots(o, rows) {
			visit(n)
		}
		if o.cond != nil {
			walk(o.then)
			walk(o.els)
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
		fmt.Fprintf(b, "%sIF %s THEN\n", in, g.ref(o.cond, 0))
		g.writeOutcome(b, o.then, rows, depth+1, false)
		fmt.Fprintf(b, "%sEND IF;\n", in)
		g.writeOutcome(b, o.els, rows, depth, false)
		return
	}
	r := rows[o]
	var fields []string
	if g.zero(o.val) {
		fields = append(fields, "NULL", "NULL")
	} else {
		var st []string
		for _, n := range r[:len(g.f.state)] {
			st = append(st, g.ref(n, 0))
		}
		pos := g.ref(r[len(g.f.state)], 0)
		fields = append(fields,
			fmt.Sprintf("CASE WHEN %s THEN ARRAY[%s] END", pos, strings.Join(st, ", ")),
			fmt.Sprintf("CASE WHEN %s THEN %s END", pos, g.ref(o.val, 0)))
		r = r[len(g.f.state)+3:]
	}
	for _, n := range r {
		fields = append(fields, g.ref(n, 0))
	}
	fmt.Fprintf(b, "%sRETURN ROW(%s)::ratelimit_step;\n", in, strings.Join(fields, ",\n"+in+"    "))
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
			if e.op != "case" || e.mat != "" {
				fmt.Fprintf(&b, " ELSE %s END", g.ref(e, 0))
				break
			}
			n = e
		}
		return b.String(), sqlAtom
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
			fmt.Fprintf(b, "%sIF %s THEN\n", in, g.render(g.eval(s.cond, env), 0))
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

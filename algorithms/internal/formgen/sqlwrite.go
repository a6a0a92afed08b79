package main

import (
	"fmt"
	"sort"
	"strings"
)

// Writing the PL/pgSQL functions from the shaped, costed outcome tree.

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
	b.WriteString(comment("    ", "the stored state: "+trace(f.stateAt)))
	for i, s := range f.state {
		w("    st_%s bigint := state[%d];", snake(s.name), i+1)
	}
	if !g.row {
		b.WriteString(comment("    ", "the parameters: "+trace(f.argsAt)))
		for i, a := range f.args {
			w("    arg_%s bigint := args[%d];", snake(a), i+1)
		}
	}
	// The stored state is checked in the first declaration, before
	// anything else reads it: state a form cannot read raises SQLSTATE
	// RL001 (through ratelimit_corrupt).
	checks := []doc{txtf("cardinality(state) <> %d", len(f.state))}
	// Every field in 0..MaxExact, as the Go form's decodeFields and the
	// Lua form require: a value the store never wrote is corrupt state,
	// not an overflow or a silent answer. Several fields are checked
	// with least and greatest, which PostgreSQL sets up in each
	// transaction for less than two comparisons each.
	if len(f.state) == 1 {
		checks = append(checks, txtf("st_%s NOT BETWEEN 0 AND 9007199254740992", snake(f.state[0].name)))
	} else {
		var sts []doc
		for _, s := range f.state {
			sts = append(sts, txt("st_"+snake(s.name)))
		}
		checks = append(checks, cat(call("least", sts), txt(" < 0")), cat(call("greatest", sts), txt(" > 9007199254740992")))
	}
	why := "the stored state's check: every field in 0..2^53"
	if f.valid != nil {
		vg := &sqlGen{f: f, nodes: map[string]*snode{}, unpacked: true}
		checks = append(checks, cat(txt("NOT "), vg.render(vg.eval(f.valid, g.env), sqlNot+1)))
		why += ", and " + trace(f.validAt)
	}
	check := group(txt("state IS NOT NULL AND ("), indent(4, soft(), join(checks, line(), txt("OR "))), txt(")"))
	corrupt := fmt.Sprintf("ratelimit_corrupt(format('%s state %%s', state))", f.name)
	guarded := func(c string, then doc) doc { // CASE WHEN check THEN c ELSE then END
		arms := []doc{line(), group(txt("WHEN "), check, indent(4, line(), txt("THEN "+c)))}
		if then.kind != dText || then.text != "" {
			arms = append(arms, line(), txt("ELSE "), then)
		}
		return group(txt("CASE"), indent(4, arms...), line(), txt("END"))
	}
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
			b.WriteString(comment("    ", why))
			def = guarded(c, def)
			checked = true
		}
		b.WriteString(comment("    ", g.defText(n)))
		writeStmt(b, "    ", n.mat+" "+sqlType(n.t)+" := ", def, ";")
	}
	if !checked {
		b.WriteString(comment("    ", why))
		writeStmt(b, "    ", "v_checked boolean := ", guarded(corrupt+" IS NULL", txt("")), ";")
	}
	sort.Slice(later, func(i, j int) bool { return later[i].mat < later[j].mat })
	for _, n := range later {
		w("    %s %s;", n.mat, sqlType(n.t))
	}
	w("BEGIN")
	g.writeOutcome(b, g.root, g.rows, 1, true)
	w("END")
}

// writeStmt writes a statement at the indentation in: prefix, the
// expression d laid out, and suffix.
func writeStmt(b *strings.Builder, in, prefix string, d doc, suffix string) {
	b.WriteString(in + prefix)
	layout(b, d, len(in)+len(prefix), len(in), len(suffix))
	b.WriteString(suffix + "\n")
}

// defText is the comment before the variable of n: the Go step that gives
// it its value (see site).
func (g *sqlGen) defText(n *snode) string {
	switch d := n.def; {
	case d == nil:
		return "a value several paths compute"
	case d.v == "":
		return "the condition of " + trace(d.at)
	case d.join:
		return d.v + " as this if leaves it: " + trace(d.at)
	default:
		return trace(d.at)
	}
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

// writeOutcome writes the outcome o: the variables computed at its start,
// then its IF or its RETURN, each after the comment that traces it to Go.
func (g *sqlGen) writeOutcome(b *strings.Builder, o *outcome, rows map[*outcome][]*snode, depth int, root bool) {
	in := strings.Repeat("    ", depth)
	if !root {
		for _, n := range o.mats {
			b.WriteString(comment(in, g.defText(n)))
			writeStmt(b, in, n.mat+" := ", g.render(n, 0), ";")
		}
	}
	if t := trace(o.at...); t != "" {
		b.WriteString(comment(in, t))
	}
	if o.cond != nil {
		writeStmt(b, in, "IF ", ifCond(g.ref(o.cond, 0)), " THEN")
		g.writeOutcome(b, o.then, rows, depth+1, false)
		fmt.Fprintf(b, "%sEND IF;\n", in)
		g.writeOutcome(b, o.els, rows, depth, false)
		return
	}
	if g.row {
		g.rowStep(b, rows[o], in)
		return
	}
	g.row1(b, in, "RETURN ROW(", rows[o], ")::ratelimit_step;")
}

// row1 writes a RETURN's fields one a line: prefix and the first field,
// then each after it on a line of its own, then suffix.
func (g *sqlGen) row1(b *strings.Builder, in, prefix string, fields []*snode, suffix string) {
	var ds []doc
	for _, n := range fields {
		ds = append(ds, g.ref(n, 0))
	}
	fieldLines(b, in, prefix, ds, suffix)
}

func fieldLines(b *strings.Builder, in, prefix string, ds []doc, suffix string) {
	for i, d := range ds {
		p, s := "    ", ","
		if i == 0 {
			p = prefix
		}
		if i == len(ds)-1 {
			s = suffix
		}
		b.WriteString(in + p)
		layout(b, d, len(in)+len(p), len(in)+4, len(s))
		b.WriteString(s + "\n")
	}
}

// rowStep writes a return's ROW (next_state, ttl, then the decision's
// fields) as the row form's ratelimit_row_step: the next state, its expiry
// (now_us + ttl, NULL when there is nothing to store) and the decision as
// a bigint[], allowed as 1 or 0 (a CASE: PostgreSQL sets it up for less
// than the two casts).
func (g *sqlGen) rowStep(b *strings.Builder, r []*snode, in string) {
	exp := txt("NULL")
	if !(r[0].op == "leaf" && r[0].text == "NULL") {
		exp = cat(txt("now_us + "), g.ref(r[1], sqlAdd+1))
	}
	var dec []doc
	for i, n := range r[2:] {
		if g.f.decision[i].t == tBool {
			switch c, ok := g.isConst(n); {
			case ok && c == "true":
				dec = append(dec, txt("1"))
			case ok:
				dec = append(dec, txt("0"))
			default:
				dec = append(dec, group(txt("CASE WHEN "), g.ref(n, 0), indent(4, line(), txt("THEN 1::bigint ELSE 0::bigint END"))))
			}
			continue
		}
		dec = append(dec, g.ref(n, 0))
	}
	fieldLines(b, in, "RETURN ROW(", []doc{g.ref(r[0], 0), exp}, ",")
	fieldLines(b, in+"    ", "ARRAY[", dec, "])::ratelimit_row_step;")
}

// ifCond parenthesizes an IF's condition that holds a CASE: PL/pgSQL
// ends the condition at the first THEN it finds outside parentheses.
func ifCond(c doc) doc {
	return parens(c, strings.Contains(c.flat(), "CASE"))
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

// render lays n out as SQL, wrapped in parentheses when its precedence is
// below need; top reports that n itself is being defined, so that its own
// variable does not stand for it (a materialized node is its variable
// everywhere else: ref).
func (g *sqlGen) render(n *snode, need int) doc {
	d, p := g.renderTop(n, true)
	return parens(d, p < need)
}

func (g *sqlGen) ref(n *snode, need int) doc {
	d, p := g.renderTop(n, false)
	return parens(d, p < need)
}

// renderTop lays n out, and returns its precedence.
func (g *sqlGen) renderTop(n *snode, top bool) (doc, int) {
	if n.mat != "" && !top {
		return txt(n.mat), sqlAtom
	}
	switch n.op {
	case "leaf":
		if strings.HasPrefix(n.text, "-") {
			return txt(n.text), sqlUnary
		}
		return txt(n.text), sqlAtom
	case "not":
		return cat(txt("NOT "), g.ref(n.kids[0], sqlNot+1)), sqlNot
	case "neg":
		return cat(txt("-"), g.ref(n.kids[0], sqlAtom)), sqlUnary
	case "bin":
		// A chain of operators of one precedence (a OR b OR c, a + b -
		// c; not comparisons) breaks before each operator, every operand
		// on a line of its own.
		op := sqlOps[n.text]
		needL, needR := op.prec, op.prec+1
		if op.prec == sqlCmp {
			needL = sqlCmp + 1
		}
		var rest []doc
		for x := n; ; {
			rest = append([]doc{line(), txt(sqlOps[x.text].s + " "), g.ref(x.kids[1], needR)}, rest...)
			l := x.kids[0]
			if op.prec == sqlCmp || l.op != "bin" || l.mat != "" || sqlOps[l.text].prec != op.prec {
				return group(g.ref(l, needL), indent(4, rest...)), op.prec
			}
			x = l
		}
	case "case":
		var arms []doc
		for {
			arms = append(arms, line(), group(txt("WHEN "), g.ref(n.kids[0], 0), indent(4, line(), txt("THEN "), g.ref(n.kids[1], 0))))
			e := n.kids[2]
			if e.op == "leaf" && e.text == "NULL" {
				break
			}
			if e.op != "case" || e.mat != "" {
				arms = append(arms, line(), txt("ELSE "), g.ref(e, 0))
				break
			}
			n = e
		}
		return group(txt("CASE"), indent(4, arms...), line(), txt("END")), sqlAtom
	case "array":
		var a []doc
		for _, k := range n.kids {
			a = append(a, g.ref(k, 0))
		}
		return group(txt("ARRAY["), indent(4, soft(), join(a, txt(","), line())), txt("]")), sqlAtom
	case "call":
		var a []doc
		for _, k := range n.kids {
			a = append(a, g.ref(k, 0))
		}
		fn := n.text
		switch n.text {
		case "min":
			fn = "least"
		case "max":
			fn = "greatest"
		case "ceilDiv":
			return group(txt("("), g.ref(n.kids[0], sqlAdd), indent(4, line(), txt("+ "), g.ref(n.kids[1], sqlAdd+1), txt(" - 1) / "), g.ref(n.kids[1], sqlMul+1))), sqlMul
		case "mulDivFloor", "divMulFloor":
			var f [3]doc
			for i, k := range n.kids {
				f[i] = cat(g.ref(k, sqlAtom), txt("::float8"))
			}
			op1, op2 := "*", "/"
			if n.text == "divMulFloor" {
				op1, op2 = "/", "*"
			}
			return group(txt("least("), indent(4, soft(), group(txt("floor("), f[0], indent(4, line(), txt(op1+" "), f[1], line(), txt(op2+" "), f[2])),
				txt("),"), line(), txt("9007199254740992")), txt(")::bigint")), sqlAtom
		}
		return call(fn, a), sqlAtom
	}
	panic("formgen: unexpected node " + n.op)
}

// call lays out a call of fn with the arguments args.
func call(fn string, args []doc) doc {
	return group(txt(fn+"("), indent(4, soft(), join(args, txt(","), line())), txt(")"))
}

// writeFunction writes a helper that holds a loop as a PL/pgSQL function
// of its own, statement by statement; it takes the form's args last.
func (g *sqlGen) writeFunction(b *strings.Builder, h *helper) {
	var params []doc
	for _, p := range h.params {
		params = append(params, txt(p.name+" bigint"))
	}
	params = append(params, txt("args bigint[]"))
	b.WriteString("\n" + comment("", fmt.Sprintf("%s is the Go form's helper %s: %s", g.funcName(h), h.name, trace(h.at))))
	writeStmt(b, "", "CREATE OR REPLACE FUNCTION ", call(g.funcName(h), params), "")
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
			b.WriteString(comment(in, trace(s.at)))
			writeStmt(b, in, s.lhs[0].name+" := ", g.render(g.eval(s.rhs[0], env), 0), ";")
		case sIf:
			b.WriteString(comment(in, trace(s.at)))
			writeStmt(b, in, "IF ", ifCond(g.render(g.eval(s.cond, env), 0)), " THEN")
			g.writeStmts(b, s.then, env, depth+1)
			if len(s.els) > 0 {
				fmt.Fprintf(b, "%sELSE\n", in)
				g.writeStmts(b, s.els, env, depth+1)
			}
			fmt.Fprintf(b, "%sEND IF;\n", in)
		case sFor:
			b.WriteString(comment(in, trace(s.at)))
			writeStmt(b, in, "WHILE ", g.render(g.eval(s.cond, env), 0), " LOOP")
			g.writeStmts(b, s.body, env, depth+1)
			fmt.Fprintf(b, "%sEND LOOP;\n", in)
		case sReturn:
			b.WriteString(comment(in, trace(s.at)))
			writeStmt(b, in, "RETURN ", g.render(g.eval(s.val, env), 0), ";")
		}
	}
}

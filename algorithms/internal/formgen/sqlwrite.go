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

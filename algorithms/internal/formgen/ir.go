package main

// The intermediate form both emitters read: a form's decide core and its
// helpers, checked against the subset, with every name resolved.

// typ is the type of a value in the subset.
type typ int

const (
	tInt  typ = iota // int64
	tBool            // bool
)

// expr is an expression of the subset.
type expr interface{ exprType() typ }

type (
	// eConst is an integer or boolean constant.
	eConst struct {
		t typ
		v int64 // 0 or 1 for a bool
	}
	// eVar is a local variable, a helper's parameter, a field of the
	// state (s_<field>) or of a Decision (d_<field>).
	eVar struct {
		name string
		t    typ
	}
	// eArg is the i-th (from 0) of the form's parameters (ServerArgs).
	eArg struct {
		name string
		i    int
	}
	// eIn is a field of the request (now, cost, peek, max_delay, refund,
	// act) or live.
	eIn struct{ name string }
	// eBin is a binary operation: + - * / % == != < <= > >= && ||. The
	// integer / and % are floor division and its remainder, which is
	// what Go computes for a non-negative dividend and a positive
	// divisor, the only case the subset allows.
	eBin struct {
		op   string
		x, y expr
	}
	// eNot is !x; eNeg is -x.
	eNot struct{ x expr }
	eNeg struct{ x expr }
	// eCall is a call of a built-in operation: min, max, ceilDiv,
	// mulDivFloor, divMulFloor.
	eCall struct {
		fn   string
		args []expr
	}
	// eHelper is a call of a statement helper (a helper that is more than
	// one return statement). It appears only as the whole right-hand side
	// of an assignment.
	eHelper struct {
		h    *helper
		args []expr
	}
)

func (e eConst) exprType() typ { return e.t }
func (e eVar) exprType() typ   { return e.t }
func (e eArg) exprType() typ   { return tInt }
func (e eIn) exprType() typ {
	return map[bool]typ{true: tBool, false: tInt}[e.name == "peek" || e.name == "refund" || e.name == "live"]
}
func (e eNot) exprType() typ    { return tBool }
func (e eNeg) exprType() typ    { return tInt }
func (e eCall) exprType() typ   { return tInt }
func (e eHelper) exprType() typ { return e.h.result }
func (e eBin) exprType() typ {
	switch e.op {
	case "+", "-", "*", "/", "%":
		return tInt
	}
	return tBool
}

// stmt is a statement of the subset.
type stmt interface{ isStmt() }

// goLine is where a statement (or declaration) is in the Go form, for the
// comments that trace each generated step back to it: the file, the lines
// it spans and the text of its first line.
type goLine struct {
	file      string
	line, end int
	text      string
}

type (
	// sAssign assigns rhs to lhs in parallel (all right-hand sides are
	// evaluated first). decl reports a declaration (:=) of every name.
	sAssign struct {
		lhs  []eVar
		rhs  []expr
		decl bool
		at   goLine
	}
	// sIf is if cond { then } else { els }.
	sIf struct {
		cond      expr
		then, els []stmt
		at        goLine
	}
	// sFor is for cond { body }.
	sFor struct {
		cond expr
		body []stmt
		at   goLine
	}
	// sReturn ends the core (val is its TTL, and dec names the Decision
	// variable) or a helper (val is its result).
	sReturn struct {
		val expr
		dec string
		at  goLine
	}
)

func (sAssign) isStmt() {}
func (sIf) isStmt()     {}
func (sFor) isStmt()    {}
func (sReturn) isStmt() {}

// helper is a method the core calls that is more than one return
// statement, translated once and inlined (or, in SQL, called when it holds
// a loop).
type helper struct {
	name   string
	params []eVar
	locals []eVar // every variable the body declares
	body   []stmt
	result typ
	loops  bool
	at     goLine // its declaration
}

// field is a field of the state or of a Decision.
type field struct {
	goName, name string // Go name and the snake_case name used in the forms
	t            typ
}

// form is one algorithm's decide core and what the emitters need around it.
type form struct {
	pkg     string   // the Go package that holds it, e.g. "algorithms"
	name    string   // the algorithm's Name, e.g. "fixed_window"
	goType  string   // the Go type, e.g. "fixedWindow"
	file    string   // the file that holds the Go form, e.g. "fixedwindow.go"
	args    []string // the ServerArgs' field names, in order
	state   []field  // the state's fields, in storage order
	valid   expr     // the state's validity check, or nil
	validAt goLine   // where valid is declared
	stateAt goLine   // where the state's type is declared
	argsAt  goLine   // where serverArgs is declared
	at      goLine   // where decide is declared
	// goNames maps a variable's name in the forms to the name of the Go
	// local it is, where the two differ (a local renamed because the Lua
	// prelude or another local of decide already has its name).
	goNames  map[string]string
	decision []field // Decision's fields, in reply order
	locals   []eVar  // the core's variables (declared where first assigned)
	body     []stmt
	helpers  []*helper // statement helpers, in the order first called
}

// terminates reports whether a block always ends in a return.
func terminates(b []stmt) bool {
	if len(b) == 0 {
		return false
	}
	switch s := b[len(b)-1].(type) {
	case sReturn:
		return true
	case sIf:
		return terminates(s.then) && terminates(s.els)
	}
	return false
}

// hasReturn reports whether a block holds a return anywhere.
func hasReturn(b []stmt) bool {
	for _, s := range b {
		switch s := s.(type) {
		case sReturn:
			return true
		case sIf:
			if hasReturn(s.then) || hasReturn(s.els) {
				return true
			}
		case sFor:
			if hasReturn(s.body) {
				return true
			}
		}
	}
	return false
}

// nest rewrites a block so that returns only end the branches of a tree of
// ifs: the statements after an if one of whose branches always returns move
// into its other branch. The front end has checked that this is possible
// (see checkReturns).
func nest(b []stmt) []stmt {
	for i, s := range b {
		f, ok := s.(sIf)
		if !ok || !hasReturn(f.then) && !hasReturn(f.els) {
			continue
		}
		rest := b[i+1:]
		out := append([]stmt(nil), b[:i]...)
		switch {
		case terminates(f.then) && terminates(f.els):
			f.then, f.els = nest(f.then), nest(f.els)
		case terminates(f.then):
			f.then, f.els = nest(f.then), nest(append(append([]stmt(nil), f.els...), rest...))
		default: // f.els terminates
			f.then, f.els = nest(append(append([]stmt(nil), f.then...), rest...)), nest(f.els)
		}
		return append(out, f)
	}
	return b
}

package main

import (
	"fmt"
	"go/ast"
	"go/importer"
	"go/parser"
	"go/token"
	"go/types"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"unicode"
)

// loader reads and type-checks the package that holds the Go forms.
type loader struct {
	fset  *token.FileSet
	lines map[string][]string // every file's lines, by name
	pkg   *types.Package
	info  *types.Info
	decls map[types.Object]*ast.FuncDecl
}

// errorAt is a translation error at a position in the Go source.
func (l *loader) errorAt(n ast.Node, format string, args ...any) error {
	p := l.fset.Position(n.Pos())
	return fmt.Errorf("formgen: %s:%d:%d: %s", filepath.Base(p.Filename), p.Line, p.Column, fmt.Sprintf(format, args...))
}

// at returns where n is in the Go source.
func (l *loader) at(n ast.Node) goLine {
	p, e := l.fset.Position(n.Pos()), l.fset.Position(n.End())
	g := goLine{file: filepath.Base(p.Filename), line: p.Line, end: e.Line}
	if lines := l.lines[p.Filename]; p.Line <= len(lines) {
		g.text = strings.TrimSpace(lines[p.Line-1])
	}
	return g
}

// load parses and type-checks the Go files of dir (tests excluded) and
// returns the forms it finds: one per type with a decide method.
func load(dir string) ([]*form, error) {
	paths, err := filepath.Glob(filepath.Join(dir, "*.go"))
	if err != nil {
		return nil, err
	}
	l := &loader{fset: token.NewFileSet(), decls: map[types.Object]*ast.FuncDecl{}, lines: map[string][]string{}}
	var files []*ast.File
	for _, p := range paths {
		if strings.HasSuffix(p, "_test.go") || filepath.Base(p) == manifestFile {
			continue
		}
		src, err := os.ReadFile(p)
		if err != nil {
			return nil, err
		}
		l.lines[p] = strings.Split(string(src), "\n")
		f, err := parser.ParseFile(l.fset, p, src, parser.ParseComments)
		if err != nil {
			return nil, fmt.Errorf("formgen: %w", err)
		}
		files = append(files, f)
	}
	if len(files) == 0 {
		return nil, fmt.Errorf("formgen: no Go files in %s", dir)
	}
	l.info = &types.Info{
		Types:      map[ast.Expr]types.TypeAndValue{},
		Defs:       map[*ast.Ident]types.Object{},
		Uses:       map[*ast.Ident]types.Object{},
		Selections: map[*ast.SelectorExpr]*types.Selection{},
	}
	// The package is checked without the manifest, formgen's output (see
	// manifestFile): a use of the name it declares is no error here.
	var typeErr error
	conf := types.Config{Importer: importer.ForCompiler(l.fset, "source", nil), Error: func(err error) {
		te, ok := err.(types.Error)
		manifestName := ok && (te.Msg == "undefined: "+manifestVar || te.Msg == "undefined: "+manifestType)
		if !manifestName && typeErr == nil {
			typeErr = err
		}
	}}
	l.pkg, _ = conf.Check(files[0].Name.Name, l.fset, files, l.info)
	if typeErr != nil {
		return nil, fmt.Errorf("formgen: type-checking %s: %w", dir, typeErr)
	}
	for _, f := range files {
		for _, d := range f.Decls {
			if fd, ok := d.(*ast.FuncDecl); ok {
				l.decls[l.info.Defs[fd.Name]] = fd
			}
		}
	}
	var forms []*form
	scope := l.pkg.Scope()
	names := scope.Names()
	sort.Strings(names)
	for _, n := range names {
		tn, ok := scope.Lookup(n).(*types.TypeName)
		if !ok {
			continue
		}
		obj, _, _ := types.LookupFieldOrMethod(types.NewPointer(tn.Type()), true, l.pkg, "decide")
		m, ok := obj.(*types.Func)
		if !ok {
			continue
		}
		f, err := l.form(tn, m)
		if err != nil {
			return nil, err
		}
		forms = append(forms, f)
	}
	if len(forms) == 0 {
		return nil, fmt.Errorf("formgen: no type in %s has a decide method", dir)
	}
	for _, f := range forms {
		f.pkg = l.pkg.Name()
	}
	sort.Slice(forms, func(i, j int) bool { return forms[i].name < forms[j].name })
	return forms, nil
}

// method returns the declaration of the method name of *t (possibly
// promoted from an embedded field), or nil.
func (l *loader) method(t types.Type, name string) *ast.FuncDecl {
	obj, _, _ := types.LookupFieldOrMethod(types.NewPointer(t), true, l.pkg, name)
	if obj == nil {
		return nil
	}
	return l.decls[obj]
}

// single returns the expression of a function whose body is one return
// statement of one value, or nil.
func single(fd *ast.FuncDecl) ast.Expr {
	if fd.Body == nil || len(fd.Body.List) != 1 {
		return nil
	}
	r, ok := fd.Body.List[0].(*ast.ReturnStmt)
	if !ok || len(r.Results) != 1 {
		return nil
	}
	return r.Results[0]
}

func (l *loader) isNamed(t types.Type, name string) bool {
	if p, ok := t.(*types.Pointer); ok {
		t = p.Elem()
	}
	n, ok := t.(*types.Named)
	return ok && n.Obj().Pkg() == l.pkg && n.Obj().Name() == name
}

func basicType(t types.Type) (typ, bool) {
	b, ok := t.Underlying().(*types.Basic)
	switch {
	case !ok:
		return 0, false
	case b.Kind() == types.Int64 || b.Kind() == types.UntypedInt:
		return tInt, true
	case b.Kind() == types.Bool || b.Kind() == types.UntypedBool:
		return tBool, true
	}
	return 0, false
}

// snake turns a Go name into the name the forms use: RetryAfter →
// retry_after.
func snake(s string) string {
	var b strings.Builder
	for i, r := range s {
		if unicode.IsUpper(r) {
			if i > 0 {
				b.WriteByte('_')
			}
			r = unicode.ToLower(r)
		}
		b.WriteRune(r)
	}
	return b.String()
}

// structFields returns the fields of a struct type, which must all be
// int64 or bool.
//
// A Decision's slice fields (Parts, a composite's part decisions) are not
// a form's: a single algorithm leaves them nil, so structFields skips them
// when skipSlices is set.
func (l *loader) structFields(n ast.Node, t types.Type, skipSlices bool) ([]field, error) {
	st, ok := t.Underlying().(*types.Struct)
	if !ok {
		return nil, l.errorAt(n, "%v is not a struct", t)
	}
	var fs []field
	for i := range st.NumFields() {
		v := st.Field(i)
		if _, slice := v.Type().(*types.Slice); slice && skipSlices {
			continue
		}
		ft, ok := basicType(v.Type())
		if !ok {
			return nil, l.errorAt(n, "field %s of %v is %v; the subset has int64 and bool", v.Name(), t, v.Type())
		}
		fs = append(fs, field{goName: v.Name(), name: snake(v.Name()), t: ft})
	}
	return fs, nil
}

// form reads the form of the type tn whose decide method is m.
func (l *loader) form(tn *types.TypeName, m *types.Func) (*form, error) {
	fd := l.decls[m]
	if fd == nil {
		return nil, fmt.Errorf("formgen: no declaration for %s.decide", tn.Name())
	}
	f := &form{goType: tn.Name(), file: filepath.Base(l.fset.Position(fd.Pos()).Filename), at: l.at(fd), goNames: map[string]string{}}
	sig := m.Type().(*types.Signature)
	p, r := sig.Params(), sig.Results()
	var dptr *types.Pointer
	if p.Len() == 4 {
		dptr, _ = p.At(3).Type().(*types.Pointer)
	}
	if p.Len() != 4 || r.Len() != 1 || !l.isNamed(p.At(2).Type(), "Request") ||
		dptr == nil || !l.isNamed(dptr.Elem(), "Decision") || types.Typ[types.Bool] != p.At(1).Type() ||
		types.Typ[types.Int64] != r.At(0).Type() {
		return nil, l.errorAt(fd, "%s.decide must be func(s *State, live bool, req Request, d *Decision) int64", tn.Name())
	}
	ptr, ok := p.At(0).Type().(*types.Pointer)
	if !ok {
		return nil, l.errorAt(fd, "%s.decide: the state must be passed by pointer", tn.Name())
	}
	var err error
	if f.state, err = l.structFields(fd, ptr.Elem(), false); err != nil {
		return nil, err
	}
	if f.decision, err = l.structFields(fd, dptr.Elem(), true); err != nil {
		return nil, err
	}

	// The name: Name() returns a string constant.
	nd := l.method(tn.Type(), "Name")
	if nd == nil || single(nd) == nil || l.info.Types[single(nd)].Value == nil {
		return nil, l.errorAt(fd, "%s has no Name method returning a constant", tn.Name())
	}
	f.name = strings.Trim(l.info.Types[single(nd)].Value.ExactString(), `"`)

	// The parameters: serverArgs returns []int64{recv.field, ...}.
	ad := l.method(tn.Type(), "serverArgs")
	if ad == nil {
		return nil, l.errorAt(fd, "%s has no serverArgs method listing its parameters", tn.Name())
	}
	lit, ok := single(ad).(*ast.CompositeLit)
	if !ok {
		return nil, l.errorAt(ad, "serverArgs must return a []int64{...} of the receiver's fields")
	}
	f.argsAt = l.at(ad)
	if obj, ok := ptr.Elem().(*types.Named); ok {
		if p := obj.Obj().Pos(); p.IsValid() {
			f.stateAt = l.at(&ast.Ident{NamePos: p, Name: obj.Obj().Name()})
		}
	}
	argIndex := map[types.Object]int{}
	for i, e := range lit.Elts {
		sel, ok := e.(*ast.SelectorExpr)
		if !ok || l.info.Selections[sel] == nil || l.info.Selections[sel].Kind() != types.FieldVal {
			return nil, l.errorAt(e, "serverArgs must list the receiver's fields")
		}
		argIndex[l.info.Selections[sel].Obj()] = i
		f.args = append(f.args, sel.Sel.Name)
	}

	c := &conv{l: l, f: f, argIndex: argIndex, names: map[types.Object]eVar{}, used: map[string]bool{},
		decisions: map[types.Object]bool{}, helpers: map[types.Object]*helper{}}
	for _, a := range f.args {
		c.used[a] = true
	}
	for _, n := range []string{"now", "cost", "peek", "max_delay", "refund", "act", "live", "slack", "raw", "expires", "ttl", "px"} {
		c.used[n] = true
	}
	if len(fd.Type.Params.List) != 4 || len(fd.Recv.List[0].Names) != 1 {
		return nil, l.errorAt(fd, "decide must name its receiver and its parameters: (s *State, live bool, req Request, d *Decision)")
	}
	c.recv = l.info.Defs[fd.Recv.List[0].Names[0]]
	c.live = l.info.Defs[fd.Type.Params.List[1].Names[0]]
	c.req = l.info.Defs[fd.Type.Params.List[2].Names[0]]
	c.state = l.info.Defs[fd.Type.Params.List[0].Names[0]]
	c.dec = l.info.Defs[fd.Type.Params.List[3].Names[0]]

	// The state's validity check: valid() on *State, one return.
	if vd := l.method(ptr.Elem(), "valid"); vd != nil {
		e := single(vd)
		if e == nil {
			return nil, l.errorAt(vd, "valid must be one return statement")
		}
		f.validAt = l.at(vd)
		vc := *c
		vc.state = l.info.Defs[vd.Recv.List[0].Names[0]]
		vc.facts = &stateFacts{live: true}
		if f.valid, err = vc.expr(e); err != nil {
			return nil, err
		}
	}

	c.facts = &stateFacts{set: map[string]bool{}}
	if f.body, err = c.block(fd.Body.List); err != nil {
		return nil, err
	}
	if err := c.checkReturns(fd.Body, f.body, false); err != nil {
		return nil, err
	}
	f.locals = c.locals
	f.helpers = c.order
	return f, nil
}

// conv converts one form's core and helpers into the intermediate form.
type conv struct {
	l                 *loader
	f                 *form
	argIndex          map[types.Object]int
	recv, req, live   types.Object
	dec               types.Object // decide's *Decision parameter
	state             types.Object
	names             map[types.Object]eVar // variables → their names
	used              map[string]bool       // names taken in the form
	locals            []eVar
	decisions         map[types.Object]bool // Decision variables
	helper            *helper               // the helper being converted, nil in the core
	subst             map[types.Object]expr // an expression helper's parameters
	helpers           map[types.Object]*helper
	order             []*helper
	calling           map[types.Object]bool
	decisionVarPrefix string
	facts             *stateFacts // what decide may read of the state here
}

// stateFacts is what is known, at a point of decide, about reading the
// state: when live is true every field holds the stored value, and set
// names the fields decide has assigned on every path to that point. A read
// of any other field is an error: when live is false the Go form reads a
// zero where the SQL form reads NULL, and decide must not depend on either.
type stateFacts struct {
	live bool
	set  map[string]bool
}

func (f *stateFacts) clone() *stateFacts {
	c := &stateFacts{live: f.live, set: map[string]bool{}}
	for k, v := range f.set {
		c.set[k] = v
	}
	return c
}

func (f *stateFacts) readable(name string) bool { return f.live || f.set[name] }

// meet is what holds after two paths join.
func meet(a, b *stateFacts) *stateFacts {
	m := &stateFacts{live: a.live && b.live, set: map[string]bool{}}
	for _, f := range []*stateFacts{a, b} {
		for k := range f.set {
			if a.readable(k) && b.readable(k) {
				m.set[k] = true
			}
		}
	}
	return m
}

// isLive reports whether e is decide's live parameter.
func (c *conv) isLive(e ast.Expr) bool {
	id, ok := ast.Unparen(e).(*ast.Ident)
	return ok && c.helper == nil && c.l.info.Uses[id] == c.live
}

// impliesLive reports whether e being true means live is true.
func (c *conv) impliesLive(e ast.Expr) bool {
	e = ast.Unparen(e)
	if c.isLive(e) {
		return true
	}
	b, ok := e.(*ast.BinaryExpr)
	return ok && b.Op == token.LAND && (c.impliesLive(b.X) || c.impliesLive(b.Y))
}

// negImpliesLive reports whether e being false means live is true.
func (c *conv) negImpliesLive(e ast.Expr) bool {
	e = ast.Unparen(e)
	if u, ok := e.(*ast.UnaryExpr); ok && u.Op == token.NOT {
		return c.impliesLive(u.X)
	}
	b, ok := e.(*ast.BinaryExpr)
	return ok && b.Op == token.LOR && (c.negImpliesLive(b.X) || c.negImpliesLive(b.Y))
}

// declare names a new variable.
func (c *conv) declare(id *ast.Ident, t typ) eVar {
	obj := c.l.info.Defs[id]
	base := id.Name
	if c.helper != nil {
		base = c.helper.name + "_" + id.Name
	}
	name := base
	for i := 2; c.used[name]; i++ {
		name = fmt.Sprintf("%s%d", base, i)
	}
	c.used[name] = true
	if name != base {
		c.f.goNames[name] = base
	}
	v := eVar{name: name, t: t}
	c.names[obj] = v
	if c.helper != nil {
		c.helper.locals = append(c.helper.locals, v)
	} else {
		c.locals = append(c.locals, v)
	}
	return v
}

func (c *conv) block(list []ast.Stmt) ([]stmt, error) {
	var out []stmt
	for _, s := range list {
		ss, err := c.stmt(s)
		if err != nil {
			return nil, err
		}
		out = append(out, ss...)
	}
	return out, nil
}

func (c *conv) stmt(s ast.Stmt) ([]stmt, error) {
	switch s := s.(type) {
	case *ast.AssignStmt:
		return c.assign(s)
	case *ast.IncDecStmt:
		v, err := c.target(s.X, false)
		if err != nil {
			return nil, err
		}
		op := map[token.Token]string{token.INC: "+", token.DEC: "-"}[s.Tok]
		return []stmt{sAssign{lhs: []eVar{v}, rhs: []expr{eBin{op: op, x: v, y: eConst{t: tInt, v: 1}}}, at: c.l.at(s)}}, nil
	case *ast.IfStmt:
		if s.Init != nil {
			return nil, c.l.errorAt(s, "an if with an init statement is outside the subset; assign before the if")
		}
		cond, err := c.boolExpr(s.Cond)
		if err != nil {
			return nil, err
		}
		before := c.facts
		c.facts = before.clone()
		c.facts.live = c.facts.live || c.impliesLive(s.Cond)
		then, err := c.block(s.Body.List)
		if err != nil {
			return nil, err
		}
		afterThen := c.facts
		c.facts = before.clone()
		c.facts.live = c.facts.live || c.negImpliesLive(s.Cond)
		var els []stmt
		switch e := s.Else.(type) {
		case *ast.BlockStmt:
			els, err = c.block(e.List)
		case *ast.IfStmt:
			els, err = c.stmt(e)
		}
		if err != nil {
			return nil, err
		}
		afterElse := c.facts
		switch {
		case terminates(then) && terminates(els):
			c.facts = before
		case terminates(then):
			c.facts = afterElse
		case terminates(els):
			c.facts = afterThen
		default:
			c.facts = meet(afterThen, afterElse)
		}
		return []stmt{sIf{cond: cond, then: then, els: els, at: c.l.at(s)}}, nil
	case *ast.ForStmt:
		if s.Init != nil || s.Post != nil || s.Cond == nil {
			return nil, c.l.errorAt(s, "only for cond { ... } loops are in the subset")
		}
		if c.helper == nil {
			return nil, c.l.errorAt(s, "a loop is outside the subset in decide itself; put it in a helper method")
		}
		cond, err := c.boolExpr(s.Cond)
		if err != nil {
			return nil, err
		}
		if c.hasDivision(cond) {
			return nil, c.l.errorAt(s.Cond, "an integer division in a loop condition is outside the subset")
		}
		body, err := c.block(s.Body.List)
		if err != nil {
			return nil, err
		}
		if hasReturn(body) {
			return nil, c.l.errorAt(s, "a return inside a loop is outside the subset")
		}
		c.helper.loops = true
		return []stmt{sFor{cond: cond, body: body, at: c.l.at(s)}}, nil
	case *ast.ReturnStmt:
		return c.ret(s)
	}
	return nil, c.l.errorAt(s, "%T is outside the subset (assignments, if/else, for cond, return)", s)
}

func (c *conv) hasDivision(e expr) bool {
	switch e := e.(type) {
	case eBin:
		return e.op == "/" || e.op == "%" || c.hasDivision(e.x) || c.hasDivision(e.y)
	case eNot:
		return c.hasDivision(e.x)
	case eNeg:
		return c.hasDivision(e.x)
	case eCall:
		if e.fn == "ceilDiv" {
			return true
		}
		for _, a := range e.args {
			if c.hasDivision(a) {
				return true
			}
		}
	}
	return false
}

func (c *conv) ret(s *ast.ReturnStmt) ([]stmt, error) {
	if c.helper != nil {
		if len(s.Results) != 1 {
			return nil, c.l.errorAt(s, "a helper returns one value")
		}
		v, err := c.expr(s.Results[0])
		if err != nil {
			return nil, err
		}
		return []stmt{sReturn{val: v, at: c.l.at(s)}}, nil
	}
	if len(s.Results) != 1 {
		return nil, c.l.errorAt(s, "decide returns a TTL")
	}
	if !c.decisions[c.dec] {
		return nil, c.l.errorAt(s, "decide must set its Decision with *d = Decision{...} before it returns")
	}
	ttl, err := c.expr(s.Results[0])
	if err != nil {
		return nil, err
	}
	return []stmt{sReturn{val: ttl, dec: c.names[c.dec].name, at: c.l.at(s)}}, nil
}

// target converts an assignment's left-hand side.
func (c *conv) target(e ast.Expr, decl bool) (eVar, error) {
	switch e := e.(type) {
	case *ast.Ident:
		if decl {
			if obj := c.l.info.Defs[e]; obj != nil {
				t, ok := basicType(obj.Type())
				if !ok {
					return eVar{}, c.l.errorAt(e, "%s has type %v; the subset has int64 and bool", e.Name, obj.Type())
				}
				return c.declare(e, t), nil
			}
		}
		v, ok := c.names[c.l.info.Uses[e]]
		if !ok {
			return eVar{}, c.l.errorAt(e, "cannot assign to %s", e.Name)
		}
		return v, nil
	case *ast.SelectorExpr:
		if x, ok := e.X.(*ast.Ident); ok {
			obj := c.l.info.Uses[x]
			if obj == c.state && c.helper == nil {
				return c.stateField(e)
			}
			if c.decisions[obj] {
				return c.decisionField(e, c.names[obj].name)
			}
		}
	}
	return eVar{}, c.l.errorAt(e, "only local variables and the fields of the state and of a Decision may be assigned")
}

func (c *conv) stateField(e *ast.SelectorExpr) (eVar, error) {
	for _, f := range c.f.state {
		if f.goName == e.Sel.Name {
			return eVar{name: "s_" + f.name, t: f.t}, nil
		}
	}
	return eVar{}, c.l.errorAt(e, "no state field %s", e.Sel.Name)
}

func (c *conv) decisionField(e *ast.SelectorExpr, prefix string) (eVar, error) {
	for _, f := range c.f.decision {
		if f.goName == e.Sel.Name {
			return eVar{name: prefix + "_" + f.name, t: f.t}, nil
		}
	}
	return eVar{}, c.l.errorAt(e, "no Decision field %s", e.Sel.Name)
}

func (c *conv) assign(s *ast.AssignStmt) ([]stmt, error) {
	decl := s.Tok == token.DEFINE
	// *d = Decision{...}
	if len(s.Lhs) == 1 && len(s.Rhs) == 1 {
		if lit, ok := s.Rhs[0].(*ast.CompositeLit); ok {
			star, _ := s.Lhs[0].(*ast.StarExpr)
			var id *ast.Ident
			if star != nil {
				id, _ = star.X.(*ast.Ident)
			}
			if id == nil || decl || c.l.info.Uses[id] != c.dec || !c.l.isNamed(c.l.info.Types[lit].Type, "Decision") || c.helper != nil {
				return nil, c.l.errorAt(s, "a composite literal is in the subset only as *d = Decision{...} in decide")
			}
			if c.decisionVarPrefix != "" {
				return nil, c.l.errorAt(s, "decide sets its Decision once")
			}
			obj := c.dec
			c.decisions[obj] = true
			c.decisionVarPrefix = id.Name
			c.names[obj] = eVar{name: id.Name}
			vals := map[string]expr{}
			for _, el := range lit.Elts {
				kv, ok := el.(*ast.KeyValueExpr)
				if !ok {
					return nil, c.l.errorAt(el, "Decision{...} must name its fields")
				}
				v, err := c.expr(kv.Value)
				if err != nil {
					return nil, err
				}
				vals[kv.Key.(*ast.Ident).Name] = v
			}
			a := sAssign{decl: true, at: c.l.at(s)}
			for _, f := range c.f.decision {
				v := eVar{name: id.Name + "_" + f.name, t: f.t}
				c.used[v.name] = true
				c.locals = append(c.locals, v)
				a.lhs = append(a.lhs, v)
				if x, ok := vals[f.goName]; ok {
					a.rhs = append(a.rhs, x)
				} else {
					a.rhs = append(a.rhs, eConst{t: f.t})
				}
			}
			return []stmt{a}, nil
		}
	}
	if len(s.Lhs) != len(s.Rhs) {
		return nil, c.l.errorAt(s, "an assignment must have as many values as names")
	}
	// The right-hand sides first: they see the variables before the
	// assignment.
	var rhs []expr
	for _, r := range s.Rhs {
		var v expr
		var err error
		if call, ok := r.(*ast.CallExpr); ok && len(s.Rhs) == 1 && c.l.info.Types[r].Value == nil {
			v, err = c.call(call, true)
		} else {
			v, err = c.expr(r)
		}
		if err != nil {
			return nil, err
		}
		rhs = append(rhs, v)
	}
	var lhs []eVar
	for _, l := range s.Lhs {
		if id, ok := l.(*ast.Ident); ok && id.Name == "_" {
			return nil, c.l.errorAt(l, "_ is outside the subset")
		}
		v, err := c.target(l, decl)
		if err != nil {
			return nil, err
		}
		lhs = append(lhs, v)
	}
	if op, ok := map[token.Token]string{token.ADD_ASSIGN: "+", token.SUB_ASSIGN: "-", token.MUL_ASSIGN: "*"}[s.Tok]; ok {
		rhs[0] = eBin{op: op, x: lhs[0], y: rhs[0]}
	} else if s.Tok != token.ASSIGN && s.Tok != token.DEFINE {
		return nil, c.l.errorAt(s, "%s is outside the subset", s.Tok)
	}
	for i := range lhs {
		if lhs[i].t != rhs[i].exprType() {
			return nil, c.l.errorAt(s, "mismatched types in assignment to %s", lhs[i].name)
		}
		if strings.HasPrefix(lhs[i].name, "s_") && c.helper == nil {
			c.facts.set[lhs[i].name] = true
		}
	}
	return []stmt{sAssign{lhs: lhs, rhs: rhs, decl: decl, at: c.l.at(s)}}, nil
}

func (c *conv) boolExpr(e ast.Expr) (expr, error) {
	v, err := c.expr(e)
	if err == nil && v.exprType() != tBool {
		err = c.l.errorAt(e, "not a bool")
	}
	return v, err
}

func (c *conv) expr(e ast.Expr) (expr, error) {
	tv := c.l.info.Types[e]
	if tv.Value != nil {
		t, ok := basicType(tv.Type)
		if !ok {
			return nil, c.l.errorAt(e, "constant of type %v is outside the subset", tv.Type)
		}
		if t == tBool {
			if tv.Value.ExactString() == "true" {
				return eConst{t: tBool, v: 1}, nil
			}
			return eConst{t: tBool}, nil
		}
		var v int64
		if _, err := fmt.Sscan(tv.Value.ExactString(), &v); err != nil || v > 1<<53 || v < -(1<<53) {
			return nil, c.l.errorAt(e, "constant %s is not an integer of at most 2^53", tv.Value)
		}
		return eConst{t: tInt, v: v}, nil
	}
	switch e := e.(type) {
	case *ast.ParenExpr:
		return c.expr(e.X)
	case *ast.Ident:
		obj := c.l.info.Uses[e]
		if obj == c.live && c.helper == nil {
			return eIn{name: "live"}, nil
		}
		if x, ok := c.subst[obj]; ok {
			return x, nil
		}
		if v, ok := c.names[obj]; ok && !c.decisions[obj] {
			return v, nil
		}
		return nil, c.l.errorAt(e, "%s is outside the subset here", e.Name)
	case *ast.SelectorExpr:
		if x, ok := e.X.(*ast.Ident); ok {
			obj := c.l.info.Uses[x]
			switch {
			case obj == c.recv:
				sel := c.l.info.Selections[e]
				if sel == nil || sel.Kind() != types.FieldVal {
					break
				}
				i, ok := c.argIndex[sel.Obj()]
				if !ok {
					return nil, c.l.errorAt(e, "%s is not one of the parameters serverArgs lists", e.Sel.Name)
				}
				return eArg{name: c.f.args[i], i: i}, nil
			case obj == c.req && c.helper == nil:
				switch e.Sel.Name {
				case "Now":
					return eIn{name: "now"}, nil
				case "Cost":
					return eIn{name: "cost"}, nil
				case "Peek":
					return eIn{name: "peek"}, nil
				case "MaxDelay":
					return eIn{name: "max_delay"}, nil
				case "Refund":
					return eIn{name: "refund"}, nil
				case "Act":
					return eIn{name: "act"}, nil
				}
			case obj == c.state:
				v, err := c.stateField(e)
				if err == nil && c.facts != nil && !c.facts.readable(v.name) {
					err = c.l.errorAt(e, "decide reads %s where live may be false and it has not been assigned: read the state only under if live { ... } (or after if !live || ... { assign it })", types.ExprString(e))
				}
				return v, err
			case c.decisions[obj]:
				return c.decisionField(e, c.names[obj].name)
			}
		}
		return nil, c.l.errorAt(e, "%s is outside the subset here", types.ExprString(e))
	case *ast.BinaryExpr:
		x, err := c.expr(e.X)
		if err != nil {
			return nil, err
		}
		op := e.Op.String()
		saved := c.facts
		if c.facts != nil && (op == "&&" && c.impliesLive(e.X) || op == "||" && c.negImpliesLive(e.X)) {
			// The right operand is evaluated only when live is true.
			c.facts = saved.clone()
			c.facts.live = true
		}
		y, err := c.expr(e.Y)
		c.facts = saved
		if err != nil {
			return nil, err
		}
		switch op {
		case "+", "-", "*", "/", "%":
			if x.exprType() != tInt || y.exprType() != tInt {
				return nil, c.l.errorAt(e, "%s on non-integers", op)
			}
		case "==", "!=", "<", "<=", ">", ">=":
			if x.exprType() != tInt || y.exprType() != tInt {
				return nil, c.l.errorAt(e, "comparison of non-integers")
			}
		case "&&", "||":
		default:
			return nil, c.l.errorAt(e, "operator %s is outside the subset", op)
		}
		return eBin{op: op, x: x, y: y}, nil
	case *ast.UnaryExpr:
		x, err := c.expr(e.X)
		if err != nil {
			return nil, err
		}
		switch e.Op {
		case token.NOT:
			return eNot{x: x}, nil
		case token.SUB:
			return eNeg{x: x}, nil
		}
		return nil, c.l.errorAt(e, "operator %s is outside the subset", e.Op)
	case *ast.CallExpr:
		return c.call(e, false)
	}
	return nil, c.l.errorAt(e, "%T is outside the subset", e)
}

// primitives are the named helpers every emitter implements.
var primitives = map[string]int{"ceilDiv": 2, "mulDivFloor": 3, "divMulFloor": 3}

// call converts a call: min, max, a primitive, or a method of the receiver
// (a helper). A statement helper may only be called as the whole
// right-hand side of an assignment (stmt).
func (c *conv) call(e *ast.CallExpr, stmt bool) (expr, error) {
	var args []expr
	for _, a := range e.Args {
		v, err := c.expr(a)
		if err != nil {
			return nil, err
		}
		if v.exprType() != tInt {
			return nil, c.l.errorAt(a, "arguments are integers in the subset")
		}
		args = append(args, v)
	}
	switch fun := e.Fun.(type) {
	case *ast.Ident:
		switch obj := c.l.info.Uses[fun].(type) {
		case *types.Builtin:
			if (obj.Name() == "min" || obj.Name() == "max") && len(args) >= 2 {
				return eCall{fn: obj.Name(), args: args}, nil
			}
		case *types.Func:
			if n, ok := primitives[obj.Name()]; ok && obj.Pkg() == c.l.pkg && n == len(args) {
				return eCall{fn: obj.Name(), args: args}, nil
			}
		}
	case *ast.SelectorExpr:
		x, ok := fun.X.(*ast.Ident)
		sel := c.l.info.Selections[fun]
		if !ok || c.l.info.Uses[x] != c.recv || sel == nil || sel.Kind() != types.MethodVal {
			break
		}
		fd := c.l.decls[sel.Obj()]
		if fd == nil {
			break
		}
		if c.calling[sel.Obj()] {
			return nil, c.l.errorAt(e, "recursive call of %s", fun.Sel.Name)
		}
		if r := single(fd); r != nil {
			// An expression helper: its result with the arguments in
			// place of its parameters.
			sub := *c
			sub.subst = map[types.Object]expr{}
			sub.recv = c.l.info.Defs[fd.Recv.List[0].Names[0]]
			sub.calling = map[types.Object]bool{sel.Obj(): true}
			for k, v := range c.calling {
				sub.calling[k] = v
			}
			i := 0
			for _, fld := range fd.Type.Params.List {
				for _, n := range fld.Names {
					sub.subst[c.l.info.Defs[n]] = args[i]
					i++
				}
			}
			return sub.expr(r)
		}
		if !stmt {
			return nil, c.l.errorAt(e, "%s is more than one return statement: call it only as the whole right-hand side of an assignment", fun.Sel.Name)
		}
		h, err := c.statementHelper(sel.Obj(), fd)
		if err != nil {
			return nil, err
		}
		return eHelper{h: h, args: args}, nil
	}
	return nil, c.l.errorAt(e, "call of %s is outside the subset (min, max, ceilDiv, mulDivFloor, divMulFloor, the receiver's methods)", types.ExprString(e.Fun))
}

func (c *conv) statementHelper(obj types.Object, fd *ast.FuncDecl) (*helper, error) {
	if h, ok := c.helpers[obj]; ok {
		return h, nil
	}
	sig := obj.Type().(*types.Signature)
	if sig.Results().Len() != 1 {
		return nil, c.l.errorAt(fd, "a helper returns one value")
	}
	rt, ok := basicType(sig.Results().At(0).Type())
	if !ok {
		return nil, c.l.errorAt(fd, "a helper returns int64 or bool")
	}
	h := &helper{name: fd.Name.Name, result: rt, at: c.l.at(fd)}
	sub := *c
	sub.helper = h
	sub.subst = nil
	sub.recv = c.l.info.Defs[fd.Recv.List[0].Names[0]]
	sub.calling = map[types.Object]bool{obj: true}
	for k, v := range c.calling {
		sub.calling[k] = v
	}
	sub.names = map[types.Object]eVar{}
	for _, fld := range fd.Type.Params.List {
		for _, n := range fld.Names {
			t, ok := basicType(c.l.info.Defs[n].Type())
			if !ok || t != tInt {
				return nil, c.l.errorAt(n, "a helper's parameters are int64")
			}
			v := sub.declare(n, t)
			h.params = append(h.params, v)
		}
	}
	h.locals = nil // the parameters are not locals
	body, err := sub.block(fd.Body.List)
	if err != nil {
		return nil, err
	}
	if !terminates(body) {
		return nil, c.l.errorAt(fd, "%s must end in a return", fd.Name.Name)
	}
	if err := sub.checkReturns(fd.Body, body, true); err != nil {
		return nil, err
	}
	h.body = body
	c.helpers[obj] = h
	c.order = append(c.order, h)
	return h, nil
}

// checkReturns checks that nest can turn a block's returns into a tree:
// an if whose branches do not always return holds no return at all.
func (c *conv) checkReturns(n ast.Node, b []stmt, _ bool) error {
	for _, s := range b {
		f, ok := s.(sIf)
		if !ok {
			continue
		}
		if !terminates(f.then) && !terminates(f.els) && (hasReturn(f.then) || hasReturn(f.els)) {
			return c.l.errorAt(n, "a return in an if whose branches do not always end in a return: give the if an else that returns, or move the return to the end of its block")
		}
		if err := c.checkReturns(n, f.then, false); err != nil {
			return err
		}
		if err := c.checkReturns(n, f.els, false); err != nil {
			return err
		}
	}
	return nil
}

package main

import (
	"fmt"
	"slices"
)

// Naming: every variable of a SQL form is named after the Go value it
// holds, the same in every function of the form (see siteNumbers), and the
// comment before it names where the Go form computes that value (see
// defText).

// site is where the Go form gives a node its value, which names the node's
// variable (when it gets one) and the comment before it: an assignment to
// a variable, the end of an if that assigns the variable in a branch (a
// join: the value the if leaves it), or an if's condition (v is "").
type site struct {
	v    string // the Go variable, as the forms spell it (s_tat for s.tat)
	at   goLine
	join bool
}

// isSite reports whether an assignment of e gives its variable a value of
// its own, a site: not a constant or a copy of another value, which are
// never variables of the SQL form.
func isSite(e expr) bool {
	switch e.(type) {
	case eConst, eVar, eArg, eIn:
		return false
	}
	return true
}

// siteNumbers numbers the sites of every variable of f (by its Go name) in
// the order of the Go source, and the ifs (v ""), so that each variable of
// the SQL forms is named after the Go value it holds, the same in every
// function of the form: v_<name> for a variable given a value at one site,
// v_<name>_<n> at the n-th of several, v_if_<n> for the n-th if's
// condition. Constants and copies are not sites (see isSite).
func siteNumbers(f *form) (num map[site]int, count map[string]int) {
	num, count = map[site]int{}, map[string]int{}
	add := func(s site) {
		if _, ok := num[s]; !ok {
			count[s.v]++
			num[s] = count[s.v]
		}
	}
	var walk func(b []stmt)
	walk = func(b []stmt) {
		for _, s := range b {
			switch s := s.(type) {
			case sAssign:
				for i, v := range s.lhs {
					if isSite(s.rhs[i]) {
						add(site{v: f.goName(v.name), at: s.at})
					}
				}
			case sIf:
				add(site{at: s.at})
				walk(s.then)
				walk(s.els)
				if !hasReturn(s.then) && !hasReturn(s.els) {
					for _, v := range assigned(append(slices.Clone(s.then), s.els...)) {
						add(site{v: f.goName(v), at: s.at, join: true})
					}
				}
			case sFor:
				walk(s.body)
			}
		}
	}
	walk(f.body)
	for _, h := range f.helpers {
		walk(h.body)
	}
	return num, count
}

// assigned returns the variables a block assigns that it does not declare
// (which live on after it), in the order first assigned.
func assigned(b []stmt) []string {
	var out []string
	seen := map[string]bool{}
	var walk func(b []stmt)
	walk = func(b []stmt) {
		for _, s := range b {
			switch s := s.(type) {
			case sAssign:
				for _, v := range s.lhs {
					if !seen[v.name] {
						seen[v.name] = true
						if !s.decl {
							out = append(out, v.name)
						}
					}
				}
			case sIf:
				walk(s.then)
				walk(s.els)
			case sFor:
				walk(s.body)
			}
		}
	}
	walk(b)
	return out
}

// goName is the name of the Go variable the forms call v.
func (f *form) goName(v string) string {
	if n, ok := f.goNames[v]; ok {
		return n
	}
	return v
}

// nameVars names the nodes in mat, the variables the cost model chose.
func (g *sqlGen) nameVars(mat map[*snode]bool) {
	names := map[string]bool{"v_checked": true, "state": true, "now_us": true, "cost": true, "peek": true, "args": true,
		"max_delay": true, "refund": true, "act": true}
	// The unpacked parameters and fields (st_, arg_) cannot clash with
	// the variables, which all start with v_.
	num, count := siteNumbers(g.f)
	for _, n := range g.all {
		if !mat[n] {
			continue
		}
		base := "v_t"
		switch d := n.def; {
		case d == nil:
		case d.v == "":
			base = fmt.Sprintf("v_if_%d", num[*d])
		case count[d.v] > 1:
			base = fmt.Sprintf("v_%s_%d", d.v, num[*d])
		default:
			base = "v_" + d.v
		}
		// Two values from one site (a value the row form specializes
		// on each side of a split) are base, base_b, base_c, ...
		name := base
		for i := 1; names[name]; i++ {
			name = fmt.Sprintf("%s_%c", base, 'a'+i)
		}
		names[name] = true
		n.mat = name
	}
}

package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// errorHeader is a package with everything a form needs but decide.
const errorHeader = `package bad

type Request struct {
	Now, Cost int64
	Peek      bool
}

type Decision struct {
	Allowed                                         bool
	Limit, Remaining, RetryAfter, ResetAfter, Delay int64
}

func other(x int64) int64 { return x }

type alg struct{ limit, period, spare int64 }

func (a *alg) Name() string        { return "bad" }
func (a *alg) serverArgs() []int64 { return []int64{a.limit, a.period} }

type state struct{ n int64 }

func (a *alg) twice(x int64) int64 {
	if x < 0 {
		return 0
	}
	return 2 * x
}

`

// TestOutsideSubset checks that the translator refuses Go outside the
// subset with an error that says where and what.
func TestOutsideSubset(t *testing.T) {
	cases := []struct {
		name, src, want string
	}{
		{"switch", `func (a *alg) decide(s *state, live bool, req Request, d *Decision) int64 {
	*d = Decision{}
	switch {
	case live:
	}
	return 0
}`, "bad.go:31:2: *ast.SwitchStmt is outside the subset"},
		{"loop in decide", `func (a *alg) decide(s *state, live bool, req Request, d *Decision) int64 {
	*d = Decision{}
	for d.Remaining < 3 {
		d.Remaining++
	}
	return 0
}`, "a loop is outside the subset in decide itself"},
		{"state read when not live", `func (a *alg) decide(s *state, live bool, req Request, d *Decision) int64 {
	*d = Decision{Remaining: s.n}
	return 0
}`, "decide reads s.n where live may be false"},
		{"unknown call", `func (a *alg) decide(s *state, live bool, req Request, d *Decision) int64 {
	*d = Decision{Remaining: other(1)}
	return 0
}`, "call of other is outside the subset"},
		{"not a parameter", `func (a *alg) decide(s *state, live bool, req Request, d *Decision) int64 {
	*d = Decision{Remaining: a.spare}
	return 0
}`, "spare is not one of the parameters serverArgs lists"},
		{"statement helper in an expression", `func (a *alg) decide(s *state, live bool, req Request, d *Decision) int64 {
	*d = Decision{Remaining: 1 + a.twice(3)}
	return 0
}`, "twice is more than one return statement"},
		{"return in a branch that falls through", `func (a *alg) decide(s *state, live bool, req Request, d *Decision) int64 {
	*d = Decision{}
	if req.Peek {
		if live {
			return 0
		}
	}
	return 1
}`, "a return in an if whose branches do not always end in a return"},
		{"float", `func (a *alg) decide(s *state, live bool, req Request, d *Decision) int64 {
	f := 1.5
	*d = Decision{}
	_ = f
	return 0
}`, "bad.go:30:7: constant of type float64 is outside the subset"},
		{"if with init", `func (a *alg) decide(s *state, live bool, req Request, d *Decision) int64 {
	*d = Decision{}
	if x := req.Cost; x > 1 {
		d.Remaining = x
	}
	return 0
}`, "an if with an init statement is outside the subset"},
		{"division in a loop condition", `func (a *alg) find(x int64) int64 {
	for x/2 > 1 {
		x--
	}
	return x
}

func (a *alg) decide(s *state, live bool, req Request, d *Decision) int64 {
	*d = Decision{}
	n := a.find(req.Cost)
	d.Remaining = n
	return 0
}`, "an integer division in a loop condition is outside the subset"},
		{"wrong signature", `func (a *alg) decide(s state, live bool, req Request, d *Decision) int64 {
	*d = Decision{}
	return 0
}`, "the state must be passed by pointer"},
		{"Decision returned", `func (a *alg) decide(s *state, live bool, req Request) (Decision, int64) {
	d := Decision{}
	return d, 0
}`, "alg.decide must be func(s *State, live bool, req Request, d *Decision) int64"},
		{"return before the Decision is set", `func (a *alg) decide(s *state, live bool, req Request, d *Decision) int64 {
	if req.Peek {
		return 0
	}
	*d = Decision{}
	return 1
}`, "decide must set its Decision with *d = Decision{...} before it returns"},
		{"Decision set twice", `func (a *alg) decide(s *state, live bool, req Request, d *Decision) int64 {
	*d = Decision{}
	*d = Decision{Remaining: 1}
	return 0
}`, "decide sets its Decision once"},
		{"a Decision of its own", `func (a *alg) decide(s *state, live bool, req Request, d *Decision) int64 {
	e := Decision{}
	*d = e
	return 0
}`, "a composite literal is in the subset only as *d = Decision{...} in decide"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			dir := t.TempDir()
			if err := os.WriteFile(filepath.Join(dir, "bad.go"), []byte(errorHeader+c.src+"\n"), 0o644); err != nil {
				t.Fatal(err)
			}
			_, err := Generate(dir, "")
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("Generate = %v, want an error containing %q", err, c.want)
			}
			if !strings.HasPrefix(err.Error(), "formgen: ") {
				t.Errorf("error %q does not start with formgen:", err)
			}
		})
	}
}

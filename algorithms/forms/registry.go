package forms

import (
	"slices"
	"time"

	"github.com/ratelimitkit/ratelimit/algorithms"
	"github.com/ratelimitkit/ratelimit/algorithms/internal/builtin"
)

// registry lists the built-in algorithms, in the order the command's
// comparison shows them (package algorithms keeps the one list).
var registry = func() []*Builtin {
	out := make([]*Builtin, len(builtin.Entries))
	for i, e := range builtin.Entries {
		newAlg := func(limit int64, period time.Duration, burst int64) algorithms.Algorithm {
			return e.New(limit, period, burst).(algorithms.Algorithm)
		}
		a := newAlg(1, time.Second, 1).(ServerForm)
		out[i] = &Builtin{Name: a.Name(), Args: len(a.ServerArgs()), New: newAlg, is: e.Is}
	}
	return out
}()

// Builtin is a built-in algorithm as the stores and tests see it: its name,
// how to make one, and its server-side forms. A store binds its form of an
// algorithm to the Builtin that BuiltinOf returns, that is to the Go type
// of the algorithm, never to its Name: a user's algorithm, whatever it
// calls itself, is never taken for a built-in.
type Builtin struct {
	// Name is the algorithm's Name, and names its server-side forms:
	// lua/<Name>.lua and sql/<Name>.sql.
	Name string
	// Args is how many ServerArgs its server-side forms take.
	Args int
	// New returns the algorithm with limit units of cost per period and
	// the given burst (or queue capacity); the window algorithms, which
	// have no burst, ignore it.
	New func(limit int64, period time.Duration, burst int64) algorithms.Algorithm

	is func(alg any) bool
}

// Builtins returns the built-in algorithms, in a fixed order.
func Builtins() []*Builtin { return slices.Clone(registry) }

// BuiltinOf returns the built-in algorithm alg is an instance of, or nil
// when alg is not one of the built-ins (a user's algorithm, even one that
// wraps a built-in or borrows its name).
func BuiltinOf(alg algorithms.Algorithm) *Builtin {
	for _, b := range registry {
		if b.is(alg) {
			return b
		}
	}
	return nil
}

// Lua returns the source of the algorithm's Lua form, and false when it has
// none.
func (b *Builtin) Lua() (string, bool) { return Lua(b.Name) }

// SQL returns the source of the algorithm's SQL form, and false when it has
// none.
func (b *Builtin) SQL() (string, bool) { return SQL(b.Name) }

// SQLFunction returns the name of the algorithm's SQL function, such as
// "ratelimit_gcra_1a2b3c4d" (see SQLFunction), or "" when it has no SQL form.
func (b *Builtin) SQLFunction() string { return SQLFunction(b.Name) }

// SQLRowFunction returns the name of the algorithm's SQL row form, such as
// "ratelimit_gcra_row_1a2b3c4d" (see SQLRowFunction), or "" when it has none.
func (b *Builtin) SQLRowFunction() string { return SQLRowFunction(b.Name) }

// Composable reports whether the algorithm can be a part of a composite
// (All) that the stores decide with the composite server forms: its server
// forms hold it (formgen's manifest says so): every generated form,
// and the sliding log, whose composite part is written by hand. Every
// built-in is.
func (b *Builtin) Composable() bool { return manifestEntry(b.Name).composable }

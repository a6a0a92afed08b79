package algorithms

import (
	"slices"
	"time"
)

// registry lists the built-in algorithms, in the order the command's
// comparison shows them. It is the one list the stores, the conformance
// suite, the command and the tests take the built-ins from: adding an
// algorithm means writing its Go form (with its server-side forms under
// lua/ and sql/, named after it) and adding one line here.
var registry = []*Builtin{
	register[*fixedWindow](func(limit int64, period time.Duration, _ int64) Algorithm { return FixedWindow(limit, period) }),
	register[*slidingLog](func(limit int64, period time.Duration, _ int64) Algorithm { return SlidingLog(limit, period) }),
	register[*slidingWindow](func(limit int64, period time.Duration, _ int64) Algorithm { return SlidingWindow(limit, period) }),
	register[*tokenBucket](TokenBucket),
	register[*gcra](GCRA),
	register[*leakyBucket](LeakyBucket),
}

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
	New func(limit int64, period time.Duration, burst int64) Algorithm

	is func(Algorithm) bool
}

// register makes the registry entry of the algorithm whose Go form is the
// type T, reading its name and number of ServerArgs from an instance.
func register[T ServerForm](newAlg func(limit int64, period time.Duration, burst int64) Algorithm) *Builtin {
	a := newAlg(1, time.Second, 1).(ServerForm)
	return &Builtin{
		Name: a.Name(),
		Args: len(a.ServerArgs()),
		New:  newAlg,
		is:   func(alg Algorithm) bool { _, ok := alg.(T); return ok },
	}
}

// Builtins returns the built-in algorithms, in a fixed order.
func Builtins() []*Builtin { return slices.Clone(registry) }

// BuiltinOf returns the built-in algorithm alg is an instance of, or nil
// when alg is not one of the built-ins (a user's algorithm, even one that
// wraps a built-in or borrows its name).
func BuiltinOf(alg Algorithm) *Builtin {
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

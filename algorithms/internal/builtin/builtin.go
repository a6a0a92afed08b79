// Package builtin hands the built-in algorithms from package algorithms,
// the only package that can name their Go types, to package forms, which
// gives them to the stores with their server-side forms, so that neither
// exports a name only the other needs (package algorithms sets Entries in
// its init; forms, which imports algorithms, reads them after).
package builtin

import "time"

// Entry is one built-in algorithm.
type Entry struct {
	// New returns the algorithm (an algorithms.Algorithm) with the given
	// numbers.
	New func(limit int64, period time.Duration, burst int64) any
	// Is reports whether alg is an instance of the algorithm's Go type.
	Is func(alg any) bool
}

// Entries are the built-in algorithms, in the order the command's
// comparison shows them.
var Entries []Entry

// PartIDs returns the IDs of a composite's parts (an algorithms.Composite),
// and PartKind the built-in a part ID names; package algorithms sets them,
// forms exports them to the stores (forms.PartIDs, forms.PartKind).
var (
	PartIDs  func(c any) []int64
	PartKind func(id int64) string
)

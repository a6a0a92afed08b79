package algorithms

import "math"

// The server-side forms (forms/lua/*.lua, forms/sql/*.sql) are generated
// from the Go forms by internal/formgen. What it translates is each algorithm's decide
// method and the helpers it calls, written in a small subset of Go that the
// package doc of internal/formgen defines: int64 and bool values, integer
// arithmetic, min and max, if/else, early returns, and the named helpers
// below for the steps that need more than that. Each helper has one
// implementation per language in the generator, computing exactly what the
// Go function here computes.

// ceilDiv returns ⌈a / b⌉ for a ≥ 0 and b > 0.
func ceilDiv(a, b int64) int64 {
	if b == 1 {
		// The drip of most rates (a limit that divides its period):
		// no division on the memory store's hot path.
		return a
	}
	return (a + b - 1) / b
}

// mulDivFloor returns ⌊a × b ÷ c⌋ computed in doubles in that order (a
// product, then a quotient, then the floor), capped at MaxExact. The Lua and
// SQL forms compute the same doubles, so every form gets the same integer.
func mulDivFloor(a, b, c int64) int64 {
	return floorCapped(float64(a) * float64(b) / float64(c))
}

// divMulFloor returns ⌊a ÷ b × c⌋ computed in doubles in that order, capped
// at MaxExact.
func divMulFloor(a, b, c int64) int64 {
	return floorCapped(float64(a) / float64(b) * float64(c))
}

func floorCapped(f float64) int64 {
	f = math.Floor(f)
	if f >= MaxExact {
		return MaxExact
	}
	return int64(f)
}

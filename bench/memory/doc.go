// Package memory benchmarks the SDK's memory store, through the public
// ratelimit.Limiter.Allow, side by side with golang.org/x/time/rate: one
// rate.Limiter for the hot key, and a map of rate.Limiters, as users build
// one, for many keys. It holds only benchmarks; see docs/benchmarks.md for
// the figures and the commands that produce them.
package memory

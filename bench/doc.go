// Package bench holds side-by-side benchmarks of the SDK against peer
// libraries and bare baselines. It is a separate module so that the peers
// never enter the SDK's own go.mod.
package bench

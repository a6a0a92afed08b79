// Command ratios reads the output of the memory store's side-by-side
// benchmarks (go test -bench in bench/memory) and prints, for each SDK
// algorithm and GOMAXPROCS, the median ns/op, cpu-ns/op and allocs/op
// beside those of golang.org/x/time/rate measured in the same run, the
// ratios, and whether the bars hold: 0 allocs/op for every algorithm but
// the sliding log, and a time within 1.5× of x/time/rate's, judged on wall
// time (ns/op) and on CPU time (cpu-ns/op) separately.
//
// A ratio is the median of paired ratios: the i-th sample of a benchmark
// divided by the i-th sample of its baseline. Run the benchmarks in rounds
// (go test -count 1, repeated), and each pair was measured seconds apart,
// so the ratio holds up on a machine whose load changes from minute to
// minute; with -count N the pairs are N consecutive samples of each side.
//
//	for i in 1 2 3 4 5 6 7 8; do
//		go test -run '^$' -bench 'HotKey|ManyKeys' -benchmem -benchtime 300ms -cpu 1,2 -count 1 ./memory/
//	done | tee out.txt
//	go run ./memory/ratios < out.txt
//
// bench/memory/run.sh does all this.
package main

import (
	"bufio"
	"fmt"
	"io"
	"math"
	"os"
	"regexp"
	"slices"
	"strconv"
	"strings"
)

// maxRatio is the bar for time relative to x/time/rate.
const maxRatio = 1.5

// Baselines are the x/time/rate sub-benchmarks each group compares with.
var baselines = map[string][]string{
	"HotKey":   {"x-time-rate"},
	"ManyKeys": {"x-time-rate-syncmap", "x-time-rate-mutexmap"},
}

// name matches "BenchmarkGroup/mode/algorithm/side-P", where side is sdk or
// a baseline; the -P suffix is absent when GOMAXPROCS is 1.
var name = regexp.MustCompile(`^Benchmark(\w+)/(\w+/\w+)/([\w-]+?)(?:-(\d+))?$`)

// key names one benchmark: mode is "admit/gcra" and the like, side is sdk
// or a baseline.
type key struct{ group, mode, side, procs string }

// samples holds a benchmark's results in input order, by unit.
type samples map[string][]float64

func main() {
	if err := run(os.Stdin, os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "ratios:", err)
		os.Exit(1)
	}
}

func run(in io.Reader, out io.Writer) error {
	results := map[key]samples{}
	var order []key
	sc := bufio.NewScanner(in)
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) < 4 {
			continue
		}
		m := name.FindStringSubmatch(f[0])
		if m == nil {
			continue
		}
		k := key{m[1], m[2], m[3], m[4]}
		if k.procs == "" {
			k.procs = "1"
		}
		s := results[k]
		if s == nil {
			s = samples{}
			results[k] = s
			order = append(order, k)
		}
		// After the name and the iteration count come value-unit pairs.
		for i := 2; i+1 < len(f); i += 2 {
			v, err := strconv.ParseFloat(f[i], 64)
			if err != nil {
				return fmt.Errorf("%s: %q is not a number", f[0], f[i])
			}
			s[f[i+1]] = append(s[f[i+1]], v)
		}
	}
	if err := sc.Err(); err != nil {
		return err
	}
	if len(order) == 0 {
		return fmt.Errorf("no benchmark results in the input")
	}
	fmt.Fprintln(out, "| benchmark | procs | allocs/op | ns/op | x/time/rate ns/op | ratio | cpu-ns/op | x/time/rate cpu-ns/op | ratio | bar (wall) | bar (CPU) |")
	fmt.Fprintln(out, "|---|---|---|---|---|---|---|---|---|---|---|")
	for _, k := range order {
		bases, ok := baselines[k.group]
		if !ok || k.side != "sdk" {
			continue
		}
		s := results[k]
		allocs := median(s["allocs/op"])
		allocsOK := allocs == 0 || strings.HasSuffix(k.mode, "/sliding_log")
		row := []string{k.group + "/" + k.mode, k.procs, fmt.Sprintf("%g", allocs)}
		var verdicts []string
		for _, unit := range []string{"ns/op", "cpu-ns/op"} {
			var baseCol, ratioCol []string
			met := allocsOK
			for _, b := range bases {
				base := results[key{k.group, k.mode, b, k.procs}]
				if base == nil {
					return fmt.Errorf("no %s/%s/%s result for GOMAXPROCS %s", k.group, k.mode, b, k.procs)
				}
				r := pairedRatio(s[unit], base[unit])
				baseCol = append(baseCol, fmt.Sprintf("%.0f", median(base[unit])))
				ratioCol = append(ratioCol, fmt.Sprintf("%.2f", r))
				met = met && r <= maxRatio
			}
			row = append(row, fmt.Sprintf("%.0f", median(s[unit])), strings.Join(baseCol, ", "), strings.Join(ratioCol, ", "))
			verdicts = append(verdicts, verdict(met))
		}
		row = append(row, verdicts...)
		fmt.Fprintf(out, "| %s |\n", strings.Join(row, " | "))
	}
	if _, ok := baselines["ManyKeys"]; ok {
		fmt.Fprintln(out, "\nManyKeys baselines and ratios read: sync.Map, mutex-guarded map.")
	}
	return nil
}

func verdict(met bool) string {
	if met {
		return "met"
	}
	return "**not met**"
}

// pairedRatio is the median of xs[i]/ys[i]; NaN when either is missing.
func pairedRatio(xs, ys []float64) float64 {
	var r []float64
	for i := range min(len(xs), len(ys)) {
		r = append(r, xs[i]/ys[i])
	}
	return median(r)
}

func median(xs []float64) float64 {
	if len(xs) == 0 {
		return math.NaN()
	}
	s := slices.Clone(xs)
	slices.Sort(s)
	n := len(s)
	if n%2 == 1 {
		return s[n/2]
	}
	return (s[n/2-1] + s[n/2]) / 2
}

// Command ratios reads the output of the memory store's side-by-side
// benchmarks (go test -bench in bench/memory) and prints, for each SDK
// algorithm and GOMAXPROCS, the median ns/op and allocs/op beside the median
// of golang.org/x/time/rate measured in the same run, the ratio, and
// whether the bars hold: ns/op within 1.5× of x/time/rate, and 0 allocs/op
// for every algorithm but the sliding log.
//
// The ratio is the median of paired ratios: the i-th sample of a benchmark
// divided by the i-th sample of its baseline. Run the benchmarks in rounds
// (go test -count 1, repeated) and each pair was measured seconds apart, so
// the ratio holds up on a machine whose load changes from minute to minute;
// with -count N the pairs are N consecutive samples of each side.
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
	"os"
	"regexp"
	"slices"
	"strconv"
	"strings"
)

// maxRatio is the bar for ns/op relative to x/time/rate.
const maxRatio = 1.5

// Baselines are the x/time/rate sub-benchmarks each group compares with.
var baselines = map[string][]string{
	"HotKey":   {"x-time-rate"},
	"ManyKeys": {"x-time-rate-syncmap", "x-time-rate-mutexmap"},
}

// line matches "BenchmarkGroup/mode/algorithm/side-P  N  X ns/op ... Y
// allocs/op", where side is sdk or a baseline; the -P suffix is absent when
// GOMAXPROCS is 1.
var line = regexp.MustCompile(`^Benchmark(\w+)/(\w+/\w+)/([\w-]+?)(?:-(\d+))?\s+\d+\s+([\d.]+) ns/op(?:.*?\s([\d.]+) allocs/op)?`)

// key names one benchmark: mode is "admit/gcra" and the like, name the side.
type key struct{ group, mode, name, procs string }

type samples struct{ ns, allocs []float64 }

func main() {
	if err := run(os.Stdin, os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "ratios:", err)
		os.Exit(1)
	}
}

func run(in io.Reader, out io.Writer) error {
	results := map[key]*samples{}
	var order []key
	sc := bufio.NewScanner(in)
	for sc.Scan() {
		m := line.FindStringSubmatch(sc.Text())
		if m == nil {
			continue
		}
		k := key{m[1], m[2], m[3], m[4]}
		if k.procs == "" {
			k.procs = "1"
		}
		s := results[k]
		if s == nil {
			s = new(samples)
			results[k] = s
			order = append(order, k)
		}
		ns, _ := strconv.ParseFloat(m[5], 64)
		allocs, _ := strconv.ParseFloat(m[6], 64)
		s.ns = append(s.ns, ns)
		s.allocs = append(s.allocs, allocs)
	}
	if err := sc.Err(); err != nil {
		return err
	}
	if len(order) == 0 {
		return fmt.Errorf("no benchmark results in the input")
	}
	fmt.Fprintln(out, "| benchmark | procs | ns/op | allocs/op | x/time/rate ns/op | ratio | bar |")
	fmt.Fprintln(out, "|---|---|---|---|---|---|---|")
	for _, k := range order {
		bases, ok := baselines[k.group]
		if !ok || k.name != "sdk" {
			continue
		}
		s := results[k]
		ns, allocs := median(s.ns), median(s.allocs)
		var cols, ratios []string
		met := allocs == 0 || strings.HasSuffix(k.mode, "/sliding_log")
		for _, b := range bases {
			base := results[key{k.group, k.mode, b, k.procs}]
			if base == nil {
				return fmt.Errorf("no %s/%s/%s result for GOMAXPROCS %s", k.group, k.mode, b, k.procs)
			}
			var paired []float64
			for i := range min(len(s.ns), len(base.ns)) {
				paired = append(paired, s.ns[i]/base.ns[i])
			}
			r := median(paired)
			cols = append(cols, fmt.Sprintf("%.0f (%s)", median(base.ns), strings.TrimPrefix(b, "x-time-rate-")))
			ratios = append(ratios, fmt.Sprintf("%.2f", r))
			met = met && r <= maxRatio
		}
		verdict := "met"
		if !met {
			verdict = "**not met**"
		}
		fmt.Fprintf(out, "| %s/%s | %s | %.0f | %g | %s | %s | %s |\n",
			k.group, k.mode, k.procs, ns, allocs, strings.Join(cols, ", "), strings.Join(ratios, ", "), verdict)
	}
	return nil
}

func median(xs []float64) float64 {
	s := slices.Clone(xs)
	slices.Sort(s)
	n := len(s)
	if n%2 == 1 {
		return s[n/2]
	}
	return (s[n/2-1] + s[n/2]) / 2
}

// Command ratios reads the output of the memory store's side-by-side
// benchmarks (go test -bench in bench/memory, repeated in rounds) and
// prints a Markdown table per benchmark group: for each SDK algorithm and
// GOMAXPROCS, the SDK's median CPU time per call beside each peer's, the
// median of the paired ratios with their range, allocs/op, and whether the
// bars hold.
//
// The bars (issue 23, which tightened issue 13's): in CPU time, at most
// 1.0 × golang.org/x/time/rate (on the hot key a single rate.Limiter, as
// issue 13 measured it, although it looks up no key; the same limiter kept
// by key in a sync.Map and in a mutex-guarded map is shown beside it
// without a bar; on many keys every way of keeping rate.Limiters by key the
// benchmarks measure) and at most 1.0 × sethvargo/go-limiter's
// memorystore, with 0 allocs/op; the sliding log, which keeps an entry per
// admitted request, at most 1.5 × each, its allocations shown but not
// judged. ulule/limiter is shown without a bar.
//
// A ratio is the median of paired ratios: round i's SDK sample divided by
// round i's peer sample, measured seconds apart in the same process. The
// range is the smallest and largest paired ratio.
//
//	bash bench/run.sh memory
//
// runs the rounds and this command; see docs/benchmarks.md.
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

// A peer is a baseline sub-benchmark and the bar the SDK's ratio to it must
// meet; a bar of 0 means the peer is shown without one.
type peer struct {
	name  string // the sub-benchmark's name
	label string // as the table heads it
	bar   float64
}

// groups are the benchmark groups and their peers, in the order the
// tables show them.
var groups = []struct {
	name  string
	peers []peer
}{
	{"HotKey", []peer{
		{"x-time-rate", "x/time/rate (one limiter, no key)", 1.0},
		{"sethvargo", "sethvargo", 1.0},
		{"x-time-rate-syncmap", "x/time/rate in a sync.Map", 0},
		{"x-time-rate-mutexmap", "x/time/rate in a mutex map", 0},
		{"ulule", "ulule", 0},
	}},
	{"ManyKeys", []peer{
		{"x-time-rate-syncmap", "x/time/rate in a sync.Map", 1.0},
		{"x-time-rate-mutexmap", "x/time/rate in a mutex map", 1.0},
		{"sethvargo", "sethvargo", 1.0},
		{"ulule", "ulule", 0},
	}},
}

// slidingLog is the algorithm whose bars are slidingLogFactor times the
// others', with its allocations not judged.
const (
	slidingLog       = "sliding_log"
	slidingLogFactor = 1.5
)

// unit is the measure the bars judge.
const unit = "cpu-ns/op"

// name matches "BenchmarkGroup/mode/algorithm/side-P", where side is sdk or
// a peer; the -P suffix is absent when GOMAXPROCS is 1.
var name = regexp.MustCompile(`^Benchmark(\w+)/(\w+/\w+)/([\w-]+?)(?:-(\d+))?$`)

// key names one benchmark: mode is "admit/gcra" and the like, side is sdk
// or a peer.
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
	results, order, err := parse(in)
	if err != nil {
		return err
	}
	for _, g := range groups {
		var rows []key
		for _, k := range order {
			if k.group == g.name && k.side == "sdk" {
				rows = append(rows, k)
			}
		}
		if len(rows) == 0 {
			continue
		}
		if err := table(out, g.name, g.peers, rows, results); err != nil {
			return err
		}
	}
	return nil
}

func parse(in io.Reader) (map[key]samples, []key, error) {
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
				return nil, nil, fmt.Errorf("%s: %q is not a number", f[0], f[i])
			}
			s[f[i+1]] = append(s[f[i+1]], v)
		}
	}
	if err := sc.Err(); err != nil {
		return nil, nil, err
	}
	if len(order) == 0 {
		return nil, nil, fmt.Errorf("no benchmark results in the input")
	}
	return results, order, nil
}

func table(out io.Writer, group string, peers []peer, rows []key, results map[key]samples) error {
	head := []string{"benchmark", "procs", "allocs/op", "SDK cpu-ns/op"}
	for _, p := range peers {
		h := p.label + " cpu-ns/op, ratio (range)"
		if p.bar > 0 {
			h += fmt.Sprintf(", bar ≤ %.1f (sliding log %.1f)", p.bar, p.bar*slidingLogFactor)
		}
		head = append(head, h)
	}
	head = append(head, "bars")
	fmt.Fprintf(out, "| %s |\n", strings.Join(head, " | "))
	fmt.Fprintf(out, "|%s\n", strings.Repeat("---|", len(head)))
	met, judged := 0, 0
	for _, k := range rows {
		s := results[k]
		allocs := median(s["allocs/op"])
		log := strings.HasSuffix(k.mode, "/"+slidingLog)
		ok := allocs == 0 || log
		row := []string{group + "/" + k.mode, k.procs, fmt.Sprintf("%g", allocs), fmt.Sprintf("%.0f", median(s[unit]))}
		for _, p := range peers {
			base := results[key{k.group, k.mode, p.name, k.procs}]
			if base == nil {
				return fmt.Errorf("no %s/%s/%s result for GOMAXPROCS %s", k.group, k.mode, p.name, k.procs)
			}
			r, lo, hi := pairedRatio(s[unit], base[unit])
			row = append(row, fmt.Sprintf("%.0f, %.2f (%.2f–%.2f)", median(base[unit]), r, lo, hi))
			bar := p.bar
			if log {
				bar *= slidingLogFactor
			}
			if bar > 0 && !(r <= bar) {
				ok = false
			}
		}
		judged++
		if ok {
			row = append(row, "met")
			met++
		} else {
			row = append(row, "**not met**")
		}
		fmt.Fprintf(out, "| %s |\n", strings.Join(row, " | "))
	}
	fmt.Fprintf(out, "\n%s: bars met in %d of %d rows.\n\n", group, met, judged)
	return nil
}

// pairedRatio returns the median, smallest and largest of xs[i]/ys[i]; NaN
// when either is missing.
func pairedRatio(xs, ys []float64) (med, lo, hi float64) {
	var r []float64
	for i := range min(len(xs), len(ys)) {
		r = append(r, xs[i]/ys[i])
	}
	if len(r) == 0 {
		return math.NaN(), math.NaN(), math.NaN()
	}
	return median(r), slices.Min(r), slices.Max(r)
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

package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/ratelimitkit/ratelimit/algorithms"
)

// maxRequests bounds -n, so that a simulation, which keeps every request's
// decision for every algorithm, stays small.
const maxRequests = 10000

// errHelp reports that -h or -help was given.
var errHelp = errors.New("help requested")

// config is the parsed command line of compare. Fields the user did not
// set hold their zero value and the matching set flag is false; simulate
// fills in the pattern's defaults, which need validated parameters.
type config struct {
	limit   int64
	period  time.Duration
	burst   int64
	n       int
	spacing time.Duration
	pattern string
	start   time.Duration
	seed    uint64

	burstSet, nSet, spacingSet, startSet bool

	color    string
	svgPath  string
	htmlPath string
}

// patterns are the traffic shapes compare knows, in the order help lists
// them.
var patterns = []string{"steady", "burst", "boundary-burst", "random"}

// parseCompareFlags parses compare's arguments. Errors carry a message
// meant for the user; the algorithms' own parameter checks run later, in
// simulate, so their messages reach the user unchanged.
func parseCompareFlags(args []string) (config, error) {
	var cfg config
	fs := flag.NewFlagSet("compare", flag.ContinueOnError)
	fs.SetOutput(io.Discard) // errors are reported by the caller
	fs.Int64Var(&cfg.limit, "limit", 10, "")
	fs.DurationVar(&cfg.period, "period", time.Second, "")
	fs.Int64Var(&cfg.burst, "burst", 0, "")
	fs.IntVar(&cfg.n, "n", 0, "")
	fs.DurationVar(&cfg.spacing, "spacing", 0, "")
	fs.StringVar(&cfg.pattern, "pattern", "boundary-burst", "")
	fs.DurationVar(&cfg.start, "start", 0, "")
	fs.Uint64Var(&cfg.seed, "seed", 1, "")
	fs.StringVar(&cfg.color, "color", "auto", "")
	fs.StringVar(&cfg.svgPath, "svg", "", "")
	fs.StringVar(&cfg.htmlPath, "html", "", "")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return cfg, errHelp
		}
		return cfg, fmt.Errorf("ratelimit compare: %v", err)
	}
	if fs.NArg() > 0 {
		return cfg, fmt.Errorf("ratelimit compare: unexpected argument %q (flags come as -name value)", fs.Arg(0))
	}
	fs.Visit(func(f *flag.Flag) {
		switch f.Name {
		case "burst":
			cfg.burstSet = true
		case "n":
			cfg.nSet = true
		case "spacing":
			cfg.spacingSet = true
		case "start":
			cfg.startSet = true
		}
	})
	if !cfg.burstSet {
		cfg.burst = cfg.limit
	}
	known := false
	for _, p := range patterns {
		known = known || cfg.pattern == p
	}
	switch {
	case !known:
		return cfg, fmt.Errorf("ratelimit compare: unknown -pattern %q; choose one of %s", cfg.pattern, strings.Join(patterns, ", "))
	case cfg.color != "auto" && cfg.color != "always" && cfg.color != "never":
		return cfg, fmt.Errorf("ratelimit compare: -color %q must be auto, always or never", cfg.color)
	case cfg.nSet && (cfg.n < 1 || cfg.n > maxRequests):
		return cfg, fmt.Errorf("ratelimit compare: -n %d must be between 1 and %d", cfg.n, maxRequests)
	case cfg.spacing < 0:
		return cfg, fmt.Errorf("ratelimit compare: -spacing %v must not be negative", cfg.spacing)
	case cfg.spacing > algorithms.MaxPeriod:
		return cfg, fmt.Errorf("ratelimit compare: -spacing %v exceeds the maximum %v", cfg.spacing, algorithms.MaxPeriod)
	case cfg.spacing%time.Microsecond != 0:
		return cfg, fmt.Errorf("ratelimit compare: -spacing %v must be a whole number of microseconds", cfg.spacing)
	case cfg.start < 0:
		return cfg, fmt.Errorf("ratelimit compare: -start %v must not be negative", cfg.start)
	case cfg.start%time.Microsecond != 0:
		return cfg, fmt.Errorf("ratelimit compare: -start %v must be a whole number of microseconds", cfg.start)
	case cfg.startSet && cfg.period > 0 && cfg.start >= cfg.period:
		return cfg, fmt.Errorf("ratelimit compare: -start %v must be less than -period %v", cfg.start, cfg.period)
	case cfg.svgPath != "" && cfg.svgPath == cfg.htmlPath:
		return cfg, fmt.Errorf("ratelimit compare: -svg and -html name the same file %q", cfg.svgPath)
	}
	return cfg, nil
}

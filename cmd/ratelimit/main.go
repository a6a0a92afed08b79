// Command ratelimit is the SDK's command-line companion. Its compare
// subcommand sends the same traffic through all six algorithms side by
// side, each on its own in-memory store with a fake clock, and shows which
// requests each one admitted: a timeline in the terminal, a summary table,
// and on request an SVG picture and an HTML page. Its serve subcommand is a
// demo HTTP service: one rate-limited endpoint per algorithm, through the
// httplimit middleware, and the comparison as a web page. Its move
// subcommand copies rate-limit state from one store to another
// (docs/moving-state.md).
//
// Usage:
//
//	ratelimit compare [flags]
//	ratelimit serve [flags]
//	ratelimit move -from STORE -to STORE [flags]
//	ratelimit help
//
// Run "ratelimit help" for the flags and examples.
package main

import (
	"errors"
	"fmt"
	"io"
	"os"
)

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr, os.Getenv))
}

// Exit codes.
const (
	exitOK    = 0
	exitError = 1 // the command failed, e.g. writing a file
	exitUsage = 2 // bad command line or parameters
)

// run is the whole command with its surroundings passed in, so tests can
// drive it. It returns the process exit code.
func run(args []string, stdout, stderr io.Writer, getenv func(string) string) int {
	if len(args) == 0 {
		fmt.Fprint(stderr, usage)
		return exitUsage
	}
	switch args[0] {
	case "help", "-h", "-help", "--help":
		fmt.Fprint(stdout, usage)
		return exitOK
	case "compare":
		return runCompare(args[1:], stdout, stderr, getenv)
	case "serve":
		return runServe(args[1:], stdout, stderr, getenv)
	case "move":
		return runMove(args[1:], stdout, stderr, getenv)
	default:
		fmt.Fprintf(stderr, "ratelimit: unknown command %q\nrun 'ratelimit help' for usage\n", args[0])
		return exitUsage
	}
}

// runCompare parses compare's flags, simulates, and renders.
func runCompare(args []string, stdout, stderr io.Writer, getenv func(string) string) int {
	cfg, err := parseCompareFlags(args)
	if code, done := flagsDone(err, stdout, stderr); done {
		return code
	}
	res, err := simulate(cfg)
	if err != nil {
		// Parameter errors from the limiter itself, printed as they are.
		fmt.Fprintf(stderr, "%v\nrun 'ratelimit help' for usage\n", err)
		return exitUsage
	}
	color := useColor(cfg.color, getenv, isTerminal(stdout))
	if err := renderTerminal(stdout, res, color); err != nil {
		fmt.Fprintf(stderr, "ratelimit compare: %v\n", err)
		return exitError
	}
	if cfg.svgPath != "" {
		if err := writeFile(cfg.svgPath, func(w io.Writer) error { return renderSVG(w, res) }); err != nil {
			fmt.Fprintf(stderr, "ratelimit compare: %v\n", err)
			return exitError
		}
		fmt.Fprintf(stdout, "\nwrote %s\n", cfg.svgPath)
	}
	if cfg.htmlPath != "" {
		if err := writeFile(cfg.htmlPath, func(w io.Writer) error { return renderHTML(w, res) }); err != nil {
			fmt.Fprintf(stderr, "ratelimit compare: %v\n", err)
			return exitError
		}
		fmt.Fprintf(stdout, "wrote %s\n", cfg.htmlPath)
	}
	return exitOK
}

// flagsDone handles the outcome of parsing a subcommand's flags: help
// printed (exit 0), or a usage error reported (exit 2). done is false when
// err is nil and the command goes on.
func flagsDone(err error, stdout, stderr io.Writer) (code int, done bool) {
	switch {
	case err == nil:
		return exitOK, false
	case errors.Is(err, errHelp):
		fmt.Fprint(stdout, usage)
		return exitOK, true
	}
	fmt.Fprintf(stderr, "%v\nrun 'ratelimit help' for usage\n", err)
	return exitUsage, true
}

// writeFile creates path and fills it with render, reporting the first
// error from either.
func writeFile(path string, render func(io.Writer) error) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	if err := render(f); err != nil {
		f.Close()
		return fmt.Errorf("writing %s: %w", path, err)
	}
	return f.Close()
}

// isTerminal reports whether w is a character device such as a terminal.
func isTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	if !ok {
		return false
	}
	fi, err := f.Stat()
	return err == nil && fi.Mode()&os.ModeCharDevice != 0
}

// useColor decides whether to write ANSI colours. "always" and "never"
// are obeyed; "auto" colours only a terminal, and not when NO_COLOR is set
// to anything (https://no-color.org) or TERM is "dumb".
func useColor(mode string, getenv func(string) string, terminal bool) bool {
	switch mode {
	case "always":
		return true
	case "never":
		return false
	}
	return terminal && getenv("NO_COLOR") == "" && getenv("TERM") != "dumb"
}

const usage = `ratelimit compare sends the same requests through all six rate-limiting
algorithms side by side and shows which requests each one admitted. Each
algorithm runs on its own in-memory store with a fake clock, so the output
is the same on every run.

Usage:
  ratelimit compare [flags]
  ratelimit serve [flags]
  ratelimit move -from STORE -to STORE [flags]   (see 'ratelimit move -h')
  ratelimit help

From a clone of the repository: go run ./cmd/ratelimit compare [flags]

Flags:
  -limit N        requests allowed per period (default 10)
  -period D       the period, e.g. 1s, 500ms, 1m (default 1s)
  -burst N        token bucket and GCRA burst, leaky bucket capacity
                  (default: the limit)
  -pattern P      the traffic (default boundary-burst):
                    steady          one request every -spacing
                                    (default period/(2×limit): twice the rate)
                    burst           clumps of 2×limit requests, -spacing apart
                                    (default period/(10×limit)), one clump
                                    per period
                    boundary-burst  n/2 requests just before a window boundary
                                    and n/2 just after, -spacing apart
                                    (default n = 2×limit, period/(4×limit))
                    random          random arrivals, -spacing apart on
                                    average (default period/(2×limit)), -seed
  -n N            number of requests (default 2×limit for boundary-burst,
                  6×limit otherwise; at most 10000)
  -spacing D      time between requests, as the pattern describes
  -start D        offset of the first request within its window, 0 <= D <
                  period (default 0; boundary-burst centres on a boundary)
  -seed N         seed for the random pattern (default 1)
  -color WHEN     auto, always or never (default auto: only on a terminal,
                  and not when NO_COLOR is set)
  -svg FILE       also write an SVG timeline to FILE
  -html FILE      also write an HTML page (SVG and summary table) to FILE

In the timeline, one row per algorithm, one cell per request (or per slice
of time when there are many requests):
  █ admitted   ▒ admitted but told to wait (leaky bucket)   x denied
  ▁ to ▇ the share admitted in a time slice   │ window boundary

Examples:
  ratelimit compare
      10 requests just before a window boundary and 10 just after: the
      fixed window admits all 20 within one period.
  ratelimit compare -pattern steady -limit 5 -period 1s -spacing 100ms -n 40
  ratelimit compare -pattern burst -limit 20 -period 1m -burst 5
  ratelimit compare -pattern random -seed 7 -n 300 -color never
  ratelimit compare -svg compare.svg -html compare.html

Exit status: 0 on success, 2 on a usage error or invalid parameters, 1 when
a file cannot be written.

ratelimit serve runs a demo HTTP service until interrupted: one endpoint per
algorithm, each answering 200 or 429 with the RateLimit-Policy, RateLimit
and Retry-After headers, keyed by the client's address; and /compare, the
comparison above as a web page (or JSON with ?format=json or Accept:
application/json; query parameters pattern, n, delay, limit, period, burst,
start, seed).

  /fixed-window  /sliding-window-log  /sliding-window-counter
  /token-bucket  /gcra  /leaky-bucket  /compare

Serve flags:
  -addr HOST:PORT  where to listen (default 127.0.0.1:8080)
  -limit N         requests per period for each endpoint (default 10)
  -period D        the period (default 10s)
  -burst N         token bucket and GCRA burst, leaky bucket capacity
                   (default: the limit)
  -store S         where the state lives (default memory):
                     memory
                     redis://host:port[/db]        (rediss:// for TLS)
                     valkey://host:port[/db]
                     postgres://user@host:port/db?sslmode=disable
                     dynamodb://host:port[?table=T&region=R]   (http endpoint)
                     dynamodbs://host[?table=T&region=R]       (https endpoint)
                   PostgreSQL and DynamoDB tables are created if missing;
                   DynamoDB credentials come from AWS_ACCESS_KEY_ID and
                   AWS_SECRET_ACCESS_KEY
  -trust-proxy L   comma-separated proxy addresses or CIDRs whose
                   X-Forwarded-For is believed (default: none)
  -name NAME       name the limiters NAME.fixed-window and so on, so that
                   they keep their state when the numbers change (default:
                   unnamed, each set of numbers starts afresh)

Try it:
  ratelimit serve &
  for i in $(seq 12); do curl -si localhost:8080/fixed-window | grep -E '^HTTP|^Ratelimit|^Retry'; done

Serve exits 0 when interrupted (SIGINT, SIGTERM), 2 on a usage error, 1
when the store or the address cannot be used.
`

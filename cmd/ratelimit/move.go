package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"slices"
	"strings"
	"time"

	"github.com/ratelimitkit/ratelimit"
)

const moveUsage = `ratelimit move copies rate-limit state from one store to another, so that
every key keeps its quota: memory (through a state file) to Redis, Redis to
PostgreSQL, and so on. docs/moving-state.md has the details.

Usage:
  ratelimit move -from STORE -to STORE [flags]

Stores:
  file:PATH                         a state file (a memory store's snapshot);
                                    as -to, written afresh
  redis://[user:pass@]HOST:PORT[/DB]
  redis+cluster://HOST:PORT,HOST:PORT,...
  valkey://HOST:PORT                (a cluster is discovered)
  postgres://...                    any pgx URL
  dynamodb://HOST:PORT              an endpoint over http; dynamodbs:// for
                                    https (credentials from AWS_ACCESS_KEY_ID
                                    and AWS_SECRET_ACCESS_KEY)
  and, added to any of these URLs:
  prefix=P                          the key prefix (Redis, Valkey, DynamoDB)
  table=T                           the table (PostgreSQL, DynamoDB; default
                                    ratelimit); a destination's is created
  clock=request                     judge expiry by this machine's clock, not
                                    the server's (Redis, Valkey, PostgreSQL)

Flags:
  -from STORE         where the state is now
  -to STORE           where it goes
  -namespace NS       move only the keys of one limiter, "<name>:<algorithm>"
                      (default: every key the source store holds)
  -dry-run            count the live keys of the source, write nothing
  -progress D         how often to report progress (default 1s; 0: never)

A key the destination already holds live state for keeps it: that state is
newer (an earlier run of the same move, or decisions made since), so running
a move again after an interruption is safe and loses no admission.
`

// moveConfig is the parsed command line of move.
type moveConfig struct {
	from, to  string
	namespace string
	dryRun    bool
	progress  time.Duration
}

func parseMoveFlags(args []string) (moveConfig, error) {
	var cfg moveConfig
	fs := flag.NewFlagSet("move", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	fs.StringVar(&cfg.from, "from", "", "")
	fs.StringVar(&cfg.to, "to", "", "")
	fs.StringVar(&cfg.namespace, "namespace", "", "")
	fs.BoolVar(&cfg.dryRun, "dry-run", false, "")
	fs.DurationVar(&cfg.progress, "progress", time.Second, "")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return cfg, errHelp
		}
		return cfg, fmt.Errorf("ratelimit move: %w", err)
	}
	switch {
	case fs.NArg() > 0:
		return cfg, fmt.Errorf("ratelimit move: unexpected argument %q", fs.Arg(0))
	case cfg.from == "":
		return cfg, errors.New("ratelimit move: -from is required")
	case cfg.to == "" && !cfg.dryRun:
		return cfg, errors.New("ratelimit move: -to is required (or -dry-run)")
	case cfg.progress < 0:
		return cfg, fmt.Errorf("ratelimit move: -progress %v must not be negative", cfg.progress)
	}
	if cfg.namespace != "" {
		if k, ok := ratelimit.ParseKey(cfg.namespace + ":k"); !ok || k.Namespace != cfg.namespace {
			return cfg, fmt.Errorf("ratelimit move: -namespace %q is not <name>:<algorithm>, each [A-Za-z0-9_.-]{1,64}", cfg.namespace)
		}
	}
	return cfg, nil
}

// runMove is the move subcommand.
func runMove(args []string, stdout, stderr io.Writer, getenv func(string) string) int {
	cfg, err := parseMoveFlags(args)
	if errors.Is(err, errHelp) {
		fmt.Fprint(stdout, moveUsage)
		return exitOK
	}
	if err != nil {
		fmt.Fprintf(stderr, "%v\nrun 'ratelimit move -h' for usage\n", err)
		return exitUsage
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	if err := move(ctx, cfg, stdout, stderr, getenv); err != nil {
		fmt.Fprintf(stderr, "ratelimit move: %v\n", err)
		var ue usageError
		if errors.As(err, &ue) {
			return exitUsage
		}
		return exitError
	}
	return exitOK
}

// usageError marks a store URL the command cannot use.
type usageError struct{ error }

// moveStats counts a move's progress.
type moveStats struct {
	read, written, kept int
}

// move runs one move (or count, with dryRun).
func move(ctx context.Context, cfg moveConfig, stdout, stderr io.Writer, getenv func(string) string) error {
	for _, raw := range []string{cfg.from, cfg.to} {
		if err := checkKind(raw); raw != "" && err != nil {
			return err
		}
	}
	src, err := openEnd(ctx, cfg.from, false, getenv)
	if err != nil {
		return err
	}
	defer src.close()
	var dst *end
	if !cfg.dryRun {
		if dst, err = openEnd(ctx, cfg.to, true, getenv); err != nil {
			return err
		}
		defer dst.close()
	}
	var st moveStats
	start := time.Now()
	last := start
	report := func(final bool) {
		if cfg.progress == 0 && !final {
			return
		}
		if !final && time.Since(last) < cfg.progress {
			return
		}
		last = time.Now()
		w := stderr
		if final {
			w = stdout
		}
		switch {
		case cfg.dryRun:
			fmt.Fprintf(w, "%d live keys in %s (%v)\n", st.read, redact(cfg.from), time.Since(start).Round(time.Millisecond))
		default:
			fmt.Fprintf(w, "%d keys read, %d written, %d kept in the destination as newer (%v)\n",
				st.read, st.written, st.kept, time.Since(start).Round(time.Millisecond))
		}
	}
	err = src.each(ctx, cfg.namespace, func(e ratelimit.Entry) error {
		st.read++
		if !cfg.dryRun {
			wrote, err := dst.put(ctx, e)
			if err != nil {
				return err
			}
			if wrote {
				st.written++
			} else {
				st.kept++
			}
		}
		report(false)
		return nil
	})
	if err == nil && dst != nil {
		err = dst.finish()
	}
	if err != nil {
		// What the interrupted run did; running it again completes it.
		fmt.Fprintf(stderr, "stopped after %d keys read, %d written, %d kept\n", st.read, st.written, st.kept)
		return err
	}
	report(true)
	return nil
}

// end is one side of a move: a store or a state file.
type end struct {
	store ratelimit.Store
	path  string // a state file
	w     *ratelimit.EntryWriter
	f     *os.File
	close func()
}

func (e *end) each(ctx context.Context, ns string, fn func(ratelimit.Entry) error) error {
	if e.store != nil {
		return ratelimit.Export(ctx, e.store, ns, time.Now().UnixMicro(), fn)
	}
	now := time.Now().UnixMicro()
	return ratelimit.ReadEntries(e.f, func(en ratelimit.Entry) error {
		if (ns != "" && en.Key.Namespace != ns) || en.Expires <= now {
			return nil
		}
		return fn(en)
	})
}

func (e *end) put(ctx context.Context, en ratelimit.Entry) (bool, error) {
	if e.store != nil {
		return ratelimit.Import(ctx, e.store, ratelimit.AlgorithmOf(en.Key.Namespace), en, time.Now().UnixMicro())
	}
	return true, e.w.Write(en)
}

func (e *end) finish() error {
	if e.w == nil {
		return nil
	}
	if err := e.w.Close(); err != nil {
		return err
	}
	if err := e.f.Sync(); err != nil {
		return err
	}
	return nil
}

// kinds are the stores move knows, by URL scheme.
var kinds = []string{"redis", "rediss", "redis+cluster", "valkey", "valkeys", "postgres", "postgresql", "dynamodb", "dynamodbs"}

// checkKind reports whether raw names a kind of store move knows.
func checkKind(raw string) error {
	if strings.HasPrefix(raw, "file:") {
		return nil
	}
	if raw == "memory" {
		return usageError{errors.New("a memory store lives in its process: move its snapshot instead, file:PATH (memory.Store.Snapshot)")}
	}
	u, err := parseStoreURL(raw)
	if err != nil {
		return usageError{fmt.Errorf("store %q: %w", raw, err)}
	}
	if !slices.Contains(kinds, u.Scheme) {
		return usageError{fmt.Errorf("store %q: unknown kind %q; use file:PATH or one of %s", raw, u.Scheme, strings.TrimPrefix(storeSchemes, "memory, "))}
	}
	return nil
}

// openEnd opens the store (or state file) that raw names, for reading or,
// when dst, for writing.
func openEnd(ctx context.Context, raw string, dst bool, getenv func(string) string) (*end, error) {
	if path, ok := strings.CutPrefix(raw, "file:"); ok {
		if path == "" {
			return nil, usageError{fmt.Errorf("%q names no file", raw)}
		}
		var f *os.File
		var err error
		if dst {
			f, err = os.Create(path)
		} else {
			f, err = os.Open(path)
		}
		if err != nil {
			return nil, err
		}
		e := &end{path: path, f: f, close: func() { f.Close() }}
		if dst {
			e.w = ratelimit.NewEntryWriter(f)
		}
		return e, nil
	}
	// A source's table is never created: a mistyped name is an error, not
	// an empty store.
	s, closeStore, err := openStoreFor(ctx, raw, getenv, dst)
	if err != nil {
		return nil, err
	}
	return &end{store: s, close: closeStore}, nil
}

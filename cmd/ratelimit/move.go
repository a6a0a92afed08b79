package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/ratelimitkit/ratelimit/internal/redisengine"
	"github.com/ratelimitkit/ratelimit/statefile"
	"github.com/ratelimitkit/ratelimit/store"
)

const moveUsage = `ratelimit move copies rate-limit state from one store to another, so that
every key keeps its quota: memory (through a state file) to Redis, Redis to
PostgreSQL, and so on. docs/moving-state.md has the details.

Usage:
  ratelimit move -from STORE -to STORE [flags]

Stores:
  file:PATH                         a state file (a memory store's snapshot);
                                    as -to, written beside it and renamed
                                    into place once the source was read to
                                    its end
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
  -rename NS          with -namespace: write its keys under namespace NS,
                      each key's ID and state unchanged, for a limiter whose
                      namespace changed: a composite's "<name>:all-<hash>"
                      of before this release becomes "<name>:all"; -from
                      and -to may then be the same store
  -parts P1,P2,...    with -rename from "<name>:all-<hash>": rewrite each
                      key's state keyed by these part names, one per part
                      in the order the composite lists them (its
                      PartNames: "gcra-1s" for GCRA(n, time.Second, b)),
                      so that its parts may change from the first
                      decision on (without -parts the state is read by
                      place until a decision of the same parts rewrites it)
  -dry-run            count the live keys of the source, write nothing
  -allow-empty        succeed when the source holds no live key (under
                      -namespace); without it that is an error, as a
                      mistyped namespace or store most often is
  -progress D         how often to report progress on stderr: keys read of
                      the total (when the source can count it), percentage,
                      keys/s and time left; one refreshed line on a
                      terminal (default 1s; 0: never)

A key the destination already holds live state for keeps it: that state is
newer (an earlier run of the same move, or decisions made since), so running
a move again after an interruption is safe and loses no admission. A move
from a store (or file) to itself is refused.
`

// moveConfig is the parsed command line of move.
type moveConfig struct {
	from, to   string
	namespace  string
	rename     string
	parts      []string
	dryRun     bool
	allowEmpty bool
	progress   time.Duration
}

func parseMoveFlags(args []string) (moveConfig, error) {
	var cfg moveConfig
	fs := flag.NewFlagSet("move", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	fs.StringVar(&cfg.from, "from", "", "")
	fs.StringVar(&cfg.to, "to", "", "")
	fs.StringVar(&cfg.namespace, "namespace", "", "")
	fs.StringVar(&cfg.rename, "rename", "", "")
	var parts string
	fs.StringVar(&parts, "parts", "", "")
	fs.BoolVar(&cfg.dryRun, "dry-run", false, "")
	fs.BoolVar(&cfg.allowEmpty, "allow-empty", false, "")
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
		if k, ok := store.ParseKey(cfg.namespace + ":k"); !ok || k.Namespace != cfg.namespace {
			return cfg, fmt.Errorf("ratelimit move: -namespace %q is not <name>:<algorithm>, each [A-Za-z0-9_.-]{1,64}", cfg.namespace)
		}
	}
	if parts != "" {
		cfg.parts = strings.Split(parts, ",")
		if cfg.rename == "" || !strings.Contains(cfg.namespace, ":all-") {
			return cfg, errors.New("ratelimit move: -parts needs -rename and a -namespace \"<name>:all-<hash>\", a composite's of before parts were keyed by name")
		}
	}
	if cfg.rename != "" {
		switch k, ok := store.ParseKey(cfg.rename + ":k"); {
		case cfg.namespace == "":
			return cfg, errors.New("ratelimit move: -rename needs -namespace, the namespace it renames")
		case !ok || k.Namespace != cfg.rename:
			return cfg, fmt.Errorf("ratelimit move: -rename %q is not <name>:<algorithm>, each [A-Za-z0-9_.-]{1,64}", cfg.rename)
		case cfg.rename == cfg.namespace:
			return cfg, fmt.Errorf("ratelimit move: -rename %q is the namespace itself", cfg.rename)
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
	if !cfg.dryRun {
		// A rename may write into the store it reads (other keys than it
		// reads), but not into the file it reads, which the move replaces.
		if same, err := sameEnd(cfg.from, cfg.to); err != nil {
			return err
		} else if same && (cfg.rename == "" || strings.HasPrefix(cfg.from, "file:")) {
			return usageError{fmt.Errorf("-from %s and -to %s are the same store: a move to itself would change nothing, or lose the state", redact(cfg.from), redact(cfg.to))}
		}
	}
	src, err := openEnd(ctx, cfg.from, false, getenv)
	if err != nil {
		return err
	}
	defer src.close()
	// A state file is read through once before anything is written: a file
	// cut short, or with a bad line, moves nothing; and its count is the
	// progress's total.
	total := int64(-1)
	if src.f != nil {
		n, err := src.count(cfg.namespace)
		if err != nil {
			return fmt.Errorf("%s: %w", cfg.from, err)
		}
		total = int64(n)
	}
	var dst *end
	if !cfg.dryRun {
		if dst, err = openEnd(ctx, cfg.to, true, getenv); err != nil {
			return err
		}
		defer dst.close()
	}
	var st moveStats
	pr := newProgress(stderr, cfg.progress, cfg.dryRun)
	if total >= 0 {
		pr.setTotal(total)
	} else if cfg.progress > 0 && !cfg.dryRun {
		// The total, counted beside the move where the source can count.
		cctx, cancel := context.WithCancel(ctx)
		done := make(chan struct{})
		defer func() { cancel(); <-done }()
		go func() {
			defer close(done)
			if n, err := statefile.Count(cctx, src.store, cfg.namespace, time.Now()); err == nil {
				pr.setTotal(int64(n))
			}
		}()
	}
	err = src.each(ctx, cfg.namespace, func(e store.Entry) error {
		st.read++
		switch {
		case cfg.parts != nil:
			var err error
			if e, err = statefile.Rekey(e, cfg.rename, cfg.parts); err != nil {
				return err
			}
		case cfg.rename != "":
			e.Key.Namespace = cfg.rename
		}
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
		pr.report(st, false)
		return nil
	})
	pr.end()
	if err == nil && st.read == 0 && !cfg.allowEmpty {
		err = emptyError(cfg)
	}
	if err == nil && dst != nil {
		err = dst.finish()
	}
	if err != nil {
		// What the interrupted run did; running it again completes it.
		fmt.Fprintf(stderr, "stopped after %d keys read, %d written, %d kept\n", st.read, st.written, st.kept)
		return err
	}
	elapsed := time.Since(pr.start).Round(time.Millisecond)
	if cfg.dryRun {
		fmt.Fprintf(stdout, "%d live keys in %s (%v)\n", st.read, redact(cfg.from), elapsed)
	} else {
		fmt.Fprintf(stdout, "%d keys read, %d written, %d kept in the destination as newer (%v)\n",
			st.read, st.written, st.kept, elapsed)
	}
	return nil
}

// emptyError says that the source held no live key to move.
func emptyError(cfg moveConfig) error {
	if cfg.namespace != "" {
		return fmt.Errorf("%s holds no live key under namespace %q: a mistyped namespace? (-allow-empty accepts an empty source)", redact(cfg.from), cfg.namespace)
	}
	return fmt.Errorf("%s holds no live key: the wrong store, prefix or table? (-allow-empty accepts an empty source)", redact(cfg.from))
}

// end is one side of a move: a store or a state file.
type end struct {
	store store.Store
	path  string // a state file: the source, or the destination's final path
	f     *os.File
	w     *statefile.Writer // a destination file's, writing f, a temporary file beside path
	close func()
}

// count reads the whole state file through, checking every line and the
// end line, and returns how many of its entries are live and under ns; it
// leaves the file at its start again.
func (e *end) count(ns string) (int, error) {
	n := 0
	now := time.Now().UnixMicro()
	err := statefile.Read(e.f, func(en store.Entry) error {
		if (ns == "" || en.Key.Namespace == ns) && en.Expires > now {
			n++
		}
		return nil
	})
	if err != nil {
		return 0, err
	}
	_, err = e.f.Seek(0, io.SeekStart)
	return n, err
}

func (e *end) each(ctx context.Context, ns string, fn func(store.Entry) error) error {
	if e.store != nil {
		return statefile.Export(ctx, e.store, ns, time.Now(), fn)
	}
	now := time.Now().UnixMicro()
	return statefile.Read(e.f, func(en store.Entry) error {
		if err := ctx.Err(); err != nil {
			return err
		}
		if (ns != "" && en.Key.Namespace != ns) || en.Expires <= now {
			return nil
		}
		return fn(en)
	})
}

// Each key's import, and the probe of a destination before its table is
// made, is bounded by one second (redisengine.ExportTimeout, each round
// trip's budget in a count or an export too), as the limiter's store
// budget bounds each decision, whether or not the store's client honours a
// context's deadline: a destination that hangs fails the move in about a
// second.

// openTimeout bounds opening a store that answered the probe: creating a
// destination's table where it is missing (DynamoDB waits for the new
// table to be active).
const openTimeout = 30 * time.Second

func (e *end) put(ctx context.Context, en store.Entry) (bool, error) {
	if e.store == nil {
		return true, e.w.Write(en)
	}
	var wrote bool
	err := redisengine.Bounded(ctx, func(ctx context.Context) error {
		var err error
		wrote, err = statefile.Import(ctx, e.store, en, time.Now())
		return err
	})
	if err != nil {
		// wrote may still be written by an abandoned call: not read.
		return false, fmt.Errorf("import %q: %w", en.Key.String(), err)
	}
	return wrote, nil
}

// probe asks s for a key's state, writing nothing, within the bound, and
// returns an error wrapping context.DeadlineExceeded when it does not
// answer in time. Other errors (a missing table) are the caller's to
// judge.
func probe(ctx context.Context, s store.Store) error {
	return redisengine.Bounded(ctx, func(ctx context.Context) error {
		key := store.Key{Namespace: "ratelimit-move:probe", ID: "reachable"}
		return s.Update(ctx, key, time.Now().UnixMicro(), func([]byte, int64) ([]byte, int64, error) { return nil, 0, nil })
	})
}

// finish completes a destination file: the end line, on disk, then renamed
// over path, so that path holds either what it held before or the whole
// new file.
func (e *end) finish() error {
	if e.w == nil {
		return nil
	}
	tmp := e.f.Name()
	if err := e.w.Close(); err != nil {
		return err
	}
	if err := e.f.Sync(); err != nil {
		return err
	}
	if err := e.f.Close(); err != nil {
		return err
	}
	if err := os.Rename(tmp, e.path); err != nil {
		return err
	}
	e.w = nil
	// The rename itself on disk, where the system allows.
	if d, err := os.Open(filepath.Dir(e.path)); err == nil {
		d.Sync()
		d.Close()
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
		return usageError{errors.New("a memory store lives in its process: move a state file of it instead, file:PATH, written with package statefile")}
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

// sameEnd reports whether from and to name the same state: the same file
// (by its cleaned absolute path, or, when both exist, os.SameFile, which
// sees through links), or the same store (same kind of server, hosts,
// database, table and key prefix).
func sameEnd(from, to string) (bool, error) {
	fp, fok := strings.CutPrefix(from, "file:")
	tp, tok := strings.CutPrefix(to, "file:")
	if fok != tok {
		return false, nil
	}
	if fok {
		fa, err1 := filepath.Abs(fp)
		ta, err2 := filepath.Abs(tp)
		if err := errors.Join(err1, err2); err != nil {
			return false, err
		}
		if fa == ta {
			return true, nil
		}
		fi, err1 := os.Stat(fa)
		ti, err2 := os.Stat(ta)
		return err1 == nil && err2 == nil && os.SameFile(fi, ti), nil
	}
	return storeIdentity(from) == storeIdentity(to), nil
}

// storeIdentity returns what names the state a store URL reaches: its
// kind of server (Redis and Valkey speak to the same servers), sorted
// hosts, database, table and prefix; not its credentials or clock.
func storeIdentity(raw string) string {
	u, err := parseStoreURL(raw)
	if err != nil {
		return raw
	}
	kind := map[string]string{
		"redis": "redis", "rediss": "redis", "redis+cluster": "redis", "valkey": "redis", "valkeys": "redis",
		"postgres": "postgres", "postgresql": "postgres", "dynamodb": "dynamodb", "dynamodbs": "dynamodb",
	}[u.Scheme]
	hosts := strings.Split(strings.ToLower(u.Host), ",")
	slices.Sort(hosts)
	q := u.Query()
	db := strings.Trim(u.Path, "/")
	table := q.Get("table")
	switch kind {
	case "redis":
		if db == "" {
			db = "0"
		}
	case "postgres", "dynamodb":
		if table == "" {
			table = "ratelimit"
		}
	}
	if kind == "postgres" && db == "" {
		db = q.Get("dbname")
	}
	return strings.Join([]string{kind, strings.Join(hosts, ","), db, table, q.Get("prefix")}, "\x00")
}

// openEnd opens the store (or state file) that raw names, for reading or,
// when dst, for writing: a destination file is a temporary file beside its
// path, which finish renames into place.
func openEnd(ctx context.Context, raw string, dst bool, getenv func(string) string) (*end, error) {
	if path, ok := strings.CutPrefix(raw, "file:"); ok {
		if path == "" {
			return nil, usageError{fmt.Errorf("%q names no file", raw)}
		}
		if !dst {
			f, err := os.Open(path)
			if err != nil {
				return nil, err
			}
			return &end{path: path, f: f, close: func() { f.Close() }}, nil
		}
		f, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".*.tmp")
		if err != nil {
			return nil, err
		}
		// A file it replaces keeps its permissions (a new one is 0600).
		if fi, err := os.Stat(path); err == nil {
			f.Chmod(fi.Mode().Perm())
		}
		e := &end{path: path, f: f, w: statefile.NewWriter(f)}
		e.close = func() {
			if e.w != nil { // not renamed into place: gone
				f.Close()
				os.Remove(f.Name())
			}
		}
		return e, nil
	}
	// A destination must answer within the bound before its table, if
	// missing, is made (which may take longer).
	if dst {
		s, closeStore, err := openStoreFor(ctx, raw, getenv, false)
		if err != nil {
			return nil, err
		}
		err = probe(ctx, s)
		closeStore()
		if errors.Is(err, context.DeadlineExceeded) && ctx.Err() == nil {
			return nil, fmt.Errorf("%s does not answer: %w", redact(raw), err)
		}
	}
	// A source's table is never created: a mistyped name is an error, not
	// an empty store.
	octx, cancel := context.WithTimeout(ctx, openTimeout)
	defer cancel()
	s, closeStore, err := openStoreFor(octx, raw, getenv, dst)
	if err != nil {
		return nil, err
	}
	return &end{store: s, close: closeStore}, nil
}

package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"html/template"
	"io"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/ratelimitkit/ratelimit"
	"github.com/ratelimitkit/ratelimit/algorithms"
	"github.com/ratelimitkit/ratelimit/httplimit"
	"github.com/ratelimitkit/ratelimit/internal/echo"
	"github.com/ratelimitkit/ratelimit/store"
)

// serveConfig is the parsed command line of serve.
type serveConfig struct {
	addr     string
	limit    int64
	period   time.Duration
	burst    int64
	store    string
	trust    string // comma-separated trusted proxies
	name     string // prefix of the limiters' names, or ""
	burstSet bool
}

func parseServeFlags(args []string) (serveConfig, error) {
	var cfg serveConfig
	fs := flag.NewFlagSet("serve", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	fs.StringVar(&cfg.addr, "addr", "127.0.0.1:8080", "")
	fs.Int64Var(&cfg.limit, "limit", 10, "")
	fs.DurationVar(&cfg.period, "period", 10*time.Second, "")
	fs.Int64Var(&cfg.burst, "burst", 0, "")
	fs.StringVar(&cfg.store, "store", "memory", "")
	fs.StringVar(&cfg.trust, "trust-proxy", "", "")
	fs.StringVar(&cfg.name, "name", "", "")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return cfg, errHelp
		}
		return cfg, fmt.Errorf("ratelimit serve: %s", clipEchoes(err.Error(), args...))
	}
	if fs.NArg() > 0 {
		return cfg, fmt.Errorf("ratelimit serve: unexpected argument %s (flags come as -name value)", echo.Quote(fs.Arg(0)))
	}
	fs.Visit(func(f *flag.Flag) { cfg.burstSet = cfg.burstSet || f.Name == "burst" })
	if !cfg.burstSet {
		cfg.burst = cfg.limit
	}
	return cfg, nil
}

// runServe runs the demo service until SIGINT or SIGTERM.
func runServe(args []string, stdout, stderr io.Writer, getenv func(string) string) int {
	cfg, err := parseServeFlags(args)
	if code, done := flagsDone(err, stdout, stderr); done {
		return code
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()

	openCtx, cancel := context.WithTimeout(ctx, 30*time.Second)
	store, closeStore, err := openStore(openCtx, cfg.store, getenv)
	cancel()
	if err != nil {
		fmt.Fprintf(stderr, "ratelimit serve: %v\n", err)
		return exitError
	}
	defer closeStore()
	h, err := newDemo(cfg, store, func(r *http.Request, err error) {
		fmt.Fprintf(stderr, "ratelimit serve: %s %s: %v\n", r.Method, r.URL.Path, err)
	})
	if err != nil {
		fmt.Fprintf(stderr, "%v\nrun 'ratelimit help' for usage\n", err)
		return exitUsage
	}
	for _, w := range h.warnings {
		fmt.Fprintf(stderr, "ratelimit serve: warning: %s\n", w)
	}
	if err := h.check(ctx); err != nil {
		fmt.Fprintf(stderr, "ratelimit serve: store %s does not answer: %v\n", redact(cfg.store), err)
		return exitError
	}
	ln, err := net.Listen("tcp", cfg.addr)
	if err != nil {
		fmt.Fprintf(stderr, "ratelimit serve: %v\n", err)
		return exitError
	}
	srv := &http.Server{Handler: h, ReadHeaderTimeout: 10 * time.Second}
	fmt.Fprintf(stdout, "ratelimit serve: listening on http://%s (store %s; %d per %v, burst %d)\n",
		ln.Addr(), redact(cfg.store), cfg.limit, cfg.period, cfg.burst)
	done := make(chan error, 1)
	go func() { done <- srv.Serve(ln) }()
	select {
	case err := <-done:
		fmt.Fprintf(stderr, "ratelimit serve: %v\n", err)
		return exitError
	case <-ctx.Done():
	}
	shutdown, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := srv.Shutdown(shutdown); err != nil {
		fmt.Fprintf(stderr, "ratelimit serve: shutdown: %v\n", err)
		return exitError
	}
	<-done
	fmt.Fprintln(stdout, "ratelimit serve: stopped")
	return exitOK
}

// redact hides a password in a store URL.
func redact(spec string) string {
	if u, err := parseStoreURL(spec); err == nil && u.User != nil {
		return u.Redacted()
	}
	return spec
}

// endpoint is one algorithm's route in the demo.
type endpoint struct {
	path string // "/fixed-window"
	alg  algorithms.Algorithm
}

// demo is the service: one endpoint per algorithm, /compare, and an index.
type demo struct {
	cfg       serveConfig
	endpoints []endpoint
	limiters  []*ratelimit.Limiter
	mux       *http.ServeMux
	// warnings are said on start: a configuration that works but is
	// probably not what was meant.
	warnings []string
}

// ServeHTTP implements http.Handler.
func (d *demo) ServeHTTP(w http.ResponseWriter, r *http.Request) { d.mux.ServeHTTP(w, r) }

// newDemo builds the service on store. hook receives every store error.
func newDemo(cfg serveConfig, store store.Store, hook func(*http.Request, error)) (*demo, error) {
	d := &demo{cfg: cfg, mux: http.NewServeMux()}
	algs := newAlgorithms(config{limit: cfg.limit, period: cfg.period, burst: cfg.burst})
	key := httplimit.RemoteIP
	if cfg.trust != "" {
		proxies := strings.Split(cfg.trust, ",")
		var err error
		if key, err = httplimit.ClientIP(httplimit.TrustProxies(proxies...)); err != nil {
			return nil, fmt.Errorf("ratelimit serve: -trust-proxy: %w", err)
		}
		for _, p := range proxies {
			// An IPv4-mapped prefix counts as the IPv4 prefix it maps, as
			// TrustProxies reads it: ::ffff:0.0.0.0/96 is 0.0.0.0/0.
			if p, err := netip.ParsePrefix(strings.TrimSpace(p)); err == nil && (p.Bits() == 0 || p.Addr().Is4In6() && p.Bits() <= 96) {
				d.warnings = append(d.warnings, fmt.Sprintf("-trust-proxy %s trusts every address: any client can choose its own key with an X-Forwarded-For header and escape its limit; name your proxies' addresses instead", p))
			}
		}
	}
	for _, alg := range algs {
		path := endpointPath(alg.Name())
		name := strings.TrimPrefix(path, "/")
		var opts []ratelimit.Option
		if cfg.name != "" {
			opts = append(opts, ratelimit.WithName(cfg.name+"."+name))
		}
		lim, err := ratelimit.New(store, alg, opts...)
		if err != nil {
			return nil, err
		}
		mw, err := httplimit.New([]httplimit.Rule{{Limiter: lim, Name: name, Key: key}}, httplimit.WithErrorHook(hook))
		if err != nil {
			return nil, err
		}
		d.endpoints = append(d.endpoints, endpoint{path, alg})
		d.limiters = append(d.limiters, lim)
		d.mux.Handle("GET "+path, mw.Handler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Content-Type", "text/plain; charset=utf-8")
			fmt.Fprintf(w, "%s: allowed\n", name)
		})))
	}
	// /compare simulates up to 10,000 requests per call: it is limited too,
	// per client, on the same store.
	compareName := "serve-compare"
	if cfg.name != "" {
		compareName = cfg.name + ".compare"
	}
	compareLim, err := ratelimit.New(store, algorithms.GCRA(60, time.Minute, 10), ratelimit.WithName(compareName))
	if err != nil {
		return nil, err
	}
	mw, err := httplimit.New([]httplimit.Rule{{Limiter: compareLim, Name: "compare", Key: key}}, httplimit.WithErrorHook(hook))
	if err != nil {
		return nil, err
	}
	d.mux.Handle("GET /compare", mw.Handler(http.HandlerFunc(d.compare)))
	d.mux.HandleFunc("GET /{$}", d.index)
	return d, nil
}

// endpointPaths are the paths of the service this demo replaces, by
// algorithm name.
var endpointPaths = map[string]string{
	"fixed_window":   "/fixed-window",
	"sliding_log":    "/sliding-window-log",
	"sliding_window": "/sliding-window-counter",
	"token_bucket":   "/token-bucket",
	"gcra":           "/gcra",
	"leaky_bucket":   "/leaky-bucket",
}

// endpointPath returns the path of the algorithm named name: the old
// service's, or for an algorithm it did not have, the name with dashes.
func endpointPath(name string) string {
	if p, ok := endpointPaths[name]; ok {
		return p
	}
	return "/" + strings.ReplaceAll(name, "_", "-")
}

// check asks the store one question, so a wrong -store fails at start.
func (d *demo) check(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	_, err := d.limiters[0].Peek(ctx, "ratelimit-serve-startup-check")
	return err
}

var indexPage = template.Must(template.New("index").Parse(`<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>ratelimit serve</title></head>
<body style="font-family: system-ui, sans-serif; max-width: 44rem; margin: 2rem auto">
<h1>ratelimit serve</h1>
<p>{{.Limit}} requests per {{.Period}} per client address, burst {{.Burst}}. Each endpoint answers 200 or 429 with the RateLimit-Policy and RateLimit fields.</p>
<ul>{{range .Paths}}<li><a href="{{.}}"><code>{{.}}</code></a></li>{{end}}</ul>
<p><a href="/compare">/compare</a>: the six algorithms side by side on simulated traffic (<a href="/compare?format=json">as JSON</a>;
query parameters <code>pattern</code>, <code>n</code>, <code>delay</code>, <code>limit</code>, <code>period</code>, <code>burst</code>, <code>start</code>, <code>seed</code>).</p>
</body></html>
`))

func (d *demo) index(w http.ResponseWriter, r *http.Request) {
	var paths []string
	for _, e := range d.endpoints {
		paths = append(paths, e.path)
	}
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	indexPage.Execute(w, struct {
		Limit, Burst int64
		Period       string
		Paths        []string
	}{d.cfg.limit, d.cfg.burst, fmtDur(d.cfg.period), paths})
}

// compareParams maps /compare's query parameters to compare's flags.
var compareParams = map[string]string{
	"pattern": "-pattern", "n": "-n", "delay": "-spacing", "spacing": "-spacing",
	"limit": "-limit", "period": "-period", "burst": "-burst", "start": "-start", "seed": "-seed",
}

// compare answers /compare: the same simulation as `ratelimit compare`,
// as the HTML page or as JSON (Accept: application/json or
// ?format=json). The parameters default to the service's own numbers.
//
// A query it cannot parse (a bad escape, more parameters than Go's URL
// parser takes) is answered 400, not run on defaults; error messages
// repeat at most a short prefix of any parameter (echo.Quote).
func (d *demo) compare(w http.ResponseWriter, r *http.Request) {
	q, qerr := url.ParseQuery(r.URL.RawQuery)
	asJSON := q.Get("format") == "json" || q.Get("format") == "" && strings.Contains(r.Header.Get("Accept"), "application/json")
	fail := func(err error) {
		var inputs []string
		for name, values := range q {
			inputs = append(append(inputs, name), values...)
		}
		msg := clipEchoes(strings.TrimPrefix(err.Error(), "ratelimit compare: "), inputs...)
		if asJSON {
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(http.StatusBadRequest)
			b, _ := json.Marshal(struct {
				Error string `json:"error"`
			}{msg})
			w.Write(append(b, '\n'))
			return
		}
		http.Error(w, msg, http.StatusBadRequest)
	}
	if qerr != nil {
		fail(fmt.Errorf("query not understood: %w", qerr))
		return
	}
	args := []string{"-limit", fmt.Sprint(d.cfg.limit), "-period", d.cfg.period.String()}
	if d.cfg.burstSet && q.Get("burst") == "" && q.Get("limit") == "" {
		args = append(args, "-burst", fmt.Sprint(d.cfg.burst))
	}
	for name, values := range q {
		flagName, ok := compareParams[name]
		if name == "format" {
			if v := q.Get("format"); v != "json" && v != "html" {
				fail(fmt.Errorf("format %s must be json or html", echo.Quote(v)))
				return
			}
			continue
		}
		if !ok {
			fail(fmt.Errorf("unknown parameter %s; use pattern, n, delay, limit, period, burst, start, seed or format", echo.Quote(name)))
			return
		}
		if len(values) != 1 {
			fail(fmt.Errorf("parameter %s given %d times", echo.Quote(name), len(values)))
			return
		}
		args = append(args, flagName, values[0])
	}
	cfg, err := parseCompareFlags(args)
	if err != nil {
		fail(err)
		return
	}
	res, err := simulate(cfg)
	if err != nil {
		fail(err)
		return
	}
	if asJSON {
		w.Header().Set("Content-Type", "application/json")
		if err := renderJSON(w, res); err != nil {
			fail(err)
		}
		return
	}
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	renderHTML(w, res)
}

// clipEchoes returns msg with every input longer than echo.Max that it
// repeats, quoted or bare, shortened as echo.Quote shortens it: for
// messages built by code that quotes whole values (the flag package's
// "invalid value ... for flag").
func clipEchoes(msg string, inputs ...string) string {
	for _, in := range inputs {
		if len(in) <= echo.Max {
			continue
		}
		short := echo.Quote(in)
		msg = strings.ReplaceAll(msg, strconv.Quote(in), short)
		msg = strings.ReplaceAll(msg, in, short)
	}
	return msg
}

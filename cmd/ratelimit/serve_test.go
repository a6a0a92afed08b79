package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"image"
	"image/png"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/dunglas/httpsfv"

	"github.com/ratelimitkit/ratelimit/internal/testserver"
	"github.com/ratelimitkit/ratelimit/store"
	"github.com/ratelimitkit/ratelimit/store/memory"
)

// startDemo runs the demo service on store behind a real HTTP server.
func startDemo(t *testing.T, store store.Store, args ...string) *httptest.Server {
	t.Helper()
	cfg, err := parseServeFlags(args)
	if err != nil {
		t.Fatal(err)
	}
	d, err := newDemo(cfg, store, func(r *http.Request, err error) { t.Errorf("%s: store error %v", r.URL.Path, err) })
	if err != nil {
		t.Fatal(err)
	}
	if err := d.check(context.Background()); err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(d)
	t.Cleanup(srv.Close)
	return srv
}

type reply struct {
	status int
	header http.Header
	body   string
}

func fetch(t *testing.T, url string, header ...string) reply {
	t.Helper()
	req, err := http.NewRequest(http.MethodGet, url, nil)
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i+1 < len(header); i += 2 {
		req.Header.Set(header[i], header[i+1])
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return reply{resp.StatusCode, resp.Header, string(b)}
}

// params parses a one-member RateLimit or RateLimit-Policy field.
func params(t *testing.T, h http.Header, field string) (string, map[string]int64) {
	t.Helper()
	list, err := httpsfv.UnmarshalList(h.Values(field))
	if err != nil || len(list) != 1 {
		t.Fatalf("%s %q: %v (%d members)", field, h.Values(field), err, len(list))
	}
	item := list[0].(httpsfv.Item)
	out := map[string]int64{}
	for _, k := range item.Params.Names() {
		v, _ := item.Params.Get(k)
		out[k], _ = v.(int64)
	}
	name, _ := item.Value.(string)
	return name, out
}

// defaultComparison is what /compare shows by default on a service with
// the default numbers: compare's boundary burst at 10 per 10s.
func defaultComparison(t *testing.T) *result {
	t.Helper()
	cfg, err := parseCompareFlags([]string{"-limit", "10", "-period", "10s", "-pattern", "boundary-burst"})
	if err != nil {
		t.Fatal(err)
	}
	res, err := simulate(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return res
}

// TestServeEndpoints: each algorithm's endpoint admits its quota, then
// answers 429 with the fields and a Retry-After.
func TestServeEndpoints(t *testing.T) {
	srv := startDemo(t, memory.MustNew(), "-limit", "3", "-period", "1h")
	tests := []struct {
		path string
		q, w int64
	}{
		{"/fixed-window", 3, 3600},
		{"/sliding-window-log", 3, 3600},
		{"/sliding-window-counter", 3, 3600},
		{"/token-bucket", 3, 3600},
		{"/gcra", 3, 3600},
	}
	for _, tt := range tests {
		var got []int
		var last reply
		for range 4 {
			last = fetch(t, srv.URL+tt.path)
			got = append(got, last.status)
		}
		if fmt.Sprint(got) != "[200 200 200 429]" {
			t.Errorf("%s: four requests = %v, want [200 200 200 429]", tt.path, got)
			continue
		}
		name, p := params(t, last.header, "RateLimit-Policy")
		if name != tt.path[1:] || p["q"] != tt.q || p["w"] != tt.w {
			t.Errorf("%s: RateLimit-Policy %q %v, want q=%d w=%d", tt.path, name, p, tt.q, tt.w)
		}
		if _, r := params(t, last.header, "RateLimit"); r["r"] != 0 || r["t"] < 1 {
			t.Errorf("%s: denied with RateLimit %v, want r=0 and t>0", tt.path, r)
		}
		if ra := last.header.Get("Retry-After"); ra == "" || ra == "0" {
			t.Errorf("%s: denied with Retry-After %q", tt.path, ra)
		}
		if !strings.Contains(last.header.Get("Content-Type"), "application/problem+json") {
			t.Errorf("%s: denial Content-Type %q", tt.path, last.header.Get("Content-Type"))
		}
	}
	if r := fetch(t, srv.URL+"/"); r.status != http.StatusOK || !strings.Contains(r.body, "/leaky-bucket") {
		t.Errorf("index: %d, lacks /leaky-bucket", r.status)
	}
	if r := fetch(t, srv.URL+"/nope"); r.status != http.StatusNotFound {
		t.Errorf("/nope: %d, want 404", r.status)
	}
}

// TestServeLeakyBucket: the leaky bucket's endpoint holds an admitted
// request until its turn and refuses what overflows the queue.
func TestServeLeakyBucket(t *testing.T) {
	// One request per second, a queue of two.
	srv := startDemo(t, memory.MustNew(), "-limit", "10", "-period", "10s", "-burst", "2")
	var mu sync.Mutex
	var codes []int
	var slow int
	var wg sync.WaitGroup
	start := time.Now()
	for range 4 {
		wg.Go(func() {
			r := fetch(t, srv.URL+"/leaky-bucket")
			mu.Lock()
			defer mu.Unlock()
			codes = append(codes, r.status)
			// The second admitted request proceeds one interval after
			// the first arrived, which was after start.
			if r.status == http.StatusOK && time.Since(start) >= time.Second-time.Millisecond {
				slow++
			}
		})
	}
	wg.Wait()
	ok := 0
	for _, c := range codes {
		if c == http.StatusOK {
			ok++
		}
	}
	if ok != 2 || slow < 1 {
		t.Errorf("four requests at once on a queue of two at 1/s: %v, %d finished after a second; want two 200s, one of them after 1s", codes, slow)
	}
}

// TestServeCompare: /compare is compare's simulation, as HTML and JSON.
func TestServeCompare(t *testing.T) {
	srv := startDemo(t, memory.MustNew())
	var viaQuery, viaAccept bytes.Buffer
	r := fetch(t, srv.URL+"/compare?format=json&pattern=boundary-burst")
	viaQuery.WriteString(r.body)
	if r.status != http.StatusOK || r.header.Get("Content-Type") != "application/json" {
		t.Fatalf("JSON: %d %q: %s", r.status, r.header.Get("Content-Type"), r.body)
	}
	var got jsonResult
	if err := json.Unmarshal(viaQuery.Bytes(), &got); err != nil {
		t.Fatal(err)
	}
	admitted := map[string]int{}
	for _, l := range got.Lanes {
		admitted[l.Name] = l.Admitted
		if len(l.Allowed) != got.N || len(l.DelayUS) != got.N {
			t.Errorf("%s: %d outcomes for %d requests", l.Name, len(l.Allowed), got.N)
		}
	}
	// The service's numbers (10 per 10s) with compare's default traffic:
	// 10 requests either side of a boundary.
	if got.N != 20 || admitted["fixed_window"] != 20 || admitted["sliding_log"] != 10 || len(got.Lanes) != 6 {
		t.Errorf("boundary burst: n=%d, admitted %v; want 20 requests, fixed window 20, sliding log 10, six lanes", got.N, admitted)
	}
	// The same simulation as the command's, through the same code.
	res := defaultComparison(t)
	var direct bytes.Buffer
	if err := renderJSON(&direct, res); err != nil {
		t.Fatal(err)
	}
	if direct.String() != viaQuery.String() {
		t.Error("/compare?format=json differs from the compare command's simulation")
	}
	r = fetch(t, srv.URL+"/compare?pattern=boundary-burst", "Accept", "application/json")
	viaAccept.WriteString(r.body)
	if viaAccept.String() != viaQuery.String() {
		t.Error("Accept: application/json differs from ?format=json")
	}

	r = fetch(t, srv.URL+"/compare?pattern=steady&n=30&delay=100ms&limit=5&period=1s")
	if r.status != http.StatusOK || !strings.HasPrefix(r.header.Get("Content-Type"), "text/html") ||
		!strings.Contains(r.body, "<svg") || !strings.Contains(r.body, "-spacing 100ms") {
		t.Errorf("HTML with parameters: %d %q, want a page with the SVG and the reproducing command", r.status, r.header.Get("Content-Type"))
	}
	for _, bad := range []string{"?limit=0", "?pattern=sawtooth", "?n=10001", "?bogus=1", "?format=xml", "?n=1&n=2"} {
		if r := fetch(t, srv.URL+"/compare"+bad); r.status != http.StatusBadRequest || r.body == "" {
			t.Errorf("/compare%s: %d %q, want 400 with a message", bad, r.status, r.body)
		}
	}
	if r := fetch(t, srv.URL+"/compare?limit=0&format=json"); !strings.Contains(r.body, `"error":"ratelimit: invalid parameters`) {
		t.Errorf("JSON error body %q", r.body)
	}
}

// TestServeStores runs the service on every real store -store names.
func TestServeStores(t *testing.T) {
	unique := fmt.Sprintf("serve%d", time.Now().UnixNano())
	stores := []struct {
		name string
		spec func(t *testing.T) string
	}{
		{"redis", func(t *testing.T) string { return "redis://" + testserver.RedisAddr(t) }},
		{"valkey", func(t *testing.T) string { return "valkey://" + testserver.ValkeyAddr(t) }},
		{"postgres", func(t *testing.T) string { return testserver.PostgresURL(t) }},
		{"dynamodb", func(t *testing.T) string {
			return "dynamodb://" + strings.TrimPrefix(testserver.DynamoDBEndpoint(t), "http://") + "?table=" + unique
		}},
	}
	for _, s := range stores {
		t.Run(s.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			store, closeStore, err := openStore(ctx, s.spec(t), os.Getenv)
			if err != nil {
				t.Fatal(err)
			}
			defer closeStore()
			srv := startDemo(t, store, "-limit", "2", "-period", "1h", "-name", unique+s.name)
			var got []int
			for range 3 {
				got = append(got, fetch(t, srv.URL+"/sliding-window-log").status)
			}
			if fmt.Sprint(got) != "[200 200 429]" {
				t.Errorf("three requests = %v, want [200 200 429]", got)
			}
		})
	}
}

func TestOpenStoreErrors(t *testing.T) {
	for _, spec := range []string{"mongodb://x", "redis", "dynamodb://", "redis://host:notaport"} {
		if _, _, err := openStore(context.Background(), spec, os.Getenv); err == nil {
			t.Errorf("openStore(%q) succeeded, want an error", spec)
		}
	}
}

// TestServeCommand runs `ratelimit serve` as a real process on a real
// listener, talks to it over HTTP, and stops it with SIGTERM.
func TestServeCommand(t *testing.T) {
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), "RATELIMIT_CMD_TEST_MAIN=1",
		"RATELIMIT_CMD_TEST_ARGS=serve -addr 127.0.0.1:0 -limit 2 -period 1h")
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer cmd.Process.Kill()
	lines := bufio.NewScanner(stdout)
	if !lines.Scan() {
		t.Fatalf("no output; stderr: %s", stderr.String())
	}
	m := regexp.MustCompile(`listening on (http://127\.0\.0\.1:\d+) \(store memory; 2 per 1h0m0s, burst 2\)`).FindStringSubmatch(lines.Text())
	if m == nil {
		t.Fatalf("first line %q does not say where it listens", lines.Text())
	}
	var got []int
	for range 3 {
		got = append(got, fetch(t, m[1]+"/gcra").status)
	}
	if fmt.Sprint(got) != "[200 200 429]" {
		t.Errorf("three requests to /gcra = %v, want [200 200 429]", got)
	}
	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	rest, _ := io.ReadAll(stdout)
	if err := cmd.Wait(); err != nil {
		t.Errorf("after SIGTERM: %v; stderr: %s", err, stderr.String())
	}
	if !strings.Contains(string(rest), "stopped") {
		t.Errorf("after SIGTERM the output was %q, want it to say it stopped", rest)
	}
}

func TestServeUsage(t *testing.T) {
	for _, c := range []struct {
		args []string
		code int
		err  string
	}{
		{[]string{"serve", "-limit", "0"}, exitUsage, "must be positive"},
		{[]string{"serve", "-nope"}, exitUsage, "flag provided but not defined"},
		{[]string{"serve", "extra"}, exitUsage, "unexpected argument"},
		{[]string{"serve", "-trust-proxy", "not-a-cidr"}, exitUsage, "neither an address nor a CIDR"},
		{[]string{"serve", "-name", "bad name"}, exitUsage, "may hold only"},
		{[]string{"serve", "-store", "mongodb://x"}, exitError, "unknown scheme"},
		{[]string{"serve", "-addr", "256.0.0.1:1"}, exitError, "256.0.0.1"},
	} {
		var stdout, stderr bytes.Buffer
		if code := run(c.args, &stdout, &stderr, noEnv); code != c.code || !strings.Contains(stderr.String(), c.err) {
			t.Errorf("ratelimit %s: exit %d, stderr %q; want %d saying %q", strings.Join(c.args, " "), code, stderr.String(), c.code, c.err)
		}
	}
}

// TestCompareInBrowser loads /compare in headless Chromium and checks, in
// the screenshot, that the timeline was drawn: the green marks of admitted
// requests and the red crosses of denied ones, about as many of each as
// the simulation decided.
func TestCompareInBrowser(t *testing.T) {
	chromium := testserver.Chromium(t)
	srv := startDemo(t, memory.MustNew())
	url := srv.URL + "/compare?pattern=boundary-burst"

	dom := string(testserver.Headless(t, chromium, url, "--dump-dom"))
	for _, lane := range []string{"fixed_window", "sliding_log", "sliding_window", "token_bucket", "gcra", "leaky_bucket"} {
		if !strings.Contains(dom, `data-algorithm="`+lane+`"`) {
			t.Errorf("the DOM Chromium built has no lane for %s", lane)
		}
	}

	shot := filepath.Join(t.TempDir(), "compare.png")
	testserver.Headless(t, chromium, url, "--window-size=1100,1500", "--screenshot="+shot)
	f, err := os.Open(shot)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	img, err := png.Decode(f)
	if err != nil {
		t.Fatalf("screenshot: %v", err)
	}
	// What the page should show: the same simulation, run here.
	res := defaultComparison(t)
	admitted, denied := 1, 1 // the legend's marks
	for _, l := range res.lanes {
		for _, o := range l.outcomes {
			switch {
			case !o.allowed:
				denied++
			case o.delay == 0:
				admitted++
			}
		}
	}
	green := blobs(img, 0x2e, 0x9e, 0x44)
	red := blobs(img, 0xd4, 0x3c, 0x3c)
	if !near(green, admitted) || !near(red, denied) {
		t.Errorf("screenshot shows %d green and %d red marks; the simulation admitted %d and denied %d (legend included)",
			green, red, admitted, denied)
	}
}

// near reports whether got is within a fifth of want: marks that touch
// can merge, and text in the mark colours can add a few.
func near(got, want int) bool { return got*5 >= want*4 && got*5 <= want*6 }

// blobs counts the connected regions of at least 12 pixels whose colour is
// close to (r, g, b): the marks, not the anti-aliased specks of text.
func blobs(img image.Image, r, g, b uint8) int {
	bounds := img.Bounds()
	w, h := bounds.Dx(), bounds.Dy()
	match := make([]bool, w*h)
	for y := range h {
		for x := range w {
			cr, cg, cb, _ := img.At(bounds.Min.X+x, bounds.Min.Y+y).RGBA()
			d := absDiff(uint8(cr>>8), r) + absDiff(uint8(cg>>8), g) + absDiff(uint8(cb>>8), b)
			match[y*w+x] = d <= 40
		}
	}
	count := 0
	stack := []int{}
	for i := range match {
		if !match[i] {
			continue
		}
		size := 0
		match[i] = false
		stack = append(stack[:0], i)
		for len(stack) > 0 {
			p := stack[len(stack)-1]
			stack = stack[:len(stack)-1]
			size++
			x, y := p%w, p/w
			// Eight neighbours: a cross's strokes are diagonal.
			for qy := max(y-1, 0); qy <= min(y+1, h-1); qy++ {
				for qx := max(x-1, 0); qx <= min(x+1, w-1); qx++ {
					if match[qy*w+qx] {
						match[qy*w+qx] = false
						stack = append(stack, qy*w+qx)
					}
				}
			}
		}
		if size >= 12 {
			count++
		}
	}
	return count
}

func absDiff(a, b uint8) int {
	if a > b {
		return int(a - b)
	}
	return int(b - a)
}

// TestServeCompareBadQuery sends /compare queries it cannot use: each is
// answered 400 with a message that repeats at most a short prefix of the
// input (rule: a query that cannot be parsed is not run on defaults, and
// an answer does not echo 512 KB of its request).
func TestServeCompareBadQuery(t *testing.T) {
	long := strings.Repeat("9", 256<<10)
	many := strings.Repeat("n=1&", 10_000) + "n=1"
	for _, c := range []struct{ name, query, say string }{
		{"10,001 parameters", many, "query parameters exceeded limit"},
		{"bad escape", "n=%zz", "invalid URL escape"},
		{"semicolon", "n=1;limit=2", "semicolon"},
		{"long value", "n=" + long, "(262144 bytes) for flag -n"},
		{"long pattern", "pattern=" + long, "unknown -pattern"},
		{"long name", long + "=1", "unknown parameter"},
		{"long format", "format=" + long, "must be json or html"},
	} {
		srv := startDemo(t, memory.MustNew()) // /compare's own limit: 10 at once
		for _, format := range []string{"html", "json"} {
			header := []string{"Accept", "text/html"}
			if format == "json" {
				header = []string{"Accept", "application/json"}
			}
			r := fetch(t, srv.URL+"/compare?"+c.query, header...)
			if r.status != http.StatusBadRequest || !strings.Contains(r.body, c.say) {
				t.Errorf("/compare with %s (%s): %d %.200q, want 400 saying %q", c.name, format, r.status, r.body, c.say)
			}
			if len(r.body) > 400 {
				t.Errorf("/compare with %s (%s): a %d-byte answer, want a short one: %.300q", c.name, format, len(r.body), r.body)
			}
			if format == "json" && r.status == http.StatusBadRequest && !strings.HasPrefix(c.query, "format=") {
				var v struct{ Error string }
				if err := json.Unmarshal([]byte(r.body), &v); err != nil || v.Error == "" {
					t.Errorf("/compare with %s: JSON answer %.200q does not decode: %v", c.name, r.body, err)
				}
			}
		}
	}
}

// TestServeTrustProxy checks -trust-proxy's list: spaces after the commas
// are accepted, and a prefix of length 0, which lets every client choose
// its own key, is accepted with a warning on start.
func TestServeTrustProxy(t *testing.T) {
	for _, c := range []struct {
		trust string
		warn  bool
	}{
		{"10.0.0.0/8, 192.0.2.7", false},
		{" 10.0.0.0/8 ,2001:db8::/32 ", false},
		{"0.0.0.0/0", true},
		{"10.0.0.0/8, ::/0", true},
		{"::ffff:0.0.0.0/96", true}, // 0.0.0.0/0, as TrustProxies reads it
		{"::ffff:10.0.0.0/104", false},
		{"0.0.0.0/1", false},
	} {
		cfg, err := parseServeFlags([]string{"-trust-proxy", c.trust})
		if err != nil {
			t.Fatal(err)
		}
		d, err := newDemo(cfg, memory.MustNew(), nil)
		if err != nil {
			t.Errorf("-trust-proxy %q: %v, want it accepted", c.trust, err)
			continue
		}
		warned := len(d.warnings) > 0 && strings.Contains(d.warnings[0], "every address")
		if warned != c.warn {
			t.Errorf("-trust-proxy %q: warnings %q, want a warning that every address is trusted: %v", c.trust, d.warnings, c.warn)
		}
	}
	// The warning reaches stderr when the service starts.
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), "RATELIMIT_CMD_TEST_MAIN=1",
		"RATELIMIT_CMD_TEST_ARGS=serve -addr 127.0.0.1:0 -trust-proxy ::/0")
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer cmd.Process.Kill()
	if !bufio.NewScanner(stdout).Scan() {
		t.Fatalf("no output; stderr: %s", stderr.String())
	}
	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	io.Copy(io.Discard, stdout)
	cmd.Wait()
	if !strings.Contains(stderr.String(), "warning: -trust-proxy ::/0 trusts every address") {
		t.Errorf("serve -trust-proxy ::/0 said %q on stderr, want a warning that every client can spoof its address", stderr.String())
	}
}

// TestServeFlagErrorsShort gives serve oversized flag values: the error
// repeats at most a short prefix of each.
func TestServeFlagErrorsShort(t *testing.T) {
	long := strings.Repeat("x", 512<<10)
	for _, args := range [][]string{
		{"serve", "-limit", long},
		{"serve", "-" + long},
		{"serve", long},
		{"serve", "-trust-proxy", long},
		{"serve", "-trust-proxy", "10.0.0.0/8, " + long},
		{"serve", "-name", long},
	} {
		var stdout, stderr bytes.Buffer
		code := run(args, &stdout, &stderr, noEnv)
		if code != exitUsage || stderr.Len() > 400 || !strings.Contains(stderr.String(), " bytes)") {
			t.Errorf("ratelimit %.40s…: exit %d, %d bytes on stderr: %.300q; want exit %d, a short message giving the length", strings.Join(args, " "), code, stderr.Len(), stderr.String(), exitUsage)
		}
	}
}

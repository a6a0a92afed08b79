package httplimit_test

import (
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/ratelimitkit/ratelimit/algorithms"
	"github.com/ratelimitkit/ratelimit/httplimit"
)

func mustClientIP(t testing.TB, opts ...httplimit.IPOption) httplimit.KeyFunc {
	t.Helper()
	k, err := httplimit.ClientIP(opts...)
	if err != nil {
		t.Fatal(err)
	}
	return k
}

// keyCase is one request and the key it must get: "" means a key error.
type keyCase struct {
	remote string
	header []string // name, value pairs
	want   string
	rule   string
}

func request(c keyCase) *http.Request {
	r := httptest.NewRequest(http.MethodGet, "/", nil)
	r.RemoteAddr = c.remote
	for i := 0; i+1 < len(c.header); i += 2 {
		r.Header.Add(c.header[i], c.header[i+1])
	}
	return r
}

func checkKeys(t *testing.T, name string, key httplimit.KeyFunc, cases []keyCase) {
	t.Helper()
	for _, c := range cases {
		got, err := key(request(c))
		switch {
		case c.want == "" && !errors.Is(err, httplimit.ErrNoKey):
			t.Errorf("%s: RemoteAddr %s, %q: key %q, %v; want an ErrNoKey error (%s)", name, c.remote, c.header, got, err, c.rule)
		case c.want != "" && (err != nil || got != c.want):
			t.Errorf("%s: RemoteAddr %s, %q: key %q, %v; want %q (%s)", name, c.remote, c.header, got, err, c.want, c.rule)
		}
	}
}

func TestRemoteIP(t *testing.T) {
	xff := "X-Forwarded-For"
	checkKeys(t, "RemoteIP", httplimit.RemoteIP, []keyCase{
		{"203.0.113.9:1234", nil, "203.0.113.9", "the connection's address"},
		{"203.0.113.9:1234", []string{xff, "198.51.100.1"}, "203.0.113.9", "spoof: X-Forwarded-For from a client nobody trusts is ignored"},
		{"[2001:db8:1:2:3:4:5:6]:443", nil, "2001:db8:1:2::/64", "IPv6 grouped by /64"},
		{"[2001:db8:1:2:ffff:ffff:ffff:ffff]:443", nil, "2001:db8:1:2::/64", "every address of the /64 shares the key"},
		{"[2001:db8:1:3::1]:443", nil, "2001:db8:1:3::/64", "the next /64 is another key"},
		{"[::ffff:203.0.113.9]:80", nil, "203.0.113.9", "IPv4-mapped IPv6 counts as IPv4"},
		{"[fe80::1%eth0]:80", nil, "fe80::/64", "the zone is dropped"},
		{"unix-socket", nil, "", "a RemoteAddr that is not an address is a key error"},
		{"", nil, "", "an empty RemoteAddr is a key error"},
	})
	checkKeys(t, "ClientIP(IPv6Prefix(48), IPv4Prefix(24))",
		mustClientIP(t, httplimit.IPv6Prefix(48), httplimit.IPv4Prefix(24)), []keyCase{
			{"[2001:db8:1:2::1]:443", nil, "2001:db8:1::/48", "a wider IPv6 group"},
			{"203.0.113.9:1", nil, "203.0.113.0/24", "IPv4 grouped"},
		})
	checkKeys(t, "ClientIP(IPv6Prefix(128))", mustClientIP(t, httplimit.IPv6Prefix(128)), []keyCase{
		{"[2001:db8:1:2::1]:443", nil, "2001:db8:1:2::1", "each IPv6 address its own key"},
	})
}

func TestTrustedProxies(t *testing.T) {
	xff := "X-Forwarded-For"
	key := mustClientIP(t, httplimit.TrustProxies("10.0.0.0/8", "192.0.2.1", "2001:db8:ffff::/48"))
	checkKeys(t, "X-Forwarded-For", key, []keyCase{
		{"10.0.0.1:1", []string{xff, "203.0.113.9"}, "203.0.113.9", "one trusted proxy"},
		{"10.0.0.1:1", []string{xff, "203.0.113.9, 10.1.1.1, 192.0.2.1"}, "203.0.113.9", "a chain of trusted proxies, walked from the right"},
		{"10.0.0.1:1", []string{xff, "6.6.6.6, 203.0.113.9"}, "203.0.113.9", "spoof: an address the client prepended is ignored"},
		{"10.0.0.1:1", []string{xff, "10.9.9.9, 203.0.113.9"}, "203.0.113.9", "spoof: a trusted-looking address to the left of the client is ignored"},
		{"10.0.0.1:1", []string{xff, "garbage, 203.0.113.9"}, "203.0.113.9", "spoof: garbage to the left of the client is never read"},
		{"10.0.0.1:1", []string{xff, "6.6.6.6", xff, "203.0.113.9"}, "203.0.113.9", "several header lines are one list, the last line nearest"},
		{"203.0.113.7:1", []string{xff, "6.6.6.6"}, "203.0.113.7", "spoof: a client that is not a trusted proxy sends the header itself"},
		{"10.0.0.1:1", nil, "10.0.0.1", "a trusted address without the header is itself the client"},
		{"10.0.0.1:1", []string{xff, "10.2.2.2, 10.3.3.3"}, "10.2.2.2", "every hop trusted: the leftmost is the client"},
		{"10.0.0.1:1", []string{xff, "203.0.113.9:4711"}, "203.0.113.9", "a hop with a port"},
		{"10.0.0.1:1", []string{xff, "[2001:db8::1]:4711"}, "2001:db8::/64", "a bracketed IPv6 hop with a port, grouped"},
		{"10.0.0.1:1", []string{xff, "2001:db8::1, 2001:db8:ffff::7"}, "2001:db8::/64", "a trusted IPv6 proxy"},
		{"10.0.0.1:1", []string{xff, " 203.0.113.9 ,,  "}, "203.0.113.9", "spaces and empty elements"},
		{"10.0.0.1:1", []string{xff, "::ffff:203.0.113.9"}, "203.0.113.9", "an IPv4-mapped hop counts as IPv4"},
		{"10.0.0.1:1", []string{xff, "unknown"}, "", "a hop a trusted proxy could not name is a key error"},
		{"10.0.0.1:1", []string{xff, "203.0.113.9, nonsense"}, "", "garbage where a trusted proxy wrote is a key error"},
		{"10.0.0.1:1", []string{xff, "fe80::1%eth0"}, "", "a zone is not a client address"},
	})

	fwd := "Forwarded"
	key = mustClientIP(t, httplimit.TrustProxies("10.0.0.0/8"), httplimit.FromHeader("forwarded"))
	checkKeys(t, "Forwarded", key, []keyCase{
		{"10.0.0.1:1", []string{fwd, "for=203.0.113.9"}, "203.0.113.9", "RFC 7239 for="},
		{"10.0.0.1:1", []string{fwd, `for=192.0.2.43, for="[2001:db8:cafe::17]:4711";proto=https`}, "2001:db8:cafe::/64", "RFC 7239's own example, from the right"},
		{"10.0.0.1:1", []string{fwd, `for=6.6.6.6;by=10.0.0.1, For="203.0.113.9:80";proto=http;by=10.0.0.2`}, "203.0.113.9", "case-insensitive name, quoted value with a port"},
		{"10.0.0.1:1", []string{fwd, `for=203.0.113.9, for=10.4.4.4;by="a,b"`}, "203.0.113.9", "a comma inside a quoted string does not split"},
		{"10.0.0.1:1", []string{fwd, `proto=https;for="[2001:db8::1]"`}, "2001:db8::/64", "for= anywhere in the element"},
		{"10.0.0.1:1", []string{fwd, "for=unknown"}, "", "an unknown node is a key error"},
		{"10.0.0.1:1", []string{fwd, "for=_hidden"}, "", "an obfuscated node is a key error"},
		{"10.0.0.1:1", []string{fwd, "proto=https"}, "", "an element without for= is a key error"},
		{"10.0.0.1:1", []string{fwd, `for="203.0.113.9\"`}, "", "an escape in a quoted address is a key error"},
		{"10.0.0.1:1", []string{"X-Forwarded-For", "203.0.113.9"}, "10.0.0.1", "X-Forwarded-For is ignored when Forwarded is the header"},
		{"203.0.113.7:1", []string{fwd, "for=6.6.6.6"}, "203.0.113.7", "spoof: Forwarded from an untrusted client"},
	})
}

func TestClientIPErrors(t *testing.T) {
	for _, opt := range []httplimit.IPOption{
		httplimit.TrustProxies("10.0.0.0/33"),
		httplimit.TrustProxies("proxy.example"),
		httplimit.TrustProxies("fe80::1%eth0"),
		httplimit.IPv6Prefix(0),
		httplimit.IPv6Prefix(129),
		httplimit.IPv4Prefix(33),
		httplimit.FromHeader(""),
	} {
		if _, err := httplimit.ClientIP(opt); !errors.Is(err, httplimit.ErrInvalidConfig) {
			t.Errorf("ClientIP(bad option) = %v, want ErrInvalidConfig", err)
		}
	}
}

// TestSpoofingOverHTTP sends spoofed headers to a real server, once
// directly (the client is untrusted) and once with the test's client
// playing the trusted proxy, and reads back the key the server used.
func TestSpoofingOverHTTP(t *testing.T) {
	echoKey := func(key httplimit.KeyFunc) *httptest.Server {
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			k, err := key(r)
			if err != nil {
				http.Error(w, err.Error(), http.StatusBadRequest)
				return
			}
			io.WriteString(w, k)
		}))
		t.Cleanup(srv.Close)
		return srv
	}
	direct := echoKey(mustClientIP(t, httplimit.TrustProxies("10.0.0.0/8")))
	proxied := echoKey(mustClientIP(t, httplimit.TrustProxies("127.0.0.0/8")))
	tests := []struct {
		srv  *httptest.Server
		xff  string
		want string
		rule string
	}{
		{direct, "203.0.113.9", "127.0.0.1", "an untrusted client's X-Forwarded-For is ignored"},
		{direct, "10.0.0.1", "127.0.0.1", "claiming to be a trusted proxy changes nothing"},
		{proxied, "203.0.113.9", "203.0.113.9", "behind a trusted proxy, its last hop is the client"},
		{proxied, "6.6.6.6, 203.0.113.9", "203.0.113.9", "the client's own prefix is skipped"},
	}
	for _, tt := range tests {
		resp := get(t, tt.srv.Client(), tt.srv.URL, "X-Forwarded-For", tt.xff)
		if resp.body != tt.want {
			t.Errorf("X-Forwarded-For %q: key %q, want %q (%s)", tt.xff, resp.body, tt.want, tt.rule)
		}
	}
}

// TestIPv6OverHTTP: clients of one /64 share a limit over a real IPv6
// loopback connection.
func TestIPv6OverHTTP(t *testing.T) {
	l, err := net.Listen("tcp6", "[::1]:0")
	if err != nil {
		t.Skipf("no IPv6 loopback: %v", err)
	}
	lim := newLimiter(t, algorithms.FixedWindow(2, time.Hour))
	mw, err := httplimit.New([]httplimit.Rule{{Limiter: lim}})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewUnstartedServer(mw.Handler(ok))
	srv.Listener.Close()
	srv.Listener = l
	srv.Start()
	defer srv.Close()
	if !strings.Contains(srv.URL, "[::1]") {
		t.Fatalf("server URL %s is not IPv6", srv.URL)
	}
	if got := statuses(t, srv, 3); got != "[200 200 429]" {
		t.Errorf("three requests from ::1 = %v, want [200 200 429]", got)
	}
}

// FuzzClientIP: whatever the headers say, the key function returns a key
// or an ErrNoKey error, and a key never comes from left of an untrusted
// hop.
func FuzzClientIP(f *testing.F) {
	f.Add("10.0.0.1:1", "203.0.113.9, 10.0.0.2", `for=192.0.2.43, for="[2001:db8:cafe::17]:4711"`)
	f.Add("[::1]:1", `"", ,;;==`, `for="\"`)
	xff := mustClientIP(f, httplimit.TrustProxies("10.0.0.0/8", "::1/128"))
	fwd := mustClientIP(f, httplimit.TrustProxies("10.0.0.0/8", "::1/128"), httplimit.FromHeader("Forwarded"))
	f.Fuzz(func(t *testing.T, remote, xffValue, fwdValue string) {
		r := httptest.NewRequest(http.MethodGet, "/", nil)
		r.RemoteAddr = remote
		r.Header.Set("X-Forwarded-For", xffValue)
		r.Header.Set("Forwarded", fwdValue)
		for _, key := range []httplimit.KeyFunc{xff, fwd} {
			k, err := key(r)
			if err != nil && !errors.Is(err, httplimit.ErrNoKey) {
				t.Fatalf("key error %v does not wrap ErrNoKey", err)
			}
			if err == nil && k == "" {
				t.Fatal("empty key without an error")
			}
		}
	})
}

// TestTrustProxiesSpaces checks that spaces around each trusted proxy are
// ignored, as a list split at its commas ("10.0.0.0/8, 192.0.2.7") has.
func TestTrustProxiesSpaces(t *testing.T) {
	key := mustClientIP(t, httplimit.TrustProxies(" 10.0.0.0/8", "192.0.2.7 ", "\t2001:db8::/32 "))
	checkKeys(t, "spaces", key, []keyCase{
		{"10.1.2.3:1", []string{"X-Forwarded-For", "203.0.113.9"}, "203.0.113.9", "10.0.0.0/8 trusted despite the leading space"},
		{"192.0.2.7:1", []string{"X-Forwarded-For", "203.0.113.9"}, "203.0.113.9", "192.0.2.7 trusted despite the trailing space"},
		{"[2001:db8::1]:1", []string{"X-Forwarded-For", "203.0.113.9"}, "203.0.113.9", "2001:db8::/32 trusted despite the tab"},
	})
}

// TestKeyErrorsShort checks that a key or configuration error repeats at
// most a short prefix of an oversized input: a header of a megabyte would
// otherwise reach every log line that reports the error.
func TestKeyErrorsShort(t *testing.T) {
	long := strings.Repeat("z", 1<<20)
	key := mustClientIP(t, httplimit.TrustProxies("10.0.0.0/8"))
	_, hopErr := key(request(keyCase{remote: "10.0.0.1:1", header: []string{"X-Forwarded-For", long}}))
	_, addrErr := key(request(keyCase{remote: long}))
	_, cfgErr := httplimit.ClientIP(httplimit.TrustProxies(long))
	for _, err := range []error{hopErr, addrErr, cfgErr} {
		if err == nil || len(err.Error()) > 200 || !strings.Contains(err.Error(), "(1048576 bytes)") {
			t.Errorf("error for a 1 MiB input: %.300q (%d bytes), want a short one giving the length", err, len(err.Error()))
		}
	}
}

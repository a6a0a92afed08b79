package httplimit

import (
	"errors"
	"fmt"
	"net/http"
	"net/netip"
	"net/textproto"
	"strconv"
	"strings"

	"github.com/ratelimitkit/ratelimit/internal/echo"
)

// KeyFunc returns the key a request is counted under. An error (wrapping
// ErrNoKey for the built-in ones) means the key cannot be determined; the
// middleware then answers with its key-error handler.
type KeyFunc func(*http.Request) (string, error)

// ErrNoKey reports a request whose key cannot be determined.
var ErrNoKey = errors.New("httplimit: no key")

// RemoteIP is a KeyFunc that keys a request by the IP address of the
// connection (Request.RemoteAddr), IPv6 addresses grouped by /64: ClientIP
// with no options. It is the rules' default key, right for a server that
// clients reach directly; behind a proxy every request would share the
// proxy's key: use ClientIP with TrustProxies there.
func RemoteIP(r *http.Request) (string, error) { return remoteIP.key(r) }

// remoteIP is ClientIP's default configuration.
var remoteIP = newIPKey()

func newIPKey() *ipKey { return &ipKey{header: "X-Forwarded-For", bits4: 32, bits6: 64} }

// IPOption configures ClientIP.
type IPOption func(*ipKey) error

// TrustProxies names the proxies, as addresses or CIDR prefixes
// ("10.0.0.0/8", "2001:db8::/32", "192.0.2.7"; spaces around each are
// ignored), whose word about the client's address is believed. Without it,
// proxy headers are ignored. A prefix of length 0 ("0.0.0.0/0", "::/0")
// trusts every address, so that any client can name its own address.
func TrustProxies(cidrs ...string) IPOption {
	return func(k *ipKey) error {
		for _, c := range cidrs {
			c = strings.TrimSpace(c) // "10.0.0.0/8, 192.0.2.7" split at the commas
			p, err := netip.ParsePrefix(c)
			if err != nil {
				a, aerr := netip.ParseAddr(c)
				if aerr != nil || a.Zone() != "" {
					return fmt.Errorf("%w: trusted proxy %s is neither an address nor a CIDR prefix", ErrInvalidConfig, echo.Quote(c))
				}
				p = netip.PrefixFrom(a.Unmap(), a.Unmap().BitLen())
			}
			if p.Addr().Is4In6() {
				p = netip.PrefixFrom(p.Addr().Unmap(), max(p.Bits()-96, 0))
			}
			k.trusted = append(k.trusted, p.Masked())
		}
		return nil
	}
}

// FromHeader names the header the trusted proxies write: "X-Forwarded-For"
// (the default) or "Forwarded" (RFC 7239, whose for= parameters are read).
// Any other name is read as a comma-separated list of addresses, like
// X-Forwarded-For.
func FromHeader(name string) IPOption {
	return func(k *ipKey) error {
		if name == "" {
			return fmt.Errorf("%w: empty header name", ErrInvalidConfig)
		}
		k.header = textproto.CanonicalMIMEHeaderKey(name)
		return nil
	}
}

// IPv6Prefix groups IPv6 clients by their first bits bits (default 64, a
// single site's subnet), so that one host cannot rotate through the
// addresses of its subnet to escape its limit. 128 keys each address.
func IPv6Prefix(bits int) IPOption {
	return func(k *ipKey) error {
		if bits < 1 || bits > 128 {
			return fmt.Errorf("%w: IPv6 prefix /%d outside 1..128", ErrInvalidConfig, bits)
		}
		k.bits6 = bits
		return nil
	}
}

// IPv4Prefix groups IPv4 clients by their first bits bits (default 32:
// each address its own key).
func IPv4Prefix(bits int) IPOption {
	return func(k *ipKey) error {
		if bits < 1 || bits > 32 {
			return fmt.Errorf("%w: IPv4 prefix /%d outside 1..32", ErrInvalidConfig, bits)
		}
		k.bits4 = bits
		return nil
	}
}

// ClientIP returns a KeyFunc that keys a request by its client's IP
// address: the connection's address, or, when that is a trusted proxy
// (TrustProxies), the address the proxies report. The proxy header is
// walked from the right, the end the nearest proxy appended to, and the
// first address that is not a trusted proxy is the client: entries to its
// left were written by the client or by proxies nobody vouches for, and
// are ignored, so a client cannot spoof its key by sending the header
// itself. When every hop is trusted, the leftmost one is the client.
//
// Keys are the address in its canonical text form ("192.0.2.7"), or the
// masked prefix when addresses are grouped ("2001:db8:1:2::/64"). IPv4
// addresses mapped into IPv6 count as IPv4. A hop that is not an address
// ("unknown", an obfuscated RFC 7239 identifier, garbage) where a trusted
// proxy should have named the client is an error wrapping ErrNoKey.
func ClientIP(opts ...IPOption) (KeyFunc, error) {
	k := newIPKey()
	for _, opt := range opts {
		if err := opt(k); err != nil {
			return nil, err
		}
	}
	k.forwarded = k.header == "Forwarded"
	return k.key, nil
}

// ipKey is ClientIP's configuration.
type ipKey struct {
	trusted      []netip.Prefix
	header       string // canonical
	forwarded    bool   // header is RFC 7239 Forwarded
	bits4, bits6 int
}

func (k *ipKey) key(r *http.Request) (string, error) {
	addr, err := netip.ParseAddrPort(r.RemoteAddr)
	if err != nil {
		return "", fmt.Errorf("%w: RemoteAddr %s is not an IP address and port", ErrNoKey, echo.Quote(r.RemoteAddr))
	}
	client := addr.Addr().Unmap().WithZone("")
	if !k.trusts(client) {
		return k.format(client), nil
	}
	values := r.Header[k.header]
	for i := len(values) - 1; i >= 0; i-- {
		rest := values[i]
		for rest != "" {
			var hop string
			rest, hop = lastElement(rest)
			hop = strings.TrimSpace(hop)
			if hop == "" {
				continue // an empty list element, allowed by RFC 9110's list syntax
			}
			a, ok := k.parseHop(hop)
			if !ok {
				return "", fmt.Errorf("%w: %s hop %s is not an IP address", ErrNoKey, k.header, echo.Quote(hop))
			}
			client = a
			if !k.trusts(a) {
				return k.format(a), nil
			}
		}
	}
	return k.format(client), nil
}

// trusts reports whether a is a trusted proxy.
func (k *ipKey) trusts(a netip.Addr) bool {
	for _, p := range k.trusted {
		if p.Contains(a) {
			return true
		}
	}
	return false
}

// format returns a's key: the address, or its prefix when grouped.
func (k *ipKey) format(a netip.Addr) string {
	bits := k.bits4
	if a.Is6() {
		bits = k.bits6
	}
	var buf [64]byte
	if bits == a.BitLen() {
		return string(a.AppendTo(buf[:0]))
	}
	p, _ := a.Prefix(bits) // bits is within 1..BitLen
	b := p.Addr().AppendTo(buf[:0])
	b = append(b, '/')
	b = strconv.AppendInt(b, int64(bits), 10)
	return string(b)
}

// parseHop returns the address of one hop of the proxy header.
func (k *ipKey) parseHop(hop string) (netip.Addr, bool) {
	if k.forwarded {
		var ok bool
		if hop, ok = forwardedFor(hop); !ok {
			return netip.Addr{}, false
		}
	}
	return parseNode(hop)
}

// parseNode parses an address as proxies write it: "192.0.2.7",
// "192.0.2.7:4711", "2001:db8::1", "[2001:db8::1]" or
// "[2001:db8::1]:4711". Zones are not addresses a client can have.
func parseNode(s string) (netip.Addr, bool) {
	if a, err := netip.ParseAddr(s); err == nil {
		return a.Unmap(), a.Zone() == ""
	}
	if strings.HasPrefix(s, "[") {
		end := strings.IndexByte(s, ']')
		if end < 0 || (end+1 < len(s) && !validPort(s[end+1:])) {
			return netip.Addr{}, false
		}
		a, err := netip.ParseAddr(s[1:end])
		if err != nil || !a.Is6() || a.Zone() != "" {
			return netip.Addr{}, false
		}
		return a.Unmap(), true
	}
	if i := strings.LastIndexByte(s, ':'); i > 0 && validPort(s[i:]) {
		a, err := netip.ParseAddr(s[:i])
		if err == nil && a.Is4() {
			return a, true
		}
	}
	return netip.Addr{}, false
}

// validPort reports whether s is ":" followed by 1 to 5 digits (RFC 7239
// also allows an obfuscated port, "_" and letters, which is as good).
func validPort(s string) bool {
	if len(s) < 2 || s[0] != ':' {
		return false
	}
	for _, c := range []byte(s[1:]) {
		ok := '0' <= c && c <= '9' || c == '_' || 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z'
		if !ok {
			return false
		}
	}
	return true
}

// lastElement splits a comma-separated header value at its last comma
// outside a quoted string, returning what precedes and what follows it.
func lastElement(s string) (rest, elem string) {
	quoted := false
	for i := len(s) - 1; i >= 0; i-- {
		switch s[i] {
		case '"':
			// A quote preceded by an odd number of backslashes is escaped.
			n := 0
			for j := i - 1; j >= 0 && s[j] == '\\'; j-- {
				n++
			}
			if n%2 == 0 {
				quoted = !quoted
			}
		case ',':
			if !quoted {
				return s[:i], s[i+1:]
			}
		}
	}
	return "", s
}

// forwardedFor returns the node of an RFC 7239 forwarded-element's for=
// parameter ("for=192.0.2.60;proto=http;by=203.0.113.43"), unquoted.
func forwardedFor(elem string) (string, bool) {
	for elem != "" {
		var pair string
		pair, elem, _ = strings.Cut(elem, ";")
		name, value, ok := strings.Cut(strings.TrimSpace(pair), "=")
		if !ok || !strings.EqualFold(strings.TrimSpace(name), "for") {
			continue
		}
		value = strings.TrimSpace(value)
		if len(value) >= 2 && value[0] == '"' && value[len(value)-1] == '"' {
			value = value[1 : len(value)-1]
			if strings.IndexByte(value, '\\') >= 0 {
				return "", false // no address needs escaping
			}
		}
		return value, true
	}
	return "", false
}

// Header returns a KeyFunc that keys a request by the value of the named
// header, such as an API key that an earlier handler or the gateway has
// already authenticated. A missing or empty header is an error wrapping
// ErrNoKey. Never key by a header the client may set freely unless
// spending someone else's quota is harmless.
func Header(name string) KeyFunc {
	canonical := textproto.CanonicalMIMEHeaderKey(name)
	return func(r *http.Request) (string, error) {
		v := r.Header[canonical]
		if len(v) == 0 || v[0] == "" {
			return "", fmt.Errorf("%w: header %s is missing", ErrNoKey, canonical)
		}
		return v[0], nil
	}
}

// ContextValue returns a KeyFunc that keys a request by the value stored
// under key in its context, such as the user an authentication middleware
// put there. The value must be a non-empty string or a fmt.Stringer;
// anything else, or nothing, is an error wrapping ErrNoKey.
func ContextValue(key any) KeyFunc {
	return func(r *http.Request) (string, error) {
		var s string
		switch v := r.Context().Value(key).(type) {
		case string:
			s = v
		case fmt.Stringer:
			s = v.String()
		case nil:
			return "", fmt.Errorf("%w: no value in the request context", ErrNoKey)
		default:
			return "", fmt.Errorf("%w: context value of type %T is neither a string nor a fmt.Stringer", ErrNoKey, v)
		}
		if s == "" {
			return "", fmt.Errorf("%w: empty value in the request context", ErrNoKey)
		}
		return s, nil
	}
}

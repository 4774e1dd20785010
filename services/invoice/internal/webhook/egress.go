package webhook

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// Errors of the egress policy, each wrapped in a RefusedError.
var (
	// ErrAddressRefused: the endpoint's address is loopback, link-local,
	// private, unique-local, unspecified, multicast, shared (CGNAT) or
	// another special-purpose range, and not in WEBHOOK_ALLOW_NETS.
	ErrAddressRefused = errors.New("webhook endpoint address refused")
	// ErrHTTPSRequired: an http:// endpoint while WEBHOOK_ALLOW_HTTP is off.
	ErrHTTPSRequired = errors.New("webhook endpoint must be https")
)

// RefusedError says why the egress policy refuses an endpoint, at its
// registration or at a connection to it.
type RefusedError struct {
	Kind   error // ErrAddressRefused or ErrHTTPSRequired
	Reason string
}

func (e *RefusedError) Error() string { return e.Kind.Error() + ": " + e.Reason }

// Unwrap makes errors.Is(err, ErrAddressRefused) (or ErrHTTPSRequired) hold.
func (e *RefusedError) Unwrap() error { return e.Kind }

// Resolver looks host names up (*net.Resolver is one); tests inject theirs.
type Resolver interface {
	LookupNetIP(ctx context.Context, network, host string) ([]netip.Addr, error)
}

// lookupTimeout bounds the look-up of a host name at registration.
const lookupTimeout = 3 * time.Second

// Egress is where deliveries may go: https only (unless AllowHTTP), and
// only to public addresses, or to the nets explicitly allowed. Every
// connection is checked on the address actually dialled (the dialer's
// Control, after resolution and before connect(2)), so a name that resolved
// to a public address at registration and to a private one at delivery
// (DNS rebinding) is refused too, before any packet leaves.
type Egress struct {
	allow     []netip.Prefix
	allowHTTP bool
	proxy     *url.URL // nil: connect directly (never a proxy from the environment)
	resolver  Resolver
	// connect, set by tests, is called with each address the policy let
	// through, just before connect(2); an error stops the connection.
	connect func(address string) error
}

// NewEgress is the policy of cfg (WEBHOOK_ALLOW_NETS, WEBHOOK_ALLOW_HTTP,
// WEBHOOK_PROXY), resolving names with r (nil: the system's resolver).
func NewEgress(cfg Config, r Resolver) *Egress {
	if r == nil {
		r = net.DefaultResolver
	}
	allow := make([]netip.Prefix, len(cfg.AllowNets))
	for i, p := range cfg.AllowNets {
		allow[i] = unmapPrefix(p)
	}
	return &Egress{allow: allow, allowHTTP: cfg.AllowHTTP, proxy: cfg.Proxy, resolver: r}
}

// unmapPrefix writes an IPv4-mapped prefix (::ffff:10.0.0.0/104) as IPv4,
// the form CheckAddr compares.
func unmapPrefix(p netip.Prefix) netip.Prefix {
	if p.Addr().Is4In6() && p.Bits() >= 96 {
		return netip.PrefixFrom(p.Addr().Unmap(), p.Bits()-96).Masked()
	}
	return p.Masked()
}

// refusedNets are the special-purpose ranges refused beside those netip
// classifies (loopback, link-local, private, multicast, unspecified).
var refusedNets = []struct {
	net  netip.Prefix
	what string
}{
	{netip.MustParsePrefix("0.0.0.0/8"), "a \"this network\" address"},
	{netip.MustParsePrefix("100.64.0.0/10"), "a shared (CGNAT) address"},
	{netip.MustParsePrefix("192.0.0.0/24"), "an IETF protocol address"},
	{netip.MustParsePrefix("198.18.0.0/15"), "a benchmarking address"},
	{netip.MustParsePrefix("240.0.0.0/4"), "a reserved or broadcast address"},
	{netip.MustParsePrefix("::/96"), "an IPv4-compatible address"},
	{netip.MustParsePrefix("100::/64"), "a discard address"},
	{netip.MustParsePrefix("fec0::/10"), "a site-local address"},
}

// Prefixes that carry an IPv4 address in an IPv6 one: the IPv4 address is
// what the packet reaches, so it is classified.
var (
	nat64     = []netip.Prefix{netip.MustParsePrefix("64:ff9b::/96"), netip.MustParsePrefix("64:ff9b:1::/48")}
	sixToFour = netip.MustParsePrefix("2002::/16")
)

// addrClass says what kind of non-public address a is ("": a public one).
func addrClass(a netip.Addr) string {
	a = a.WithZone("").Unmap()
	switch {
	case !a.IsValid():
		return "not an address"
	case a.IsUnspecified():
		return "the unspecified address"
	case a.IsLoopback():
		return "a loopback address"
	case a.IsLinkLocalUnicast():
		return "a link-local address" // 169.254.0.0/16 (cloud metadata at 169.254.169.254), fe80::/10
	case a.IsMulticast():
		return "a multicast address"
	case a.IsPrivate():
		return "a private address" // 10/8, 172.16/12, 192.168/16, fc00::/7 (unique-local)
	}
	for _, r := range refusedNets {
		if r.net.Contains(a) {
			return r.what
		}
	}
	for _, p := range nat64 {
		if p.Contains(a) {
			b := a.As16()
			if what := addrClass(netip.AddrFrom4([4]byte{b[12], b[13], b[14], b[15]})); what != "" {
				return "NAT64 of " + what
			}
		}
	}
	if sixToFour.Contains(a) {
		b := a.As16()
		if what := addrClass(netip.AddrFrom4([4]byte{b[2], b[3], b[4], b[5]})); what != "" {
			return "6to4 of " + what
		}
	}
	return ""
}

// CheckAddr refuses a if it is not a public address and not in an allowed
// net. host names it in the reason (the URL's host, or "" for a dial).
func (e *Egress) CheckAddr(host string, a netip.Addr) error {
	what := addrClass(a)
	if what == "" {
		return nil
	}
	plain := a.WithZone("").Unmap()
	for _, p := range e.allow {
		if p.Contains(plain) {
			return nil
		}
	}
	reason := fmt.Sprintf("%s is %s (allow a net explicitly with WEBHOOK_ALLOW_NETS)", a, what)
	if host != "" && host != a.String() {
		reason = host + " resolves to " + reason
	}
	return &RefusedError{Kind: ErrAddressRefused, Reason: reason}
}

// checkScheme refuses http unless AllowHTTP.
func (e *Egress) checkScheme(scheme string) error {
	if scheme == "http" && !e.allowHTTP {
		return &RefusedError{Kind: ErrHTTPSRequired, Reason: "http:// is refused (WEBHOOK_ALLOW_HTTP=true allows it)"}
	}
	return nil
}

// CheckEndpoint is the registration's check of u (a URL CheckURL accepted):
// its scheme, an IP literal host, and every address a host name resolves
// to now. A name that does not resolve is let through: the connection's
// check (Control) is the one that cannot be bypassed, this one tells a
// tenant early.
func (e *Egress) CheckEndpoint(ctx context.Context, u *url.URL) error {
	if err := e.checkScheme(u.Scheme); err != nil {
		return err
	}
	host := u.Hostname()
	if a, err := netip.ParseAddr(host); err == nil {
		return e.CheckAddr(host, a)
	}
	if numericHost(host) {
		return &RefusedError{Kind: ErrAddressRefused, Reason: host + " is an IPv4 address in a non-standard form"}
	}
	ctx, cancel := context.WithTimeout(ctx, lookupTimeout)
	defer cancel()
	addrs, err := e.resolver.LookupNetIP(ctx, "ip", host)
	if err != nil {
		return nil
	}
	for _, a := range addrs {
		if err := e.CheckAddr(host, a); err != nil {
			return err
		}
	}
	return nil
}

// numericHost reports whether host is made of numbers only (2130706433,
// 127.1, 0x7f.0.0.1, 0177.0.0.1): some resolvers read those as IPv4
// addresses, which netip does not.
func numericHost(host string) bool {
	for _, label := range strings.Split(strings.TrimSuffix(host, "."), ".") {
		l := strings.ToLower(label)
		base := 10
		if strings.HasPrefix(l, "0x") {
			l, base = l[2:], 16
		}
		if _, err := strconv.ParseUint(l, base, 64); err != nil && l != "" {
			return false
		}
	}
	return true
}

// control is the dialer's Control: it runs on every connection after the
// address is resolved and the socket made, before connect(2), on the
// address actually dialled.
func (e *Egress) control(_, address string, _ syscall.RawConn) error {
	ap, err := netip.ParseAddrPort(address)
	if err != nil {
		return &RefusedError{Kind: ErrAddressRefused, Reason: fmt.Sprintf("dial to %q, not an IP address", address)}
	}
	if err := e.CheckAddr("", ap.Addr()); err != nil {
		return err
	}
	if e.connect != nil {
		return e.connect(address)
	}
	return nil
}

// Client is the delivery's HTTP client: every connection through the
// checked dialer, no proxy unless WEBHOOK_PROXY (never one from the
// environment), http:// refused unless allowed, redirects answers, never
// followed (a receiver answers at the URL it registered).
func (e *Egress) Client() *http.Client {
	checked := &net.Dialer{Timeout: 30 * time.Second, KeepAlive: 30 * time.Second, Control: e.control}
	plain := &net.Dialer{Timeout: 30 * time.Second, KeepAlive: 30 * time.Second}
	tr := &http.Transport{
		DialContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
			if e.proxy != nil && addr == proxyAddr(e.proxy) {
				// The operator's proxy, which filters the endpoints' addresses itself.
				return plain.DialContext(ctx, network, addr)
			}
			return e.dial(ctx, checked, network, addr)
		},
		ForceAttemptHTTP2:     true,
		MaxIdleConns:          100,
		IdleConnTimeout:       90 * time.Second,
		TLSHandshakeTimeout:   10 * time.Second,
		ExpectContinueTimeout: time.Second,
	}
	if e.proxy != nil {
		tr.Proxy = http.ProxyURL(e.proxy)
	}
	return &http.Client{
		Transport:     schemeCheck{e: e, next: tr},
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
	}
}

// dial resolves addr's host with the policy's resolver and dials each
// address in turn with d (whose Control checks it). All refused: the
// refusal; else the first other error.
func (e *Egress) dial(ctx context.Context, d *net.Dialer, network, addr string) (net.Conn, error) {
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return nil, err
	}
	var addrs []netip.Addr
	if a, err := netip.ParseAddr(host); err == nil {
		addrs = []netip.Addr{a}
	} else if addrs, err = e.resolver.LookupNetIP(ctx, ipNetwork(network), host); err != nil {
		return nil, err
	} else if len(addrs) == 0 {
		return nil, fmt.Errorf("look up %s: no address", host)
	}
	var refused, other error
	for _, a := range addrs {
		c, err := d.DialContext(ctx, network, net.JoinHostPort(a.String(), port))
		if err == nil {
			return c, nil
		}
		if errors.Is(err, ErrAddressRefused) {
			refused = cmp.Or(refused, err)
		} else {
			other = cmp.Or(other, err)
		}
		if ctx.Err() != nil {
			break
		}
	}
	return nil, cmp.Or(other, refused)
}

func ipNetwork(network string) string {
	switch network {
	case "tcp4":
		return "ip4"
	case "tcp6":
		return "ip6"
	}
	return "ip"
}

// proxyAddr is the host:port the transport dials for proxy u.
func proxyAddr(u *url.URL) string {
	port := u.Port()
	if port == "" {
		port = map[string]string{"https": "443", "socks5": "1080"}[u.Scheme]
		if port == "" {
			port = "80"
		}
	}
	return net.JoinHostPort(u.Hostname(), port)
}

// schemeCheck refuses a request whose scheme the policy refuses (an
// endpoint registered while http was allowed, delivered after it no longer
// is), before any connection.
type schemeCheck struct {
	e    *Egress
	next http.RoundTripper
}

func (s schemeCheck) RoundTrip(r *http.Request) (*http.Response, error) {
	if err := s.e.checkScheme(r.URL.Scheme); err != nil {
		if r.Body != nil {
			r.Body.Close()
		}
		return nil, err
	}
	return s.next.RoundTrip(r)
}

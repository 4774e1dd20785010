package webhook_test

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/usagebilling/billing/pkg/envelope"
	"github.com/usagebilling/billing/pkg/service"
	. "github.com/usagebilling/billing/services/invoice/internal/invoicetest"
	"github.com/usagebilling/billing/services/invoice/internal/webhook"
	"github.com/usagebilling/billing/testkit/pgtest"
)

// resolver answers look-ups from a function of the host: no DNS is asked.
type resolver func(host string) ([]netip.Addr, error)

func (r resolver) LookupNetIP(_ context.Context, _, host string) ([]netip.Addr, error) {
	return r(host)
}

// table resolves the names it has, each to its addresses.
func table(m map[string]string) resolver {
	return func(host string) ([]netip.Addr, error) {
		v, ok := m[host]
		if !ok {
			return nil, fmt.Errorf("lookup %s: no such host", host)
		}
		var out []netip.Addr
		for _, a := range strings.Split(v, ",") {
			out = append(out, netip.MustParseAddr(a))
		}
		return out, nil
	}
}

// connects records each address the policy let a connection go to, and
// stops it there, just before connect(2): no packet leaves in these tests,
// whatever the policy decides.
type connects struct {
	mu   sync.Mutex
	seen []string
}

func (c *connects) hook(address string) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.seen = append(c.seen, address)
	return fmt.Errorf("test: the connection to %s stops before connect(2)", address)
}

// only fails the test if a connection went past the policy to another
// address than allowed.
func (c *connects) only(t *testing.T, allowed ...string) {
	t.Helper()
	for _, a := range c.addresses() {
		if !slices.Contains(allowed, a) {
			t.Fatalf("a connection to %s went past the policy (allowed: %v)", a, allowed)
		}
	}
}

func (c *connects) addresses() []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return slices.Clone(c.seen)
}

// strict is the default policy: https only, public addresses only.
func strict() webhook.Config { c := testConfig(); c.AllowNets, c.AllowHTTP = nil, false; return c }

// Every kind of address that is not public is refused, in each of its
// spellings (IPv4-mapped, zoned, NAT64 and 6to4 carrying one), unless an
// allowed net holds it; public addresses pass.
func TestEgressRefusesAddressesThatAreNotPublic(t *testing.T) {
	t.Parallel()
	refused := []string{
		"127.0.0.1", "127.255.255.254", "::1", "::ffff:127.0.0.1", // loopback
		"169.254.169.254", "169.254.0.1", "fe80::1", "fe80::1%eth0", "::ffff:169.254.169.254", // link-local, cloud metadata
		"10.0.0.1", "172.16.0.1", "172.31.255.255", "192.168.1.1", "::ffff:10.0.0.1", "::ffff:192.168.0.1", // private
		"fc00::1", "fd12:3456::1", // unique-local
		"0.0.0.0", "::", "0.1.2.3", // unspecified, "this network"
		"224.0.0.1", "239.255.255.250", "ff02::1", "ff05::2", // multicast
		"100.64.0.1", "100.127.255.254", "::ffff:100.64.0.1", // shared (CGNAT)
		"255.255.255.255", "240.0.0.1", "198.18.0.1", "192.0.0.8", // broadcast, reserved, benchmarking, IETF
		"::10.0.0.1", "fec0::1", "100::1", // IPv4-compatible, site-local, discard
		"64:ff9b::a00:1", "64:ff9b::a9fe:a9fe", "2002:a00:1::1", "2002:7f00:1::1", // NAT64 and 6to4 of private, link-local, loopback
	}
	public := []string{"93.184.216.34", "8.8.8.8", "1.1.1.1", "100.63.255.255", "100.128.0.1", "172.32.0.1",
		"2606:2800:220:1:248:1893:25c8:1946", "2001:4860:4860::8888", "::ffff:93.184.216.34", "64:ff9b::808:808", "2002:808:808::1"}
	e := webhook.NewEgress(strict(), table(nil))
	for _, a := range refused {
		if err := e.CheckAddr("", netip.MustParseAddr(a)); !errors.Is(err, webhook.ErrAddressRefused) {
			t.Errorf("%s: %v, want refused", a, err)
		}
	}
	for _, a := range public {
		if err := e.CheckAddr("", netip.MustParseAddr(a)); err != nil {
			t.Errorf("%s: %v, want allowed", a, err)
		}
	}

	cfg := strict()
	cfg.AllowNets = []netip.Prefix{netip.MustParsePrefix("127.0.0.0/8"), netip.MustParsePrefix("::1/128")}
	local := webhook.NewEgress(cfg, table(nil))
	for _, a := range []string{"127.0.0.1", "127.1.2.3", "::1", "::ffff:127.0.0.1"} {
		if err := local.CheckAddr("", netip.MustParseAddr(a)); err != nil {
			t.Errorf("allowed 127.0.0.0/8 and ::1/128: %s: %v, want allowed", a, err)
		}
	}
	for _, a := range []string{"0.0.0.0", "10.0.0.1", "169.254.169.254", "::ffff:10.0.0.1", "fe80::1"} {
		if err := local.CheckAddr("", netip.MustParseAddr(a)); !errors.Is(err, webhook.ErrAddressRefused) {
			t.Errorf("allowed 127.0.0.0/8 and ::1/128: %s: %v, want refused", a, err)
		}
	}
}

// The settings: WEBHOOK_ALLOW_NETS is a list of CIDRs, WEBHOOK_PROXY an
// http(s) URL; anything else stops the service at start, named.
func TestEgressSettings(t *testing.T) {
	t.Parallel()
	c, err := webhook.LoadConfig(service.NewEnvFrom(map[string]string{
		"WEBHOOK_ALLOW_NETS": "127.0.0.0/8, ::1/128", "WEBHOOK_ALLOW_HTTP": "true", "WEBHOOK_PROXY": "http://smokescreen:4750"}))
	if err != nil {
		t.Fatal(err)
	}
	if len(c.AllowNets) != 2 || c.AllowNets[1] != netip.MustParsePrefix("::1/128") || !c.AllowHTTP || c.Proxy.Host != "smokescreen:4750" {
		t.Fatalf("config %+v", c)
	}
	d, err := webhook.LoadConfig(service.NewEnvFrom(nil))
	if err != nil || d.AllowNets != nil || d.AllowHTTP || d.Proxy != nil {
		t.Fatalf("defaults %+v %v, want nothing allowed beyond https to public addresses", d, err)
	}
	_, err = webhook.LoadConfig(service.NewEnvFrom(map[string]string{"WEBHOOK_ALLOW_NETS": "127.0.0.1,10.0.0.0/33", "WEBHOOK_PROXY": "smokescreen:4750"}))
	for _, want := range []string{`"127.0.0.1"`, `"10.0.0.0/33"`, "WEBHOOK_PROXY"} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("bad settings: %v, want %s named", err, want)
		}
	}
}

// Registration refuses, with nothing written, a URL whose host is, or
// resolves to, an address that is not public (any of the names'
// addresses), a numeric host some resolvers read as IPv4, and http while
// only https is allowed. A public name, or one that does not resolve yet,
// is registered (the connection's check still applies to it).
func TestRegistrationRefusesAddressesThatAreNotPublic(t *testing.T) {
	t.Parallel()
	pool := pgtest.NewPool(t, Template)
	names := table(map[string]string{
		"erp.example": "93.184.216.34", "metadata.example": "169.254.169.254", "intranet.example": "10.0.0.1",
		"mixed.example": "93.184.216.34,192.168.1.10", "v6.example": "2606:2800:220:1:248:1893:25c8:1946,fd00::1",
		"localhost": "127.0.0.1,::1", "cgnat.example": "100.64.1.1",
	})
	eps := webhook.NewEndpoints(pool, 100, webhook.NewEgress(strict(), names), nil)
	for _, tc := range []struct {
		url  string
		want error
	}{
		{"https://127.0.0.1/hooks", webhook.ErrAddressRefused},
		{"https://169.254.169.254/latest/meta-data/", webhook.ErrAddressRefused},
		{"https://10.0.0.1:8443/x", webhook.ErrAddressRefused},
		{"https://[::1]/x", webhook.ErrAddressRefused},
		{"https://[::ffff:10.0.0.1]/x", webhook.ErrAddressRefused},
		{"https://[::ffff:a9fe:a9fe]/x", webhook.ErrAddressRefused},
		{"https://[fe80::1%25eth0]/x", webhook.ErrAddressRefused},
		{"https://[fd00::1]/x", webhook.ErrAddressRefused},
		{"https://0.0.0.0/x", webhook.ErrAddressRefused},
		{"https://[::]/x", webhook.ErrAddressRefused},
		{"https://224.0.0.1/x", webhook.ErrAddressRefused},
		{"https://100.64.0.1/x", webhook.ErrAddressRefused},
		{"https://2130706433/x", webhook.ErrAddressRefused},
		{"https://127.1/x", webhook.ErrAddressRefused},
		{"https://0x7f.0.0.1/x", webhook.ErrAddressRefused},
		{"https://metadata.example/latest", webhook.ErrAddressRefused},
		{"https://intranet.example/hooks", webhook.ErrAddressRefused},
		{"https://mixed.example/hooks", webhook.ErrAddressRefused},
		{"https://v6.example/hooks", webhook.ErrAddressRefused},
		{"https://localhost:9000/hooks", webhook.ErrAddressRefused},
		{"https://cgnat.example/hooks", webhook.ErrAddressRefused},
		{"http://erp.example/hooks", webhook.ErrHTTPSRequired},
	} {
		_, err := eps.Create(t.Context(), "acme", tc.url, "test")
		var refused *webhook.RefusedError
		if !errors.Is(err, tc.want) || !errors.As(err, &refused) {
			t.Errorf("%s: %v, want %v", tc.url, err, tc.want)
		}
	}
	if got, err := eps.List(t.Context(), "acme", [16]byte{}, 100); err != nil || len(got) != 0 {
		t.Fatalf("after refusals: %d endpoints (%v), want none written", len(got), err)
	}
	for _, u := range []string{"https://erp.example/hooks", "https://not-published-yet.example/hooks", "https://93.184.216.34/x",
		"https://cafe.example/x"} {
		if _, err := eps.Create(t.Context(), "acme", u, "test"); err != nil {
			t.Errorf("%s: %v, want registered", u, err)
		}
	}
}

// runStrict runs a worker with the default policy, names resolved by r, and
// every connection the policy lets through stopped before connect(2).
func runStrict(t *testing.T, pool *pgxpool.Pool, cfg webhook.Config, r webhook.Resolver) *connects {
	t.Helper()
	c := &connects{}
	runWorker(t, pool, cfg, func(w *webhook.Worker) { webhook.SetEgress(w, webhook.NewEgressForTest(cfg, r, c.hook)) })
	return c
}

// A delivery to an address that is not public is refused by the dialer's
// Control on the address dialled, before connect(2): an IP literal, an
// IPv4-mapped one, a name resolving to a private address at delivery. The
// intent fails at its first attempt with the reason (not retried until it
// expires); the connection to a public address goes as far as the test
// lets it (the last step before connect), proving that step is reached
// when the policy allows.
func TestDeliveryToAnAddressThatIsNotPublicIsRefusedBeforeConnecting(t *testing.T) {
	t.Parallel()
	pool := pgtest.NewPool(t, Template)
	anything := webhook.DefaultConfig()
	anything.AllowNets = []netip.Prefix{netip.MustParsePrefix("0.0.0.0/0"), netip.MustParsePrefix("::/0")}
	names := table(map[string]string{"intranet.example": "10.0.0.1", "public.example": "93.184.216.34"})
	register := webhook.NewEndpoints(pool, 10, webhook.NewEgress(anything, names), nil) // as if registered while allowed
	refused := map[string]string{
		"https://10.0.0.1/hooks":                   "10.0.0.1",
		"https://169.254.169.254/latest/meta-data": "169.254.169.254",
		"https://[::ffff:192.168.0.1]:8443/x":      "192.168.0.1",
		"https://intranet.example/hooks":           "10.0.0.1",
	}
	for u := range refused {
		if _, err := register.Create(t.Context(), "acme", u, "test"); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := register.Create(t.Context(), "acme", "https://public.example/hooks", "test"); err != nil {
		t.Fatal(err)
	}
	issue(t, pool, "acme", false, "USD")
	c := runStrict(t, pool, strict(), names)

	waitFor(t, "the refused intents failed, the public one tried", func() bool {
		c.only(t, "93.184.216.34:443")
		return len(intents(t, pool, webhook.StatusFailed)) == len(refused) && len(c.addresses()) > 0
	})
	for _, i := range intents(t, pool, webhook.StatusFailed) {
		addr := refused[i.URL]
		if i.Attempts != 1 || !strings.Contains(i.LastError, "refused by the egress policy before connecting") ||
			!strings.Contains(i.LastError, addr) || i.LastStatusCode != nil {
			t.Errorf("%s: %+v, want failed at its first attempt, refused on %s", i.URL, i, addr)
		}
	}
	c.only(t, "93.184.216.34:443")
}

// DNS rebinding: the name answers a public address at registration and a
// private one at delivery. The registration passes; the delivery's
// connection is refused on the address it would dial.
func TestDNSRebindingIsRefusedAtConnect(t *testing.T) {
	t.Parallel()
	pool := pgtest.NewPool(t, Template)
	var rebound atomic.Bool
	names := resolver(func(host string) ([]netip.Addr, error) {
		if host != "rebind.example" {
			return nil, fmt.Errorf("lookup %s: no such host", host)
		}
		if rebound.Load() {
			return []netip.Addr{netip.MustParseAddr("169.254.169.254"), netip.MustParseAddr("10.0.0.1")}, nil
		}
		return []netip.Addr{netip.MustParseAddr("93.184.216.34")}, nil
	})
	if _, err := webhook.NewEndpoints(pool, 10, webhook.NewEgress(strict(), names), nil).Create(t.Context(), "acme", "https://rebind.example/hooks", "test"); err != nil {
		t.Fatalf("registration while the name is public: %v", err)
	}
	rebound.Store(true)
	issue(t, pool, "acme", false, "USD")
	c := runStrict(t, pool, strict(), names)

	waitFor(t, "the intent failed", func() bool { c.only(t); return allIn(t, pool, webhook.StatusFailed, 1)() })
	i := intents(t, pool, webhook.StatusFailed)[0]
	if i.Attempts != 1 || !strings.Contains(i.LastError, "169.254.169.254") || !strings.Contains(i.LastError, "refused by the egress policy") {
		t.Fatalf("intent %+v, want refused on the rebound address", i)
	}
	c.only(t)
}

// An endpoint registered over http while http was allowed is not delivered
// to once it is not: the intent fails, the receiver gets nothing.
func TestHTTPDeliveryRefusedWhenOnlyHTTPSIsAllowed(t *testing.T) {
	t.Parallel()
	pool := pgtest.NewPool(t, Template)
	rc := newReceiver(t)
	rc.register(t, pool, "acme") // http://127.0.0.1, allowed by testConfig
	issue(t, pool, "acme", false, "USD")
	cfg := testConfig()
	cfg.AllowHTTP = false
	runStrict(t, pool, cfg, table(nil))
	waitFor(t, "the intent failed", allIn(t, pool, webhook.StatusFailed, 1))
	if i := intents(t, pool, webhook.StatusFailed)[0]; i.Attempts != 1 || !strings.Contains(i.LastError, "WEBHOOK_ALLOW_HTTP") {
		t.Fatalf("intent %+v, want refused as http", i)
	}
	if n := len(rc.deliveries()); n != 0 {
		t.Fatalf("the receiver got %d deliveries over http", n)
	}
}

// An issuing transaction open across an endpoint's deletion commits an
// intent for it after Delete failed the ones it saw. The worker never
// delivers it: the intent fails with endpoint_deleted at its claim, and
// the endpoints still registered are delivered to as before.
func TestNoDeliveryToAnEndpointDeletedBeforeItsClaim(t *testing.T) {
	t.Parallel()
	pool := pgtest.NewPool(t, Template)
	kept, gone := newReceiver(t), newReceiver(t)
	kept.register(t, pool, "acme")
	issue(t, pool, "acme", false, "USD")
	var envs []envelope.Envelope
	for _, d := range Published(t, pool) {
		envs = append(envs, d.Envelope)
	}
	epGone := gone.register(t, pool, "acme")

	tx, err := pool.Begin(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = tx.Rollback(context.Background()) }) // after Commit: nothing
	if err := (&webhook.Recorder{}).Record(t.Context(), tx, envs...); err != nil {
		t.Fatal(err)
	}
	if err := testEndpoints(pool).Delete(t.Context(), "acme", epGone.ID); err != nil {
		t.Fatal(err)
	}
	if err := tx.Commit(t.Context()); err != nil {
		t.Fatal(err)
	}
	var open int
	if err := pool.QueryRow(t.Context(), `SELECT count(*) FROM webhook_intent WHERE endpoint_id = $1 AND status = 'pending'`,
		epGone.ID).Scan(&open); err != nil || open != 1 {
		t.Fatalf("%d pending intents of the deleted endpoint (%v), want the race's one", open, err)
	}

	runWorker(t, pool, testConfig())
	waitFor(t, "both intents ended", func() bool {
		if n := len(gone.deliveries()); n != 0 {
			t.Fatalf("the deleted endpoint got %d deliveries", n)
		}
		return len(intents(t, pool, webhook.StatusAccepted)) == 1 && len(intents(t, pool, webhook.StatusFailed)) == 1
	})
	if f := intents(t, pool, webhook.StatusFailed)[0]; f.EndpointID != epGone.ID || f.LastError != "endpoint_deleted" {
		t.Fatalf("failed intent %+v, want the deleted endpoint's, endpoint_deleted", f)
	}
	if n := len(gone.deliveries()); n != 0 {
		t.Fatalf("the deleted endpoint got %d deliveries", n)
	}
	if n := len(kept.deliveries()); n != 1 {
		t.Fatalf("the kept endpoint got %d deliveries, want 1", n)
	}
}

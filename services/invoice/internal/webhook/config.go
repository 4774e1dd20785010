package webhook

import (
	"errors"
	"fmt"
	"net"
	"net/netip"
	"net/url"
	"time"

	"github.com/usagebilling/billing/pkg/service"
)

// Config is the delivery's settings, from the environment (LoadConfig).
type Config struct {
	Worker       bool          // WEBHOOK_WORKER (true): run the delivery worker in this process
	PollInterval time.Duration // WEBHOOK_POLL_INTERVAL (1s): how often an idle worker looks for due intents
	Timeout      time.Duration // WEBHOOK_TIMEOUT (10s): one delivery's HTTP request, answer included
	LeaseTTL     time.Duration // WEBHOOK_LEASE_TTL (30s): how long a claim is held; over Timeout
	Concurrency  int           // WEBHOOK_CONCURRENCY (8): deliveries in flight per worker
	// TenantConcurrency is WEBHOOK_TENANT_CONCURRENCY (4): the most of a
	// worker's deliveries in flight one tenant may hold, so that a tenant
	// whose endpoints hang leaves the other slots to the others.
	TenantConcurrency int
	BackoffBase       time.Duration // WEBHOOK_BACKOFF_BASE (1s): the first retry's delay, doubled per attempt
	BackoffMax        time.Duration // WEBHOOK_BACKOFF_MAX (10m): the longest delay between attempts
	TTL               time.Duration // WEBHOOK_TTL (72h): from the issuing commit to expiry
	Retention         time.Duration // WEBHOOK_RETENTION (168h): accepted intents are purged after it
	// FailedRetention is WEBHOOK_FAILED_RETENTION (720h, 30 days): failed
	// and expired intents, which an operator may retry, are purged after it.
	FailedRetention time.Duration
	MaxEndpoints    int // WEBHOOK_MAX_ENDPOINTS (10): active endpoints per tenant
	// AllowNets is WEBHOOK_ALLOW_NETS (none): CIDRs deliveries may reach
	// although loopback, private, link-local or otherwise not public
	// ("127.0.0.0/8,::1/128" for a stack on one machine). IPv4 nets match
	// IPv4-mapped IPv6 addresses too.
	AllowNets []netip.Prefix
	// AllowHTTP is WEBHOOK_ALLOW_HTTP (false): accept and deliver to
	// http:// endpoints, not only https://.
	AllowHTTP bool
	// Proxy is WEBHOOK_PROXY (none): an http(s) proxy every delivery goes
	// through (an egress filter such as smokescreen); the proxy's own
	// address is dialled unchecked. Never taken from HTTPS_PROXY.
	Proxy *url.URL
	// SecretKeys is WEBHOOK_SECRET_KEYS (none): the keys sealing the
	// endpoints' signing secrets at rest, "<id>:<base64 of 32 bytes>", the
	// first sealing, the others opening what they sealed (ParseSecretKeys).
	// None: secrets are stored as they are, which CheckSealed refuses
	// beyond loopback.
	SecretKeys *SecretKeys
	// AllowPlaintextSecrets is WEBHOOK_ALLOW_PLAINTEXT_SECRETS (false):
	// store the secrets in plaintext without SecretKeys although the
	// service listens beyond loopback (CheckSealed).
	AllowPlaintextSecrets bool
}

// EnvNames are the variables LoadConfig reads.
var EnvNames = []string{
	"WEBHOOK_WORKER", "WEBHOOK_POLL_INTERVAL", "WEBHOOK_TIMEOUT", "WEBHOOK_LEASE_TTL", "WEBHOOK_CONCURRENCY",
	"WEBHOOK_BACKOFF_BASE", "WEBHOOK_BACKOFF_MAX", "WEBHOOK_TTL", "WEBHOOK_RETENTION", "WEBHOOK_MAX_ENDPOINTS",
	"WEBHOOK_FAILED_RETENTION", "WEBHOOK_TENANT_CONCURRENCY", "WEBHOOK_ALLOW_NETS", "WEBHOOK_ALLOW_HTTP", "WEBHOOK_PROXY",
	"WEBHOOK_SECRET_KEYS", "WEBHOOK_ALLOW_PLAINTEXT_SECRETS",
}

// DefaultConfig is the configuration with every default.
func DefaultConfig() Config {
	return Config{
		Worker: true, PollInterval: time.Second, Timeout: 10 * time.Second, LeaseTTL: 30 * time.Second,
		Concurrency: 8, TenantConcurrency: 4, BackoffBase: time.Second, BackoffMax: 10 * time.Minute, TTL: DefaultTTL,
		Retention: 7 * 24 * time.Hour, FailedRetention: 30 * 24 * time.Hour, MaxEndpoints: 10,
	}
}

// LoadConfig reads the settings from e, each defaulting to DefaultConfig's.
func LoadConfig(e *service.Env) (Config, error) {
	d := DefaultConfig()
	c := Config{
		Worker:       e.Bool("WEBHOOK_WORKER", d.Worker),
		PollInterval: e.Duration("WEBHOOK_POLL_INTERVAL", d.PollInterval),
		Timeout:      e.Duration("WEBHOOK_TIMEOUT", d.Timeout),
		LeaseTTL:     e.Duration("WEBHOOK_LEASE_TTL", d.LeaseTTL),
		Concurrency:  e.Int("WEBHOOK_CONCURRENCY", d.Concurrency),
		BackoffBase:  e.Duration("WEBHOOK_BACKOFF_BASE", d.BackoffBase),
		BackoffMax:   e.Duration("WEBHOOK_BACKOFF_MAX", d.BackoffMax),
		TTL:          e.Duration("WEBHOOK_TTL", d.TTL),
		Retention:    e.Duration("WEBHOOK_RETENTION", d.Retention),
		MaxEndpoints: e.Int("WEBHOOK_MAX_ENDPOINTS", d.MaxEndpoints),

		FailedRetention:   e.Duration("WEBHOOK_FAILED_RETENTION", d.FailedRetention),
		TenantConcurrency: e.Int("WEBHOOK_TENANT_CONCURRENCY", d.TenantConcurrency),
		AllowHTTP:         e.Bool("WEBHOOK_ALLOW_HTTP", d.AllowHTTP),

		AllowPlaintextSecrets: e.Bool("WEBHOOK_ALLOW_PLAINTEXT_SECRETS", d.AllowPlaintextSecrets),
	}
	var errs []error
	for _, n := range e.List("WEBHOOK_ALLOW_NETS", nil) {
		p, err := netip.ParsePrefix(n)
		if err != nil {
			errs = append(errs, fmt.Errorf("WEBHOOK_ALLOW_NETS: want CIDRs such as 127.0.0.0/8 or ::1/128, got %q", n))
			continue
		}
		c.AllowNets = append(c.AllowNets, p)
	}
	if raw := e.String("WEBHOOK_PROXY", ""); raw != "" {
		u, err := url.Parse(raw)
		if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Hostname() == "" {
			errs = append(errs, fmt.Errorf("WEBHOOK_PROXY: want an http:// or https:// proxy URL, got %q", raw))
		} else {
			c.Proxy = u
		}
	}
	keys, err := ParseSecretKeys(e.List("WEBHOOK_SECRET_KEYS", nil))
	if err != nil {
		errs = append(errs, err)
	}
	c.SecretKeys = keys
	if err := e.Err(); err != nil {
		errs = append([]error{err}, errs...)
	}
	if err := errors.Join(errs...); err != nil {
		return Config{}, err
	}
	return c, c.Check()
}

// CheckSealed refuses to store the endpoints' signing secrets in plaintext
// in a service listening on httpAddr beyond loopback, a deployment rather
// than a stack on one machine: without WEBHOOK_SECRET_KEYS, anyone who reads
// the database or a backup of it could sign deliveries the tenants trust.
// WEBHOOK_ALLOW_PLAINTEXT_SECRETS=true allows it all the same.
func (c Config) CheckSealed(httpAddr string) error {
	if c.SecretKeys != nil || c.AllowPlaintextSecrets || loopbackListener(httpAddr) {
		return nil
	}
	return fmt.Errorf("WEBHOOK_SECRET_KEYS is not set, so the webhook endpoints' signing secrets would be stored in plaintext, "+
		"on a service listening on %q: set a key (<key id>:<openssl rand -base64 32>), or WEBHOOK_ALLOW_PLAINTEXT_SECRETS=true "+
		"to store them in plaintext all the same", httpAddr)
}

// loopbackListener reports whether addr listens on a loopback address only.
func loopbackListener(addr string) bool {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return false
	}
	if host == "localhost" {
		return true
	}
	ip, err := netip.ParseAddr(host)
	return err == nil && ip.Unmap().IsLoopback()
}

// Check reports settings that do not fit together.
func (c Config) Check() error {
	var errs []error
	if c.LeaseTTL <= c.Timeout {
		errs = append(errs, errors.New("WEBHOOK_LEASE_TTL must be longer than WEBHOOK_TIMEOUT (a lease must outlive the call it covers)"))
	}
	if c.TenantConcurrency <= 0 || c.TenantConcurrency > c.Concurrency {
		errs = append(errs, errors.New("WEBHOOK_TENANT_CONCURRENCY must be 1 to WEBHOOK_CONCURRENCY"))
	}
	if c.BackoffMax < c.BackoffBase {
		errs = append(errs, errors.New("WEBHOOK_BACKOFF_MAX must be at least WEBHOOK_BACKOFF_BASE"))
	}
	if c.PollInterval <= 0 || c.Concurrency <= 0 || c.TTL <= 0 || c.Retention <= 0 || c.FailedRetention <= 0 || c.MaxEndpoints <= 0 {
		errs = append(errs, errors.New("webhook durations and counts must be positive"))
	}
	return errors.Join(errs...)
}

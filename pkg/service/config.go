package service

import (
	"errors"
	"fmt"
	"maps"
	"net"
	"net/netip"
	"net/url"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/usagebilling/billing/pkg/auth"
	"github.com/usagebilling/billing/pkg/kafkaconf"
)

// Env reads settings from environment variables and collects every problem,
// so a bad configuration is reported once, in full, at start.
type Env struct {
	lookup func(string) (string, bool)
	errs   []string
}

// NewEnv reads the process environment.
func NewEnv() *Env { return &Env{lookup: os.LookupEnv} }

// NewEnvFrom reads a fixed map (for tests).
func NewEnvFrom(m map[string]string) *Env {
	return &Env{lookup: func(k string) (string, bool) { v, ok := m[k]; return v, ok }}
}

func (e *Env) get(name string) (string, bool) {
	v, ok := e.lookup(name)
	v = strings.TrimSpace(v)
	return v, ok && v != ""
}

func (e *Env) fail(name, format string, args ...any) {
	e.errs = append(e.errs, name+": "+fmt.Sprintf(format, args...))
}

// String returns the variable, or def when unset.
func (e *Env) String(name, def string) string {
	if v, ok := e.get(name); ok {
		return v
	}
	return def
}

// Required returns the variable, recording a problem when unset.
func (e *Env) Required(name string) string {
	v, ok := e.get(name)
	if !ok {
		e.fail(name, "required")
	}
	return v
}

// Int returns a positive integer variable, or def when unset.
func (e *Env) Int(name string, def int) int {
	v, ok := e.get(name)
	if !ok {
		return def
	}
	n, err := strconv.Atoi(v)
	if err != nil || n <= 0 {
		e.fail(name, "want a positive integer, got %q", v)
		return def
	}
	return n
}

// Duration returns a positive duration variable ("500ms", "15s"), or def.
func (e *Env) Duration(name string, def time.Duration) time.Duration {
	v, ok := e.get(name)
	if !ok {
		return def
	}
	d, err := time.ParseDuration(v)
	if err != nil || d <= 0 {
		e.fail(name, "want a positive duration such as 500ms or 15s, got %q", v)
		return def
	}
	return d
}

// Float returns a positive number variable, or def when unset.
func (e *Env) Float(name string, def float64) float64 {
	v, ok := e.get(name)
	if !ok {
		return def
	}
	f, err := strconv.ParseFloat(v, 64)
	if err != nil || !(f > 0) || f > 1e9 {
		e.fail(name, "want a positive number, got %q", v)
		return def
	}
	return f
}

// Bool returns a boolean variable ("true" or "false"), or def when unset.
func (e *Env) Bool(name string, def bool) bool {
	v, ok := e.get(name)
	if !ok {
		return def
	}
	b, err := strconv.ParseBool(v)
	if err != nil {
		e.fail(name, "want true or false, got %q", v)
		return def
	}
	return b
}

// List returns a comma-separated variable, or def.
func (e *Env) List(name string, def []string) []string {
	v, ok := e.get(name)
	if !ok {
		return def
	}
	var out []string
	for _, p := range strings.Split(v, ",") {
		if p = strings.TrimSpace(p); p != "" {
			out = append(out, p)
		}
	}
	if len(out) == 0 {
		e.fail(name, "empty list")
	}
	return out
}

// Err returns every recorded problem as one error, or nil.
func (e *Env) Err() error {
	if len(e.errs) == 0 {
		return nil
	}
	return errors.New("invalid configuration:\n  " + strings.Join(e.errs, "\n  "))
}

// Config is what every service reads from its environment.
type Config struct {
	Name        string
	DatabaseURL string        // DATABASE_URL (required): the role the service runs as, DML only in production
	Brokers     []string      // KAFKA_BROKERS (127.0.0.1:9092)
	HTTPAddr    string        // HTTP_ADDR (:<default port>)
	LogLevel    string        // LOG_LEVEL (info): debug, info, warn, error
	DBMaxConns  int           // DB_MAX_CONNS (10): the HTTP pool (requests and periodic work)
	Shutdown    time.Duration // SHUTDOWN_TIMEOUT (15s)
	// DatabaseMigrateURL is the schema owner's URL, read by `migrate` only
	// (DATABASE_MIGRATE_URL; unset: DATABASE_URL is the owner).
	DatabaseMigrateURL string
	// Kafka is how the clients reach the brokers, TLS and SASL
	// (KAFKA_SECURITY_PROTOCOL, ...: kafkaconf.SecurityFromEnv).
	Kafka kafkaconf.Security
	// AllowPlaintext lets the clients reach brokers that are not on a
	// loopback host over PLAINTEXT (KAFKA_ALLOW_PLAINTEXT, false): without
	// it such a configuration is refused at start, since the broker could
	// not authorise who writes which topic.
	AllowPlaintext bool
	// MetricsAddr, when set, serves /metrics on its own listener instead of
	// the API port (METRICS_ADDR, e.g. 127.0.0.1:9100; off by default).
	MetricsAddr string

	// HTTP server limits. The write timeout runs from the end of the
	// request's headers, so it must exceed the request deadline.
	HTTPReadHeaderTimeout time.Duration // HTTP_READ_HEADER_TIMEOUT (10s)
	HTTPReadTimeout       time.Duration // HTTP_READ_TIMEOUT (30s): headers and body
	HTTPWriteTimeout      time.Duration // HTTP_WRITE_TIMEOUT (60s)
	HTTPIdleTimeout       time.Duration // HTTP_IDLE_TIMEOUT (60s): an idle keep-alive
	HTTPMaxHeaderBytes    int           // HTTP_MAX_HEADER_BYTES (32768)
	// RequestTimeout is each request's deadline (HTTP_REQUEST_TIMEOUT, 20s):
	// a handler still running past it answers 503 problem+json "timeout".
	RequestTimeout time.Duration

	// Database limits.
	DBConsumerMaxConns int           // DB_CONSUMER_MAX_CONNS (6): consumer, relay, retention
	DBStatementTimeout time.Duration // DB_STATEMENT_TIMEOUT (30s): PostgreSQL statement_timeout
	DBAcquireTimeout   time.Duration // DB_ACQUIRE_TIMEOUT (5s): waiting for a pooled connection
	DBConnIdleTime     time.Duration // DB_CONN_IDLE_TIME (1m): an idle pooled connection is closed after it

	// Per-tenant rate limit of admitted /v1/tenants/{tenantId}/... requests,
	// per process: a token bucket of RateBurst refilled at RateLimit per
	// second. Refused requests (401, 403, 404, 405) take a bucket of the
	// same size of their caller (token subject, or address without a valid
	// token), never the tenant's.
	RateLimit float64 // RATE_LIMIT_RPS (200)
	RateBurst int     // RATE_LIMIT_BURST (400)

	// Retention.
	InboxRetention    time.Duration // INBOX_RETENTION (336h, 14 days; longer than the topics' 7 days)
	IdempotencyTTL    time.Duration // IDEMPOTENCY_TTL (24h)
	DeferredMaxAge    time.Duration // DEFERRED_MAX_AGE (24h): then quarantined as deferred_expired
	RetentionInterval time.Duration // RETENTION_INTERVAL (1m): period of the purges
	RetentionBatch    int           // RETENTION_BATCH_SIZE (1000): rows per purge statement
	// PprofAddr, when set, serves net/http/pprof on its own listener
	// (PPROF_ADDR, e.g. 127.0.0.1:6061; off by default). It has no
	// authentication: LoadConfig refuses an address that is not loopback.
	PprofAddr string

	RelayBatch     int           // RELAY_BATCH_SIZE (500)
	RelayLinger    time.Duration // RELAY_LINGER (2ms)
	RelayPoll      time.Duration // RELAY_POLL_INTERVAL (1s)
	RelayLeaseTTL  time.Duration // RELAY_LEASE_TTL (15s)
	RelayMaxTries  int           // RELAY_MAX_ATTEMPTS (10)
	RelayRetention time.Duration // RELAY_RETENTION (24h)

	ConsumerGroup string        // CONSUMER_GROUP (<name>)
	ConsumerBatch int           // CONSUMER_BATCH_SIZE (500)
	ConsumerWait  time.Duration // CONSUMER_MAX_WAIT (15ms)
	ConsumerLanes int           // CONSUMER_LANES (1)
	SweepInterval time.Duration // CONSUMER_SWEEP_INTERVAL (2s)

	// Auth verifies bearer tokens and signs the service's own calls to other
	// services (package auth, Ed25519): AUTH_ISSUER (the users' issuer),
	// AUTH_JWKS (the public keys: a file path, an https URL or an http URL
	// of a loopback host, read again every AUTH_JWKS_REFRESH, 30s),
	// AUTH_SERVICE_KEY (this service's own
	// private key, PEM PKCS #8, for its calls; optional) with
	// AUTH_SERVICE_KEY_ID ("<name>/<version>"), AUTH_SERVICE_CALLERS (the
	// services whose service tokens it accepts; "query"). AUTH_DEV_KEY=true
	// (false) accepts the published development keys instead, only with a
	// loopback HTTP_ADDR (its default then 127.0.0.1:<port>).
	Auth   auth.Keys
	DevKey bool // AUTH_DEV_KEY
	// ServiceURLs are the base URLs of the services, by name, for the
	// operator API's calls to their internal endpoints: SERVICE_URLS
	// ("meter=http://127.0.0.1:8081,usage=..."; default: every service on
	// 127.0.0.1 at its default port).
	ServiceURLs map[string]string
}

// DefaultServiceURLs are the services on 127.0.0.1 at their default ports.
var DefaultServiceURLs = map[string]string{
	"meter": "http://127.0.0.1:8081", "usage": "http://127.0.0.1:8082", "billing": "http://127.0.0.1:8083",
	"invoice": "http://127.0.0.1:8084", "query": "http://127.0.0.1:8085",
}

// EnvNames lists the variables Config reads, for documentation and for the
// check of deploy/compose.yaml.
var EnvNames = append([]string{
	"DATABASE_URL", "DATABASE_MIGRATE_URL", "KAFKA_BROKERS", "KAFKA_ALLOW_PLAINTEXT", "HTTP_ADDR", "LOG_LEVEL", "DB_MAX_CONNS", "SHUTDOWN_TIMEOUT", "PPROF_ADDR", "METRICS_ADDR",
	"HTTP_READ_HEADER_TIMEOUT", "HTTP_READ_TIMEOUT", "HTTP_WRITE_TIMEOUT", "HTTP_IDLE_TIMEOUT", "HTTP_MAX_HEADER_BYTES",
	"HTTP_REQUEST_TIMEOUT", "DB_CONSUMER_MAX_CONNS", "DB_STATEMENT_TIMEOUT", "DB_ACQUIRE_TIMEOUT", "DB_CONN_IDLE_TIME",
	"RATE_LIMIT_RPS", "RATE_LIMIT_BURST",
	"INBOX_RETENTION", "IDEMPOTENCY_TTL", "DEFERRED_MAX_AGE", "RETENTION_INTERVAL", "RETENTION_BATCH_SIZE",
	"RELAY_BATCH_SIZE", "RELAY_LINGER", "RELAY_POLL_INTERVAL", "RELAY_LEASE_TTL", "RELAY_MAX_ATTEMPTS", "RELAY_RETENTION",
	"CONSUMER_GROUP", "CONSUMER_BATCH_SIZE", "CONSUMER_MAX_WAIT", "CONSUMER_LANES", "CONSUMER_SWEEP_INTERVAL",
	"AUTH_ISSUER", "AUTH_JWKS", "AUTH_JWKS_REFRESH", "AUTH_SERVICE_KEY", "AUTH_SERVICE_KEY_ID", "AUTH_SERVICE_CALLERS", "AUTH_DEV_KEY", "SERVICE_URLS",
}, kafkaconf.EnvNames...)

// LoadConfig reads Config for service name with its default HTTP port.
func LoadConfig(e *Env, name string, defaultPort int) (Config, error) {
	c := Config{
		Name:        name,
		DatabaseURL: e.Required("DATABASE_URL"),
		Brokers:     e.List("KAFKA_BROKERS", []string{"127.0.0.1:9092"}),
		HTTPAddr:    e.String("HTTP_ADDR", fmt.Sprintf(":%d", defaultPort)),
		LogLevel:    e.String("LOG_LEVEL", "info"),
		DBMaxConns:  e.Int("DB_MAX_CONNS", 10),
		Shutdown:    e.Duration("SHUTDOWN_TIMEOUT", 15*time.Second),
		PprofAddr:   e.String("PPROF_ADDR", ""),
		MetricsAddr: e.String("METRICS_ADDR", ""),

		HTTPReadHeaderTimeout: e.Duration("HTTP_READ_HEADER_TIMEOUT", 10*time.Second),
		HTTPReadTimeout:       e.Duration("HTTP_READ_TIMEOUT", 30*time.Second),
		HTTPWriteTimeout:      e.Duration("HTTP_WRITE_TIMEOUT", 60*time.Second),
		HTTPIdleTimeout:       e.Duration("HTTP_IDLE_TIMEOUT", 60*time.Second),
		HTTPMaxHeaderBytes:    e.Int("HTTP_MAX_HEADER_BYTES", 32<<10),
		RequestTimeout:        e.Duration("HTTP_REQUEST_TIMEOUT", 20*time.Second),

		DBConsumerMaxConns: e.Int("DB_CONSUMER_MAX_CONNS", 6),
		DBStatementTimeout: e.Duration("DB_STATEMENT_TIMEOUT", 30*time.Second),
		DBAcquireTimeout:   e.Duration("DB_ACQUIRE_TIMEOUT", 5*time.Second),
		DBConnIdleTime:     e.Duration("DB_CONN_IDLE_TIME", time.Minute),

		RateLimit: e.Float("RATE_LIMIT_RPS", 200),
		RateBurst: e.Int("RATE_LIMIT_BURST", 400),

		InboxRetention:    e.Duration("INBOX_RETENTION", 14*24*time.Hour),
		IdempotencyTTL:    e.Duration("IDEMPOTENCY_TTL", 24*time.Hour),
		DeferredMaxAge:    e.Duration("DEFERRED_MAX_AGE", 24*time.Hour),
		RetentionInterval: e.Duration("RETENTION_INTERVAL", time.Minute),
		RetentionBatch:    e.Int("RETENTION_BATCH_SIZE", 1000),

		RelayBatch:     e.Int("RELAY_BATCH_SIZE", 500),
		RelayLinger:    e.Duration("RELAY_LINGER", 2*time.Millisecond),
		RelayPoll:      e.Duration("RELAY_POLL_INTERVAL", time.Second),
		RelayLeaseTTL:  e.Duration("RELAY_LEASE_TTL", 15*time.Second),
		RelayMaxTries:  e.Int("RELAY_MAX_ATTEMPTS", 10),
		RelayRetention: e.Duration("RELAY_RETENTION", 24*time.Hour),

		ConsumerGroup: e.String("CONSUMER_GROUP", name),
		ConsumerBatch: e.Int("CONSUMER_BATCH_SIZE", 500),
		ConsumerWait:  e.Duration("CONSUMER_MAX_WAIT", 15*time.Millisecond),
		ConsumerLanes: e.Int("CONSUMER_LANES", 1),
		SweepInterval: e.Duration("CONSUMER_SWEEP_INTERVAL", 2*time.Second),
	}
	if c.PprofAddr != "" && !loopbackAddr(c.PprofAddr) {
		e.fail("PPROF_ADDR", "the runtime profiles have no authentication: only a loopback address such as 127.0.0.1:6061, not %q", c.PprofAddr)
	}
	if c.HTTPWriteTimeout <= c.RequestTimeout {
		e.fail("HTTP_WRITE_TIMEOUT", "must exceed HTTP_REQUEST_TIMEOUT (%s), or a late answer is cut off", c.RequestTimeout)
	}
	c.DevKey = e.Bool("AUTH_DEV_KEY", false)
	if _, set := e.get("HTTP_ADDR"); c.DevKey && !set {
		c.HTTPAddr = fmt.Sprintf("127.0.0.1:%d", defaultPort)
	}
	c.Auth = authKeys(e, name, c.DevKey, c.HTTPAddr)
	c.ServiceURLs = serviceURLs(e)
	switch c.LogLevel {
	case "debug", "info", "warn", "error":
	default:
		e.fail("LOG_LEVEL", "want debug, info, warn or error, got %q", c.LogLevel)
	}
	c.DatabaseMigrateURL = e.String("DATABASE_MIGRATE_URL", "")
	for _, v := range [][2]string{{"DATABASE_URL", c.DatabaseURL}, {"DATABASE_MIGRATE_URL", c.DatabaseMigrateURL}} {
		if v[1] != "" && !strings.HasPrefix(v[1], "postgres://") && !strings.HasPrefix(v[1], "postgresql://") {
			e.fail(v[0], "want a postgres:// URL")
		}
	}
	var err error
	if c.Kafka, err = kafkaconf.SecurityFromEnv(e.lookup); err != nil {
		e.errs = append(e.errs, strings.Split(err.Error(), "\n")...)
	}
	c.AllowPlaintext = e.Bool("KAFKA_ALLOW_PLAINTEXT", false)
	if remote := remoteBrokers(c.Brokers); c.Kafka.Protocol == kafkaconf.Plaintext && len(remote) > 0 && !c.AllowPlaintext {
		e.fail("KAFKA_SECURITY_PROTOCOL", "PLAINTEXT to %s: the broker can tell no service from another, so anyone on the network "+
			"could publish any event; want SASL_SSL (docs/access.md, \"Who may publish an event\"), or KAFKA_ALLOW_PLAINTEXT=true "+
			"for a network of your own (compose)", strings.Join(remote, ","))
	}
	return c, e.Err()
}

func authKeys(e *Env, name string, dev bool, httpAddr string) auth.Keys {
	cfg := auth.Config{
		Service: name,
		Issuer:  e.String("AUTH_ISSUER", ""),
		JWKS:    e.String("AUTH_JWKS", ""),
		Refresh: e.Duration("AUTH_JWKS_REFRESH", 30*time.Second),
		Callers: e.List("AUTH_SERVICE_CALLERS", []string{"query"}),
		Dev:     dev,
	}
	if dev && !loopbackAddr(httpAddr) {
		e.fail("AUTH_DEV_KEY", "the published development key is accepted only on a loopback listener; HTTP_ADDR is %q", httpAddr)
		return auth.Keys{}
	}
	// Keys fetched over plain http could be swapped by anyone on the path:
	// https, or http to this machine only.
	if u, err := url.Parse(cfg.JWKS); err == nil && strings.EqualFold(u.Scheme, "http") && !loopbackHost(u.Hostname()) {
		e.fail("AUTH_JWKS", "an http:// JWKS URL is accepted only on a loopback host (127.0.0.1, ::1, localhost): want https://, got %q", cfg.JWKS)
		return auth.Keys{}
	}
	if !dev {
		if cfg.Issuer == "" {
			e.fail("AUTH_ISSUER", "required (or AUTH_DEV_KEY=true on a loopback listener, never in production)")
		}
		if cfg.JWKS == "" {
			e.fail("AUTH_JWKS", "required: a JWKS file or URL (or AUTH_DEV_KEY=true on a loopback listener, never in production)")
		}
		if cfg.Issuer == "" || cfg.JWKS == "" {
			return auth.Keys{}
		}
	}
	if path := e.String("AUTH_SERVICE_KEY", ""); path != "" {
		priv, err := auth.ReadPrivateKey(path)
		if err != nil {
			e.fail("AUTH_SERVICE_KEY", "%v", err) // never echo the key
			return auth.Keys{}
		}
		cfg.ServiceKey = &auth.Key{ID: e.String("AUTH_SERVICE_KEY_ID", name+"/1"), Private: priv}
	}
	k, err := auth.New(cfg)
	if err != nil {
		e.fail("AUTH_JWKS", "%v", err)
	}
	return k
}

// remoteBrokers returns the brokers that are not on a loopback host.
func remoteBrokers(brokers []string) []string {
	var out []string
	for _, b := range brokers {
		if host, _, err := net.SplitHostPort(b); err != nil || !loopbackHost(host) {
			out = append(out, b)
		}
	}
	return out
}

// loopbackAddr reports whether a listen address is on a loopback address
// only (not all interfaces).
func loopbackAddr(addr string) bool {
	host, _, err := net.SplitHostPort(addr)
	return err == nil && loopbackHost(host)
}

// loopbackHost reports whether host is localhost or a loopback address.
func loopbackHost(host string) bool {
	if host == "localhost" {
		return true
	}
	ip, err := netip.ParseAddr(host)
	return err == nil && ip.Unmap().IsLoopback()
}

func serviceURLs(e *Env) map[string]string {
	v, ok := e.get("SERVICE_URLS")
	if !ok {
		return maps.Clone(DefaultServiceURLs)
	}
	out := map[string]string{}
	for _, part := range strings.Split(v, ",") {
		if part = strings.TrimSpace(part); part == "" {
			continue
		}
		name, u, ok := strings.Cut(part, "=")
		name, u = strings.TrimSpace(name), strings.TrimRight(strings.TrimSpace(u), "/")
		parsed, err := url.Parse(u)
		if !ok || name == "" || err != nil || (parsed.Scheme != "http" && parsed.Scheme != "https") || parsed.Host == "" {
			e.fail("SERVICE_URLS", "want name=http://host:port[,name=...], got %q", part)
			continue
		}
		out[name] = u
	}
	return out
}

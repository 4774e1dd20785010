package service

import (
	"errors"
	"fmt"
	"maps"
	"net/url"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/usagebilling/billing/pkg/auth"
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
	DatabaseURL string        // DATABASE_URL (required)
	Brokers     []string      // KAFKA_BROKERS (127.0.0.1:9092)
	HTTPAddr    string        // HTTP_ADDR (:<default port>)
	LogLevel    string        // LOG_LEVEL (info): debug, info, warn, error
	DBMaxConns  int           // DB_MAX_CONNS (10)
	Shutdown    time.Duration // SHUTDOWN_TIMEOUT (15s)
	// PprofAddr, when set, serves net/http/pprof on its own listener
	// (PPROF_ADDR, e.g. 127.0.0.1:6061; off by default). It has no
	// authentication: bind it to the loopback address.
	PprofAddr string

	RelayBatch     int           // RELAY_BATCH_SIZE (500)
	RelayPoll      time.Duration // RELAY_POLL_INTERVAL (1s)
	RelayLeaseTTL  time.Duration // RELAY_LEASE_TTL (15s)
	RelayMaxTries  int           // RELAY_MAX_ATTEMPTS (10)
	RelayRetention time.Duration // RELAY_RETENTION (24h)

	ConsumerGroup string        // CONSUMER_GROUP (<name>)
	ConsumerBatch int           // CONSUMER_BATCH_SIZE (500)
	ConsumerWait  time.Duration // CONSUMER_MAX_WAIT (5ms)
	SweepInterval time.Duration // CONSUMER_SWEEP_INTERVAL (2s)

	// Auth verifies bearer tokens and signs the service's own calls to other
	// services: AUTH_JWT_KEYS ("kid=secret[,kid=secret...]", HS256 secrets of
	// at least 32 bytes; the first signs), plus the published development
	// key auth.DevKey when AUTH_DEV_KEY=true (false). One of the two is
	// required.
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
var EnvNames = []string{
	"DATABASE_URL", "KAFKA_BROKERS", "HTTP_ADDR", "LOG_LEVEL", "DB_MAX_CONNS", "SHUTDOWN_TIMEOUT", "PPROF_ADDR",
	"RELAY_BATCH_SIZE", "RELAY_POLL_INTERVAL", "RELAY_LEASE_TTL", "RELAY_MAX_ATTEMPTS", "RELAY_RETENTION",
	"CONSUMER_GROUP", "CONSUMER_BATCH_SIZE", "CONSUMER_MAX_WAIT", "CONSUMER_SWEEP_INTERVAL",
	"AUTH_JWT_KEYS", "AUTH_DEV_KEY", "SERVICE_URLS",
}

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

		RelayBatch:     e.Int("RELAY_BATCH_SIZE", 500),
		RelayPoll:      e.Duration("RELAY_POLL_INTERVAL", time.Second),
		RelayLeaseTTL:  e.Duration("RELAY_LEASE_TTL", 15*time.Second),
		RelayMaxTries:  e.Int("RELAY_MAX_ATTEMPTS", 10),
		RelayRetention: e.Duration("RELAY_RETENTION", 24*time.Hour),

		ConsumerGroup: e.String("CONSUMER_GROUP", name),
		ConsumerBatch: e.Int("CONSUMER_BATCH_SIZE", 500),
		ConsumerWait:  e.Duration("CONSUMER_MAX_WAIT", 5*time.Millisecond),
		SweepInterval: e.Duration("CONSUMER_SWEEP_INTERVAL", 2*time.Second),
	}
	c.DevKey = e.Bool("AUTH_DEV_KEY", false)
	c.Auth = authKeys(e, c.DevKey)
	c.ServiceURLs = serviceURLs(e)
	switch c.LogLevel {
	case "debug", "info", "warn", "error":
	default:
		e.fail("LOG_LEVEL", "want debug, info, warn or error, got %q", c.LogLevel)
	}
	if c.DatabaseURL != "" && !strings.HasPrefix(c.DatabaseURL, "postgres://") && !strings.HasPrefix(c.DatabaseURL, "postgresql://") {
		e.fail("DATABASE_URL", "want a postgres:// URL")
	}
	return c, e.Err()
}

func authKeys(e *Env, dev bool) auth.Keys {
	var keys []auth.Key
	if v, ok := e.get("AUTH_JWT_KEYS"); ok {
		parsed, err := auth.ParseKeys(v)
		if err != nil {
			e.fail("AUTH_JWT_KEYS", "%v", err) // never echo the secrets
			return auth.Keys{}
		}
		keys = parsed
	}
	if dev {
		keys = append(keys, auth.DevKey)
	}
	if len(keys) == 0 {
		e.fail("AUTH_JWT_KEYS", "required (or AUTH_DEV_KEY=true to accept the published development key, never in production)")
		return auth.Keys{}
	}
	k, err := auth.NewKeys(keys...)
	if err != nil {
		e.fail("AUTH_JWT_KEYS", "%v", err)
	}
	return k
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

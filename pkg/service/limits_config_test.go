package service

import (
	"strings"
	"testing"
	"time"
)

// The limits and retention settings have their documented defaults, read
// their variables, and refuse bad values by name.
func TestLimitsAndRetentionSettings(t *testing.T) {
	t.Parallel()
	cfg := testConfig(t, "postgres://localhost/x")
	defaults := map[string]any{
		"HTTP_READ_HEADER_TIMEOUT": cfg.HTTPReadHeaderTimeout == 10*time.Second,
		"HTTP_READ_TIMEOUT":        cfg.HTTPReadTimeout == 30*time.Second,
		"HTTP_WRITE_TIMEOUT":       cfg.HTTPWriteTimeout == 60*time.Second,
		"HTTP_IDLE_TIMEOUT":        cfg.HTTPIdleTimeout == 60*time.Second,
		"HTTP_MAX_HEADER_BYTES":    cfg.HTTPMaxHeaderBytes == 32<<10,
		"HTTP_REQUEST_TIMEOUT":     cfg.RequestTimeout == 20*time.Second,
		"DB_MAX_CONNS":             cfg.DBMaxConns == 10,
		"DB_CONSUMER_MAX_CONNS":    cfg.DBConsumerMaxConns == 6,
		"DB_STATEMENT_TIMEOUT":     cfg.DBStatementTimeout == 30*time.Second,
		"DB_ACQUIRE_TIMEOUT":       cfg.DBAcquireTimeout == 5*time.Second,
		"RATE_LIMIT_RPS":           cfg.RateLimit == 200,
		"RATE_LIMIT_BURST":         cfg.RateBurst == 400,
		"INBOX_RETENTION":          cfg.InboxRetention == 14*24*time.Hour,
		"IDEMPOTENCY_TTL":          cfg.IdempotencyTTL == 24*time.Hour,
		"DEFERRED_MAX_AGE":         cfg.DeferredMaxAge == 24*time.Hour,
		"RETENTION_INTERVAL":       cfg.RetentionInterval == time.Minute,
		"RETENTION_BATCH_SIZE":     cfg.RetentionBatch == 1000,
		"METRICS_ADDR":             cfg.MetricsAddr == "",
	}
	for name, ok := range defaults {
		if ok != true {
			t.Errorf("%s: not its documented default", name)
		}
	}
	env := map[string]string{"DATABASE_URL": "postgres://localhost/x", "AUTH_DEV_KEY": "true",
		"HTTP_REQUEST_TIMEOUT": "3s", "RATE_LIMIT_RPS": "2.5", "INBOX_RETENTION": "720h", "METRICS_ADDR": "127.0.0.1:9100"}
	got, err := LoadConfig(NewEnvFrom(env), "svc", 1)
	if err != nil || got.RequestTimeout != 3*time.Second || got.RateLimit != 2.5 || got.InboxRetention != 720*time.Hour ||
		got.MetricsAddr != "127.0.0.1:9100" {
		t.Fatalf("read %+v, %v", got, err)
	}
	for name, bad := range map[string]string{"RATE_LIMIT_RPS": "-1", "RATE_LIMIT_BURST": "0", "DB_STATEMENT_TIMEOUT": "soon",
		"HTTP_WRITE_TIMEOUT": "10s"} {
		env := map[string]string{"DATABASE_URL": "postgres://localhost/x", "AUTH_DEV_KEY": "true", name: bad}
		if _, err := LoadConfig(NewEnvFrom(env), "svc", 1); err == nil || !strings.Contains(err.Error(), name) {
			t.Errorf("%s=%s: err = %v", name, bad, err)
		}
	}
}

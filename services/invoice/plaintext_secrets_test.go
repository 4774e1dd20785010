package invoice_test

import (
	"log/slog"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/usagebilling/billing/pkg/service"
	"github.com/usagebilling/billing/services/invoice"
)

// The service does not start on a listener beyond loopback without
// WEBHOOK_SECRET_KEYS, unless WEBHOOK_ALLOW_PLAINTEXT_SECRETS=true; on
// loopback (make up, the tests) it starts without either. Build reads its
// settings from the process's environment, hence t.Setenv (not parallel).
func TestBuildRefusesPlaintextWebhookSecretsBeyondLoopback(t *testing.T) {
	// A pool that never connects: Build only keeps it.
	pool, err := pgxpool.New(t.Context(), "postgres://invoice@127.0.0.1:1/none?sslmode=disable")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	t.Setenv("WEBHOOK_SECRET_KEYS", "")
	for _, c := range []struct {
		addr, allow string
		refused     bool
	}{
		{":8084", "", true},
		{":8084", "true", false},
		{"127.0.0.1:8084", "", false},
	} {
		t.Setenv("WEBHOOK_ALLOW_PLAINTEXT_SECRETS", c.allow)
		cfg := service.Config{Name: invoice.Spec.Name, HTTPAddr: c.addr} // all Build reads of it
		_, err := invoice.Build(t.Context(), service.Deps{Config: cfg, Logger: slog.New(slog.DiscardHandler), Pool: pool, Metrics: prometheus.NewRegistry()})
		if refused := err != nil && strings.Contains(err.Error(), "WEBHOOK_SECRET_KEYS is not set"); refused != c.refused || (!c.refused && err != nil) {
			t.Errorf("HTTP_ADDR %s, WEBHOOK_ALLOW_PLAINTEXT_SECRETS %q: Build: %v; want refused %v", c.addr, c.allow, err, c.refused)
		}
	}
}

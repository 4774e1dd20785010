package webhook_test

import (
	"strings"
	"testing"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/usagebilling/billing/pkg/service"
	. "github.com/usagebilling/billing/services/invoice/internal/invoicetest"
	"github.com/usagebilling/billing/services/invoice/internal/webhook"
	"github.com/usagebilling/billing/services/invoice/internal/webhook/webhookdb"
	"github.com/usagebilling/billing/testkit/pgtest"
)

const (
	keyA = "a:MDEyMzQ1Njc4OWFiY2RlZjAxMjM0NTY3ODlhYmNkZWY=" // 32 bytes
	keyB = "b:ZmVkY2JhOTg3NjU0MzIxMGZlZGNiYTk4NzY1NDMyMTA="
)

// A sealed secret opens with its key and endpoint only; a plaintext one
// (stored while no key was set) reads as it is; bad keys stop the start.
func TestSecretKeysSealAndOpen(t *testing.T) {
	t.Parallel()
	k := mustKeys(keyA)
	ep, other := uuid.New(), uuid.New()
	const secret = "whsec_c2VjcmV0LXNlY3JldC1zZWNyZXQtc2VjcmV0LXNlY3JldA"
	sealed, err := k.Seal(ep, secret)
	if err != nil {
		t.Fatal(err)
	}
	again, _ := k.Seal(ep, secret)
	if !strings.HasPrefix(sealed, "aesgcm:a:") || strings.Contains(sealed, "whsec_") || strings.Contains(sealed, secret[6:20]) || sealed == again {
		t.Fatalf("sealed %q (again %q), want aesgcm:a:, no plaintext, a fresh nonce each time", sealed, again)
	}
	if got, err := k.Open(ep, sealed); err != nil || got != secret {
		t.Fatalf("open: %q %v", got, err)
	}
	if _, err := k.Open(other, sealed); err == nil {
		t.Fatal("another endpoint's row opened the secret")
	}
	if _, err := mustKeys(keyB).Open(ep, sealed); err == nil || !strings.Contains(err.Error(), `key "a"`) {
		t.Fatalf("without key a: %v, want it named", err)
	}
	if _, err := (*webhook.SecretKeys)(nil).Open(ep, sealed); err == nil {
		t.Fatal("no keys opened a sealed secret")
	}
	if got, err := k.Open(ep, secret); err != nil || got != secret {
		t.Fatalf("a plaintext secret: %q %v", got, err)
	}
	if got, _ := (*webhook.SecretKeys)(nil).Seal(ep, secret); got != secret {
		t.Fatalf("no keys sealed %q", got)
	}
	tampered := sealed[:len(sealed)-2] + "AA"
	if _, err := k.Open(ep, tampered); err == nil {
		t.Fatal("a tampered secret opened")
	}
	for _, bad := range [][]string{{"a:c2hvcnQ="}, {"no-key"}, {"bad id!:" + strings.Repeat("A", 43) + "="}, {keyA, keyA}} {
		if _, err := webhook.ParseSecretKeys(bad); err == nil || !strings.Contains(err.Error(), "WEBHOOK_SECRET_KEYS") {
			t.Errorf("%q: %v, want refused", bad, err)
		}
	}
}

// Registration stores the secret sealed, never in plaintext; deliveries
// are signed with the opened secret. Rotation: with a new key first, the
// worker reseals every secret (the plaintext ones stored before any key
// too) under it, and a worker with the new key alone delivers them.
func TestSecretsAreSealedAtRestAndRotated(t *testing.T) {
	t.Parallel()
	pool := pgtest.NewPool(t, Template)
	sealedA, plain := newReceiver(t), newReceiver(t)
	epA := register(t, pool, sealedA, mustKeys(keyA))
	epPlain := register(t, pool, plain, nil)
	stored := func(id uuid.UUID) string {
		var s string
		if err := pool.QueryRow(t.Context(), `SELECT secret FROM webhook_endpoint WHERE endpoint_id = $1`, id).Scan(&s); err != nil {
			t.Fatal(err)
		}
		return s
	}
	if s := stored(epA.ID); !strings.HasPrefix(s, "aesgcm:a:") || strings.Contains(s, epA.Secret) {
		t.Fatalf("stored %q, want sealed with key a", s)
	}

	rotated := mustKeys(keyB, keyA)
	if n, err := webhook.Reseal(t.Context(), webhookdb.New(pool), rotated, 100); err != nil || n != 2 {
		t.Fatalf("reseal: %d %v, want both", n, err)
	}
	for _, id := range []uuid.UUID{epA.ID, epPlain.ID} {
		if s := stored(id); !strings.HasPrefix(s, "aesgcm:b:") {
			t.Fatalf("endpoint %s stored %q after the rotation, want sealed with key b", id, s)
		}
	}
	if n, err := webhook.Reseal(t.Context(), webhookdb.New(pool), rotated, 100); err != nil || n != 0 {
		t.Fatalf("reseal again: %d %v, want nothing left", n, err)
	}

	issue(t, pool, "acme", false, "USD")
	cfg := testConfig()
	cfg.SecretKeys = mustKeys(keyB) // key a dropped
	runWorker(t, pool, cfg)
	waitFor(t, "both delivered", allIn(t, pool, "accepted", 2))
	for _, rc := range []*receiver{sealedA, plain} {
		if len(rc.effects()) != 1 {
			t.Fatalf("effects %v, want the invoice, signed with the endpoint's secret", rc.effects())
		}
	}
}

// register makes rc an endpoint of acme, its secret stored with keys.
func register(t *testing.T, pool *pgxpool.Pool, rc *receiver, keys *webhook.SecretKeys) webhook.Endpoint {
	t.Helper()
	ep, err := webhook.NewEndpoints(pool, 10, webhook.NewEgress(testConfig(), nil), keys).Create(t.Context(), "acme", rc.srv.URL+"/hooks", "test")
	if err != nil {
		t.Fatal(err)
	}
	rc.mu.Lock()
	rc.secret = ep.Secret
	rc.mu.Unlock()
	return ep
}

// Without WEBHOOK_SECRET_KEYS the secrets would be stored in plaintext:
// refused on a listener beyond loopback (a deployment), naming the key and
// the opt-out, unless WEBHOOK_ALLOW_PLAINTEXT_SECRETS=true; accepted on
// loopback (a stack on one machine) and whenever a key is set.
func TestPlaintextSecretsRefusedBeyondLoopback(t *testing.T) {
	t.Parallel()
	cases := []struct {
		env     map[string]string
		addr    string
		refused bool
	}{
		{nil, ":8084", true},
		{nil, "0.0.0.0:8084", true},
		{nil, "[::]:8084", true},
		{nil, "10.1.2.3:8084", true},
		{map[string]string{"WEBHOOK_ALLOW_PLAINTEXT_SECRETS": "false"}, ":8084", true},
		{map[string]string{"WEBHOOK_SECRET_KEYS": keyA}, ":8084", false},
		{map[string]string{"WEBHOOK_ALLOW_PLAINTEXT_SECRETS": "true"}, ":8084", false},
		{nil, "127.0.0.1:8084", false},
		{nil, "[::1]:8084", false},
		{nil, "localhost:8084", false},
	}
	for _, c := range cases {
		cfg, err := webhook.LoadConfig(service.NewEnvFrom(c.env))
		if err != nil {
			t.Fatalf("%v: %v", c.env, err)
		}
		err = cfg.CheckSealed(c.addr)
		switch {
		case !c.refused && err != nil:
			t.Errorf("%v on %s: refused: %v", c.env, c.addr, err)
		case c.refused && (err == nil || !strings.Contains(err.Error(), "WEBHOOK_SECRET_KEYS is not set") ||
			!strings.Contains(err.Error(), "WEBHOOK_ALLOW_PLAINTEXT_SECRETS=true")):
			t.Errorf("%v on %s: %v, want refused naming WEBHOOK_SECRET_KEYS and WEBHOOK_ALLOW_PLAINTEXT_SECRETS", c.env, c.addr, err)
		}
	}
}

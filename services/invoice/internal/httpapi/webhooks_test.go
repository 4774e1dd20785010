package httpapi_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/go-chi/chi/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/usagebilling/billing/pkg/api/invoiceapi"
	"github.com/usagebilling/billing/pkg/auth"
	"github.com/usagebilling/billing/services/invoice/internal/httpapi"
	. "github.com/usagebilling/billing/services/invoice/internal/invoicetest"
	"github.com/usagebilling/billing/services/invoice/internal/webhook"
	"github.com/usagebilling/billing/testkit/apitest"
	"github.com/usagebilling/billing/testkit/pgtest"
)

// names resolves the test's host names without DNS.
type names map[string]string

func (n names) LookupNetIP(_ context.Context, _, host string) ([]netip.Addr, error) {
	a, ok := n[host]
	if !ok {
		return nil, errors.New("no such host")
	}
	return []netip.Addr{netip.MustParseAddr(a)}, nil
}

// hookServer serves the webhook routes behind the services' token policy,
// http://127.0.0.1 allowed as on a developer's machine.
func hookServer(t *testing.T, pool *pgxpool.Pool, maxEndpoints int) *httptest.Server {
	t.Helper()
	cfg := webhook.DefaultConfig()
	cfg.AllowNets, cfg.AllowHTTP = []netip.Prefix{netip.MustParsePrefix("127.0.0.0/8")}, true
	return hookServerWith(t, pool, maxEndpoints, cfg)
}

// hookServerWith is hookServer with cfg's egress policy.
func hookServerWith(t *testing.T, pool *pgxpool.Pool, maxEndpoints int, cfg webhook.Config) *httptest.Server {
	t.Helper()
	egress := webhook.NewEgress(cfg, names{"erp.example": "93.184.216.34", "mail.example": "93.184.216.35",
		"fourth.example": "93.184.216.36", "metadata.example": "169.254.169.254", "intranet.example": "10.1.2.3"})
	keys, err := auth.NewKeys(auth.DevKey)
	if err != nil {
		t.Fatal(err)
	}
	r := chi.NewRouter()
	r.Use(auth.Middleware(keys, nil))
	httpapi.NewWebhooks(webhook.NewEndpoints(pool, maxEndpoints, egress, nil), webhook.NewStore(pool, time.Hour),
		slog.New(slog.DiscardHandler)).Routes(r)
	srv := httptest.NewServer(apitest.Handler(t, invoiceapi.YAML(), r))
	t.Cleanup(srv.Close)
	return srv
}

func call(t *testing.T, srv *httptest.Server, token, method, path, body string) (int, map[string]any, http.Header) {
	t.Helper()
	req, err := http.NewRequest(method, srv.URL+path, bytes.NewReader([]byte(body)))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+token)
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	var v map[string]any
	if len(raw) > 0 {
		if err := json.Unmarshal(raw, &v); err != nil {
			t.Fatalf("%s %s: body %q: %v", method, path, raw, err)
		}
	}
	return resp.StatusCode, v, resp.Header
}

// An endpoint's secret is in the POST answer and nowhere after; the list
// pages; a delete is final; bad URLs, too many endpoints and another
// tenant's token are refused.
func TestWebhookEndpoints(t *testing.T) {
	t.Parallel()
	pool := pgtest.NewPool(t, Template)
	srv := hookServer(t, pool, 3)
	acme := auth.DevToken(auth.RoleTenant, "acme")
	const base = "/v1/tenants/acme/webhook-endpoints"

	var ids []string
	for _, u := range []string{"https://erp.example/hooks", "http://127.0.0.1:9000/a", "https://mail.example/x?y=1"} {
		code, v, h := call(t, srv, acme, http.MethodPost, base, `{"url":"`+u+`"}`)
		secret, _ := v["secret"].(string)
		if code != http.StatusCreated || v["url"] != u || !strings.HasPrefix(secret, webhook.SecretPrefix) ||
			h.Get("Cache-Control") != "no-store" || v["createdBy"] != "dev-tenant" {
			t.Fatalf("POST %s: %d %v", u, code, v)
		}
		ids = append(ids, v["endpointId"].(string))
	}
	if code, v, _ := call(t, srv, acme, http.MethodPost, base, `{"url":"https://fourth.example/"}`); code != http.StatusUnprocessableEntity || v["code"] != "limit_exceeded" {
		t.Fatalf("a fourth endpoint: %d %v", code, v)
	}
	for _, body := range []string{`{"url":"ftp://x.example/"}`, `{"url":"https://u:p@x.example/"}`, `{"url":"/relative"}`,
		`{"url":"https://x.example:99999/"}`, `{"url":"https://x.example:0/"}`} {
		if code, v, _ := call(t, srv, acme, http.MethodPost, base, body); code != http.StatusBadRequest || v["code"] != "invalid_url" {
			t.Fatalf("POST %s: %d %v", body, code, v)
		}
	}
	for _, u := range []string{"https://169.254.169.254/latest/meta-data/", "https://metadata.example/", "https://intranet.example/x",
		"https://10.0.0.1/", "https://[::ffff:10.0.0.1]/", "https://[fd00::1]/", "https://100.64.0.1/", "https://0.0.0.0/"} {
		if code, v, _ := call(t, srv, acme, http.MethodPost, base, `{"url":"`+u+`"}`); code != http.StatusUnprocessableEntity ||
			v["code"] != "endpoint_address_refused" {
			t.Fatalf("POST %s: %d %v", u, code, v)
		}
	}
	if code, v, _ := call(t, srv, acme, http.MethodPost, base, `{}`); code != http.StatusBadRequest || v["code"] != "missing_field" {
		t.Fatalf("POST without url: %d %v", code, v)
	}
	if code, _, _ := call(t, srv, auth.DevToken(auth.RoleTenant, "other"), http.MethodGet, base, ""); code != http.StatusForbidden {
		t.Fatalf("another tenant's token: %d", code)
	}

	// Page by page, without secrets.
	var listed []string
	path := base + "?limit=2"
	for {
		code, v, _ := call(t, srv, acme, http.MethodGet, path, "")
		if code != http.StatusOK {
			t.Fatalf("GET %s: %d %v", path, code, v)
		}
		for _, e := range v["endpoints"].([]any) {
			ep := e.(map[string]any)
			if _, ok := ep["secret"]; ok {
				t.Fatalf("the list shows a secret: %v", ep)
			}
			listed = append(listed, ep["endpointId"].(string))
		}
		next, ok := v["next"].(string)
		if !ok {
			break
		}
		path = base + "?limit=2&cursor=" + next
	}
	if strings.Join(listed, ",") != strings.Join(ids, ",") {
		t.Fatalf("listed %v, want %v", listed, ids)
	}
	if code, v, _ := call(t, srv, acme, http.MethodGet, base+"?cursor=nope", ""); code != http.StatusBadRequest || v["code"] != "invalid_cursor" {
		t.Fatalf("bad cursor: %d %v", code, v)
	}

	if code, _, _ := call(t, srv, acme, http.MethodDelete, base+"/"+ids[0], ""); code != http.StatusNoContent {
		t.Fatalf("DELETE: %d", code)
	}
	if code, v, _ := call(t, srv, acme, http.MethodDelete, base+"/"+ids[0], ""); code != http.StatusNotFound || v["code"] != "not_found" {
		t.Fatalf("DELETE again: %d %v", code, v)
	}
	if code, v, _ := call(t, srv, acme, http.MethodDelete, base+"/not-a-uuid", ""); code != http.StatusBadRequest || v["code"] != "invalid_endpoint_id" {
		t.Fatalf("DELETE of a bad id: %d %v", code, v)
	}
	// The deleted one no longer counts against the limit.
	if code, v, _ := call(t, srv, acme, http.MethodPost, base, `{"url":"https://fourth.example/"}`); code != http.StatusCreated {
		t.Fatalf("an endpoint after a delete: %d %v", code, v)
	}
}

// By default (no WEBHOOK_ALLOW_NETS, no WEBHOOK_ALLOW_HTTP) a loopback
// endpoint is refused 422 endpoint_address_refused, an http one 422
// https_required, and neither is written.
func TestWebhookEndpointAddressRefusedByDefault(t *testing.T) {
	t.Parallel()
	pool := pgtest.NewPool(t, Template)
	srv := hookServerWith(t, pool, 3, webhook.DefaultConfig())
	acme := auth.DevToken(auth.RoleTenant, "acme")
	const base = "/v1/tenants/acme/webhook-endpoints"
	for u, want := range map[string]string{
		"https://127.0.0.1:9000/a": "endpoint_address_refused", "https://[::1]/a": "endpoint_address_refused",
		"http://127.0.0.1:9000/a": "https_required", "http://erp.example/hooks": "https_required",
	} {
		code, v, _ := call(t, srv, acme, http.MethodPost, base, `{"url":"`+u+`"}`)
		if code != http.StatusUnprocessableEntity || v["code"] != want {
			t.Fatalf("POST %s: %d %v, want 422 %s", u, code, v, want)
		}
	}
	if code, v, _ := call(t, srv, acme, http.MethodGet, base, ""); code != http.StatusOK || len(v["endpoints"].([]any)) != 0 {
		t.Fatalf("GET after refusals: %d %v, want no endpoint", code, v)
	}
	if code, v, _ := call(t, srv, acme, http.MethodPost, base, `{"url":"https://erp.example/hooks"}`); code != http.StatusCreated {
		t.Fatalf("a public https endpoint: %d %v", code, v)
	}
}

// The intents' internal endpoints take a service or operator token and
// check what they are given.
func TestWebhookIntentsInternal(t *testing.T) {
	t.Parallel()
	pool := pgtest.NewPool(t, Template)
	srv := hookServer(t, pool, 3)
	svc := auth.DevToken(auth.RoleService, "")
	if code, _, _ := call(t, srv, auth.DevToken(auth.RoleTenant, "acme"), http.MethodGet, "/internal/v1/webhook-intents", ""); code != http.StatusForbidden {
		t.Fatalf("a tenant token: %d", code)
	}
	if code, v, _ := call(t, srv, svc, http.MethodGet, "/internal/v1/webhook-intents?status=pending", ""); code != http.StatusOK || len(v["items"].([]any)) != 0 {
		t.Fatalf("list: %d %v", code, v)
	}
	if code, v, _ := call(t, srv, svc, http.MethodGet, "/internal/v1/webhook-intents?status=lost", ""); code != http.StatusBadRequest || v["code"] != "invalid_status" {
		t.Fatalf("bad status: %d %v", code, v)
	}
	if code, v, _ := call(t, srv, svc, http.MethodGet, "/internal/v1/webhook-intents/stats", ""); code != http.StatusOK ||
		v["oldestPendingAgeSeconds"] != 0.0 || len(v["byStatus"].(map[string]any)) != 5 {
		t.Fatalf("stats: %d %v", code, v)
	}
	path := "/internal/v1/webhook-intents/0192f0c4-0000-7000-8000-000000000000/retry"
	if code, v, _ := call(t, srv, svc, http.MethodPost, path, `{"actor":"alice"}`); code != http.StatusBadRequest || v["code"] != "missing_field" {
		t.Fatalf("retry without reason: %d %v", code, v)
	}
	if code, v, _ := call(t, srv, svc, http.MethodPost, path, `{"actor":"alice","correlationId":"c-1","reason":"endpoint fixed"}`); code != http.StatusNotFound || v["code"] != "webhook_intent_not_found" {
		t.Fatalf("retry of an unknown intent: %d %v", code, v)
	}
	if code, v, _ := call(t, srv, svc, http.MethodGet, strings.TrimSuffix(path, "/retry"), ""); code != http.StatusNotFound || v["code"] != "webhook_intent_not_found" {
		t.Fatalf("read of an unknown intent: %d %v", code, v)
	}
	for body, want := range map[string]string{
		`{"actor":"al\u001bice","correlationId":"c-1","reason":"r"}`: "control_character",
		`{"actor":"alice","correlationId":"c-1","reason":"r\u0007"}`: "control_character",
	} {
		if code, v, _ := call(t, srv, svc, http.MethodPost, path, body); code != http.StatusBadRequest || v["code"] != want {
			t.Fatalf("retry %s: %d %v, want 400 %s", body, code, v, want)
		}
	}
	for _, id := range []string{"00000000-0000-0000-0000-000000000000", "0192f0c4000070008000000000000000"} {
		if code, v, _ := call(t, srv, svc, http.MethodPost, "/internal/v1/webhook-intents/"+id+"/retry",
			`{"actor":"alice","correlationId":"c-1","reason":"r"}`); code != http.StatusBadRequest || v["code"] != "invalid_intent_id" {
			t.Fatalf("retry of intent %s: %d %v", id, code, v)
		}
	}
}

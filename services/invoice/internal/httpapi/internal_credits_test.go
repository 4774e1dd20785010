package httpapi_test

import (
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/go-chi/chi/v5"

	"github.com/usagebilling/billing/pkg/api/invoiceapi"
	"github.com/usagebilling/billing/pkg/auth"
	"github.com/usagebilling/billing/services/invoice/internal/app"
	"github.com/usagebilling/billing/services/invoice/internal/httpapi"
	. "github.com/usagebilling/billing/services/invoice/internal/invoicetest"
	"github.com/usagebilling/billing/testkit/apitest"
	"github.com/usagebilling/billing/testkit/pgtest"
)

// The internal read of a tenant's credit grants (query's operator console),
// behind the services' token policy: a service token gets the page the
// tenant's own route answers, byte for byte; a tenant's token, an
// operator's and none are refused; its query is checked as the tenant
// route's is.
func TestCreditGrantsInternal(t *testing.T) {
	t.Parallel()
	pool := pgtest.NewPool(t, Template)
	now := time.Date(2026, 11, 2, 9, 0, 0, 0, time.UTC)
	keys, err := auth.NewKeys(auth.DevKey)
	if err != nil {
		t.Fatal(err)
	}
	r := chi.NewRouter()
	r.Use(auth.Middleware(keys, nil))
	api := httpapi.New(app.New(app.Deps{Pool: pool, Clock: func() time.Time { return now }}, app.Config{}),
		seller, slog.New(slog.DiscardHandler))
	api.CreditRoutes(r)
	api.InternalCreditRoutes(r)
	srv := httptest.NewServer(apitest.Handler(t, invoiceapi.YAML(), r))
	t.Cleanup(srv.Close)
	send := func(method, path, token string, header map[string]string, body string) (int, string) {
		t.Helper()
		req, err := http.NewRequest(method, srv.URL+path, strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		if token != "" {
			req.Header.Set("Authorization", "Bearer "+token)
		}
		if body != "" {
			req.Header.Set("Content-Type", "application/json")
		}
		for k, v := range header {
			req.Header.Set(k, v)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		raw, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(raw)
	}
	admin := auth.DevToken(auth.RoleBillingAdmin, "acme")
	for _, key := range []string{"g1", "g2"} {
		if code, body := send(http.MethodPost, "/v1/tenants/acme/credit-grants", admin, map[string]string{"Idempotency-Key": key},
			`{"currency":"USD","amount":"500","reason":"prepaid"}`); code != http.StatusCreated {
			t.Fatalf("grant %s: %d %s", key, code, body)
		}
	}
	service := auth.DevToken(auth.RoleService, "")
	for _, q := range []string{"", "?limit=1"} {
		ownCode, own := send(http.MethodGet, "/v1/tenants/acme/credit-grants"+q, auth.DevToken(auth.RoleViewer, "acme"), nil, "")
		code, internal := send(http.MethodGet, "/internal/v1/tenants/acme/credit-grants"+q, service, nil, "")
		if ownCode != http.StatusOK || code != http.StatusOK || internal != own || !strings.Contains(internal, `"balance":"500"`) {
			t.Fatalf("%q: internal %d %s, the tenant's own %d %s", q, code, internal, ownCode, own)
		}
	}
	if code, body := send(http.MethodGet, "/internal/v1/tenants/other/credit-grants", service, nil, ""); code != http.StatusOK ||
		strings.TrimSpace(body) != `{"grants":[]}` {
		t.Errorf("another tenant's: %d %s", code, body)
	}
	for name, token := range map[string]string{
		"the tenant's viewer": auth.DevToken(auth.RoleViewer, "acme"),
		"the tenant's admin":  admin,
		"an operator":         auth.DevToken(auth.RoleOperator, ""),
	} {
		if code, body := send(http.MethodGet, "/internal/v1/tenants/acme/credit-grants", token, nil, ""); code != http.StatusForbidden ||
			!strings.Contains(body, `"code":"forbidden"`) {
			t.Errorf("%s: %d %s, want 403 forbidden", name, code, body)
		}
	}
	if code, body := send(http.MethodGet, "/internal/v1/tenants/acme/credit-grants", "", nil, ""); code != http.StatusUnauthorized {
		t.Errorf("no token: %d %s", code, body)
	}
	if code, body := send(http.MethodGet, "/internal/v1/tenants/acme/credit-grants?limit=0", service, nil, ""); code != http.StatusBadRequest ||
		!strings.Contains(body, `"code":"invalid_limit"`) {
		t.Errorf("limit 0: %d %s, want 400 invalid_limit", code, body)
	}
}

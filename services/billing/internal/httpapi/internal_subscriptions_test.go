package httpapi_test

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/go-chi/chi/v5"

	"github.com/usagebilling/billing/pkg/api/billingapi"
	"github.com/usagebilling/billing/pkg/auth"
	"github.com/usagebilling/billing/services/billing/internal/app"
	bt "github.com/usagebilling/billing/services/billing/internal/billingtest"
	"github.com/usagebilling/billing/services/billing/internal/httpapi"
	"github.com/usagebilling/billing/testkit/apitest"
)

// The internal read of a tenant's subscriptions (query's operator console),
// behind the services' token policy: a service token gets the page the
// tenant's own route answers, byte for byte; a tenant's token, an
// operator's and none are refused; its query is checked as the tenant
// route's is.
func TestSubscriptionsInternal(t *testing.T) {
	pool := bt.NewPool(t)
	now := time.Date(2026, 1, 10, 12, 0, 0, 0, time.UTC)
	svc := app.New(app.Deps{Pool: pool, Clock: func() time.Time { return now }}, app.Config{})
	ib := bt.NewInbox(t, svc)
	bt.DefineMeters(t, pool, ib)
	bt.Decide(t, pool, ib, bt.Plan{Code: "pro", Currency: "USD", Version: 1, EffectiveAt: now}.Raw(t),
		bt.Plan{Code: "basic", Currency: "USD", Version: 1, Seq: 2, EffectiveAt: now}.Raw(t))
	keys, err := auth.NewKeys(auth.DevKey)
	if err != nil {
		t.Fatal(err)
	}
	r := chi.NewRouter()
	r.Use(auth.Middleware(keys, nil))
	api := httpapi.New(svc, nil)
	api.SubscriptionRoutes(r)
	api.InternalSubscriptionRoutes(r)
	srv := httptest.NewServer(apitest.Handler(t, billingapi.YAML(), r))
	t.Cleanup(srv.Close)
	f := &fixture{pool: pool, srv: srv}
	bearer := func(token string, more ...string) map[string]string {
		h := map[string]string{"Authorization": "Bearer " + token}
		for i := 0; i+1 < len(more); i += 2 {
			h[more[i]] = more[i+1]
		}
		return h
	}
	admin := auth.DevToken(auth.RoleBillingAdmin, "t1")
	for i, body := range []string{ // in start order: a plan change ends the one before
		`{"planCode": "pro", "startsAt": "2026-01-11T00:00:00Z"}`,
		`{"planCode": "basic", "startsAt": "2026-01-17T00:00:00Z"}`,
	} {
		key := fmt.Sprintf("s%d", i)
		if got := f.do(t, http.MethodPost, "/v1/tenants/t1/subscriptions", bearer(admin, "Idempotency-Key", key), body); got.status != http.StatusCreated {
			t.Fatalf("subscribe %s: %d %s", key, got.status, got.body)
		}
	}
	service := auth.DevToken(auth.RoleService, "")
	for _, q := range []string{"", "?limit=1"} {
		own := f.do(t, http.MethodGet, "/v1/tenants/t1/subscriptions"+q, bearer(auth.DevToken(auth.RoleViewer, "t1")), "")
		internal := f.do(t, http.MethodGet, "/internal/v1/tenants/t1/subscriptions"+q, bearer(service), "")
		if own.status != http.StatusOK || internal.status != http.StatusOK || string(internal.body) != string(own.body) {
			t.Fatalf("%q: internal %d %s, the tenant's own %d %s", q, internal.status, internal.body, own.status, own.body)
		}
	}
	if got := f.do(t, http.MethodGet, "/internal/v1/tenants/t2/subscriptions", bearer(service), ""); got.status != http.StatusOK ||
		strings.TrimSpace(string(got.body)) != `{"subscriptions":[]}` {
		t.Errorf("another tenant's: %d %s", got.status, got.body)
	}
	for name, token := range map[string]string{
		"the tenant's viewer": auth.DevToken(auth.RoleViewer, "t1"),
		"the tenant's admin":  admin,
		"an operator":         auth.DevToken(auth.RoleOperator, ""),
	} {
		if got := f.do(t, http.MethodGet, "/internal/v1/tenants/t1/subscriptions", bearer(token), ""); got.status != http.StatusForbidden ||
			got.problem(t) != "forbidden" {
			t.Errorf("%s: %d %s, want 403 forbidden", name, got.status, got.body)
		}
	}
	if got := f.do(t, http.MethodGet, "/internal/v1/tenants/t1/subscriptions", nil, ""); got.status != http.StatusUnauthorized {
		t.Errorf("no token: %d %s", got.status, got.body)
	}
	if got := f.do(t, http.MethodGet, "/internal/v1/tenants/t1/subscriptions?limit=0", bearer(service), "").problem(t); got != "invalid_limit" {
		t.Errorf("limit 0: %s, want invalid_limit", got)
	}
}

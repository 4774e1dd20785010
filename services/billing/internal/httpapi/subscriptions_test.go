package httpapi_test

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/go-chi/chi/v5"
	"github.com/google/uuid"

	"github.com/usagebilling/billing/pkg/api/billingapi"
	"github.com/usagebilling/billing/services/billing/internal/app"
	bt "github.com/usagebilling/billing/services/billing/internal/billingtest"
	"github.com/usagebilling/billing/services/billing/internal/httpapi"
	"github.com/usagebilling/billing/testkit/apitest"
)

// Subscriptions over HTTP: refused input writes nothing; subscribe is
// idempotent; a plan change ends the current subscription where the next
// starts; the end route; the list pages.
func TestSubscriptionsOverHTTP(t *testing.T) {
	pool := bt.NewPool(t)
	now := time.Date(2026, 1, 10, 12, 0, 0, 0, time.UTC)
	svc := app.New(app.Deps{Pool: pool, Clock: func() time.Time { return now }}, app.Config{})
	ib := bt.NewInbox(t, svc)
	bt.DefineMeters(t, pool, ib)
	r := chi.NewRouter()
	r.Use(signedIn)
	httpapi.New(svc, nil).SubscriptionRoutes(r)
	srv := httptest.NewServer(apitest.Handler(t, billingapi.YAML(), r))
	t.Cleanup(srv.Close)
	f := &fixture{pool: pool, srv: srv}
	post := func(path, key, body string) response {
		return f.do(t, http.MethodPost, path, map[string]string{"Idempotency-Key": key}, body)
	}
	const subs = "/v1/tenants/t1/subscriptions"
	before := f.state(t)
	for _, tc := range []struct{ body, code string }{
		{`{"planCode": "pro"}`, "unknown_plan"},
		{`{}`, "missing_field"},
		{`{"planCode": "pro", "startsAt": "yesterday"}`, "invalid_field"},
	} {
		if got := post(subs, "bad", tc.body).problem(t); got != tc.code {
			t.Errorf("%s: %s, want %s", tc.body, got, tc.code)
		}
	}
	if after := f.state(t); after != before {
		t.Fatalf("refused subscriptions changed %s to %s", before, after)
	}
	bt.Decide(t, pool, ib, bt.Plan{Code: "pro", Currency: "USD", Version: 1, EffectiveAt: now}.Raw(t),
		bt.Plan{Code: "basic", Currency: "USD", Version: 1, Seq: 2, EffectiveAt: now}.Raw(t))
	if got := post(subs, "old", `{"planCode": "pro", "startsAt": "2026-01-09T00:00:00Z"}`).problem(t); got != "backdated" {
		t.Fatalf("backdated: %s", got)
	}
	first := post(subs, "s1", `{"planCode": "pro", "startsAt": "2026-01-11T00:00:00Z"}`)
	if first.status != http.StatusCreated {
		t.Fatalf("subscribe: %d %s", first.status, first.body)
	}
	if again := post(subs, "s1", `{"planCode": "pro", "startsAt": "2026-01-11T00:00:00Z"}`); again.status != http.StatusCreated ||
		again.header.Get("Idempotent-Replayed") != "true" || string(again.body) != string(first.body) {
		t.Fatalf("replay: %d %s", again.status, again.body)
	}
	if r := post(subs, "s2", `{"planCode": "basic", "startsAt": "2026-01-17T00:00:00Z"}`); r.status != http.StatusCreated {
		t.Fatalf("plan change: %d %s", r.status, r.body)
	}
	var s app.Subscription
	if err := json.Unmarshal(first.body, &s); err != nil {
		t.Fatal(err)
	}
	if got := post(subs+"/"+s.SubscriptionID.String()+"/end", "e1", `{"endsAt": "2026-01-20T00:00:00Z"}`).problem(t); got != "subscription_overlap" {
		t.Fatalf("ending pro past basic's start: %s", got)
	}
	list := f.do(t, http.MethodGet, subs+"?limit=1", nil, "")
	var page struct {
		Subscriptions []app.Subscription `json:"subscriptions"`
		Next          string             `json:"next"`
	}
	if err := json.Unmarshal(list.body, &page); err != nil || len(page.Subscriptions) != 1 || page.Next == "" ||
		page.Subscriptions[0].EndsAt == nil || page.Subscriptions[0].EndsAt.Format(time.RFC3339) != "2026-01-17T00:00:00Z" {
		t.Fatalf("first page: %d %s", list.status, list.body)
	}
	last := f.do(t, http.MethodGet, subs+"?limit=1&cursor="+page.Next, nil, "")
	page.Next = ""
	if err := json.Unmarshal(last.body, &page); err != nil || len(page.Subscriptions) != 1 || page.Next != "" ||
		page.Subscriptions[0].PlanCode != "basic" {
		t.Fatalf("last page: %d %s", last.status, last.body)
	}
	basic := page.Subscriptions[0].SubscriptionID.String()
	// Another spelling of basic's id (braced, urn:uuid:, 32 bare digits)
	// or the nil UUID is refused, and nothing is ended or recorded by it.
	ends := func() string {
		var s string
		if err := pool.QueryRow(t.Context(), `SELECT concat_ws(' ', (SELECT count(*) FROM idempotency_key),
			(SELECT count(*) FROM outbox_event), (SELECT string_agg(coalesce(ends_at::text, 'open'), ',' ORDER BY starts_at) FROM subscription))`).Scan(&s); err != nil {
			t.Fatal(err)
		}
		return s
	}
	was := ends()
	for i, other := range []string{"%7B" + basic + "%7D", "urn:uuid:" + basic, strings.ReplaceAll(basic, "-", ""), uuid.Nil.String()} {
		r := post(subs+"/"+other+"/end", fmt.Sprintf("x%d", i), `{"endsAt": "2026-02-01T00:00:00Z"}`)
		if r.status != http.StatusBadRequest || r.problem(t) != "invalid_subscription_id" {
			t.Fatalf("end %s: %d %s, want 400 invalid_subscription_id", other, r.status, r.body)
		}
	}
	if now := ends(); now != was {
		t.Fatalf("written by refused ends: %q before, %q after", was, now)
	}
	if r := post(subs+"/"+basic+"/end", "e2", `{"endsAt": "2026-02-01T00:00:00Z"}`); r.status != http.StatusOK {
		t.Fatalf("end: %d %s", r.status, r.body)
	}
	if got := post(subs+"/"+basic+"/end", "e3", `{"endsAt": "2026-01-16T00:00:00Z"}`).problem(t); got != "ends_before_start" {
		t.Fatalf("end before start: %s", got)
	}
}

// A tenant's subscriptions in effect at any time from the start of its
// current period on are bounded (BILLING_MAX_SUBSCRIPTIONS): one more is
// 422 limit_exceeded and writes nothing; one that ended inside the period
// still counts (the period's lines priced by a plan come from it), and in
// the next period there is room again.
func TestSubscriptionsPastTheLimit(t *testing.T) {
	pool := bt.NewPool(t)
	now := time.Date(2026, 1, 10, 12, 0, 0, 0, time.UTC)
	clock := func() time.Time { return now }
	svc := app.New(app.Deps{Pool: pool, Clock: func() time.Time { return clock() }}, app.Config{MaxSubscriptions: 2})
	ib := bt.NewInbox(t, svc)
	bt.DefineMeters(t, pool, ib)
	bt.Decide(t, pool, ib, bt.Plan{Code: "pro", Currency: "USD", Version: 1, EffectiveAt: now}.Raw(t))
	r := chi.NewRouter()
	r.Use(signedIn)
	httpapi.New(svc, nil).SubscriptionRoutes(r)
	srv := httptest.NewServer(apitest.Handler(t, billingapi.YAML(), r))
	t.Cleanup(srv.Close)
	f := &fixture{pool: pool, srv: srv}
	subscribe := func(key, startsAt string) response {
		return f.do(t, http.MethodPost, "/v1/tenants/t1/subscriptions", map[string]string{"Idempotency-Key": key},
			`{"planCode": "pro", "startsAt": "`+startsAt+`"}`)
	}
	rows := func() int {
		return bt.Count(t, pool, `SELECT count(*) FROM subscription`) + bt.Count(t, pool, `SELECT count(*) FROM idempotency_key`)
	}
	for i, at := range []string{"2026-01-11T00:00:00Z", "2026-01-12T00:00:00Z"} {
		if r := subscribe(fmt.Sprint("s", i), at); r.status != http.StatusCreated {
			t.Fatalf("subscription %d: %d %s", i, r.status, r.body)
		}
	}
	before := rows()
	third := subscribe("s2", "2026-01-13T00:00:00Z")
	if third.status != http.StatusUnprocessableEntity || third.problem(t) != "limit_exceeded" {
		t.Fatalf("a third subscription: %d %s, want 422 limit_exceeded", third.status, third.body)
	}
	if after := rows(); after != before {
		t.Fatalf("a refused subscription wrote %d rows", after-before)
	}
	// The first has ended (the second started), inside January: it still
	// priced January's facts, so January has no room.
	now = time.Date(2026, 1, 12, 12, 0, 0, 0, time.UTC)
	if r := subscribe("s3", "2026-01-13T00:00:00Z"); r.status != http.StatusUnprocessableEntity || r.problem(t) != "limit_exceeded" {
		t.Fatalf("after the first ended in the period: %d %s, want 422 limit_exceeded", r.status, r.body)
	}
	if after := rows(); after != before {
		t.Fatalf("a refused subscription wrote %d rows", after-before)
	}
	// In February only the second holds: one more fits.
	now = time.Date(2026, 2, 1, 12, 0, 0, 0, time.UTC)
	if r := subscribe("s4", "2026-02-02T00:00:00Z"); r.status != http.StatusCreated {
		t.Fatalf("in the next period: %d %s", r.status, r.body)
	}
}

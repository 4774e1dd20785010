package httpapi_test

import (
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/url"
	"testing"
	"time"

	"github.com/go-chi/chi/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/usagebilling/billing/pkg/api/queryapi"
	"github.com/usagebilling/billing/pkg/auth"
	"github.com/usagebilling/billing/services/query/internal/app"
	"github.com/usagebilling/billing/services/query/internal/httpapi"
	. "github.com/usagebilling/billing/services/query/internal/querytest"
	"github.com/usagebilling/billing/testkit/apitest"
	"github.com/usagebilling/billing/testkit/pgtest"
)

// tenantServer serves the tenant API behind the real access policy.
func tenantServer(t *testing.T, pool *pgxpool.Pool) *httptest.Server {
	t.Helper()
	keys, err := auth.NewKeys(auth.DevKey)
	if err != nil {
		t.Fatal(err)
	}
	log := slog.New(slog.DiscardHandler)
	r := chi.NewRouter()
	r.Use(auth.Middleware(keys, log))
	httpapi.New(app.New(app.Deps{Pool: pool}, app.Config{}), log).Routes(r)
	srv := httptest.NewServer(apitest.Handler(t, queryapi.YAML(), r))
	t.Cleanup(srv.Close)
	return srv
}

type factJSON struct {
	SourceSystem, SourceEventID, MeterCode string
	Properties                             map[string]string
}

type chargeFactJSON struct {
	ChargeID, UsageEventID, MeterCode, Period, OccurrencePeriod, BilledPeriod string
	Late                                                                      bool
	Fact                                                                      *factJSON
}

type chargeFactPage struct {
	Charges []chargeFactJSON
	Next    *string
}

// A tenant's viewer follows a line's charges to their facts, page by page:
// each fact's sourceEventId and properties, none of another tenant's, and
// another tenant's path is 403.
func TestViewerTracesALineToItsFacts(t *testing.T) {
	pool := pgtest.NewPool(t, Template)
	ib := NewInbox(t)
	acme, globex := NewFeed(t, "acme"), NewFeed(t, "globex")
	at := time.Date(2026, 11, 5, 10, 0, 0, 0, time.UTC)
	var evs []Event
	want := map[string]string{} // sourceEventId -> region
	for i, src := range []string{"req-1", "req-2", "req-3"} {
		region := []string{"eu", "us", "ap"}[i]
		u := acme.Fact("api_calls", "2", at.Add(time.Duration(i)*time.Minute), src, map[string]string{"region": region})
		evs = append(evs, u, acme.Charge(u, "2026-11", "0.01"))
		want[src] = region
	}
	other := acme.Fact("storage", "5", at, "disk-1", nil) // another line of the period
	theirs := globex.Fact("api_calls", "7", at, "theirs-1", nil)
	evs = append(evs, other, acme.Charge(other, "2026-11", "0.5"), theirs, globex.Charge(theirs, "2026-11", "0.01"))
	Decide(t, pool, ib, evs...)
	srv := tenantServer(t, pool)
	viewer := auth.Client(auth.DevToken(auth.RoleViewer, "acme"))

	got := map[string]string{}
	path := srv.URL + "/v1/tenants/acme/periods/2026-11/charge-facts?limit=2&lineId=" + url.QueryEscape("charge/api_calls/1")
	pages := 0
	for next := ""; ; pages++ {
		var pg chargeFactPage
		u := path
		if next != "" {
			u += "&cursor=" + url.QueryEscape(next)
		}
		if status, code := call(t, viewer, "GET", u, "", "", &pg); status != 200 {
			t.Fatalf("page %d: %d %s", pages, status, code)
		}
		if len(pg.Charges) > 2 || pages > 3 {
			t.Fatalf("page %d holds %d charges, limit 2", pages, len(pg.Charges))
		}
		for _, c := range pg.Charges {
			if c.Fact == nil || c.MeterCode != "api_calls" || c.Period != "2026-11" {
				t.Fatalf("charge %+v: want an api_calls charge of 2026-11 with its fact", c)
			}
			got[c.Fact.SourceEventID] = c.Fact.Properties["region"]
		}
		if pg.Next == nil {
			break
		}
		next = *pg.Next
	}
	if pages != 1 || len(got) != len(want) {
		t.Fatalf("%d pages, facts %v; want 2 pages of %v", pages+1, got, want)
	}
	for src, region := range want {
		if got[src] != region {
			t.Errorf("fact %s: region %q, want %q", src, got[src], region)
		}
	}
	// Without a line: every charge of the period, the tenant's own only.
	var all chargeFactPage
	if status, code := call(t, viewer, "GET", srv.URL+"/v1/tenants/acme/periods/2026-11/charge-facts", "", "", &all); status != 200 || len(all.Charges) != 4 {
		t.Fatalf("the period's charges: %d %s, %d charges, want 4", status, code, len(all.Charges))
	}

	for _, tt := range []struct {
		name, path string
		status     int
		code       string
	}{
		{"another tenant's charges", "/v1/tenants/globex/periods/2026-11/charge-facts", 403, "forbidden"},
		{"another tenant's late usage", "/v1/tenants/globex/late-usage?period=2026-11", 403, "forbidden"},
		{"bad period", "/v1/tenants/acme/periods/2026-13/charge-facts", 400, "invalid_period"},
		{"bad line", "/v1/tenants/acme/periods/2026-11/charge-facts?lineId=tax%2Fvat", 400, "invalid_line_id"},
		{"bad version", "/v1/tenants/acme/periods/2026-11/charge-facts?lineId=charge%2Fapi_calls%2Fx", 400, "invalid_line_id"},
		{"bad cursor", "/v1/tenants/acme/periods/2026-11/charge-facts?cursor=bm9wZQ", 400, "invalid_cursor"},
		{"limit too large", "/v1/tenants/acme/periods/2026-11/charge-facts?limit=1001", 400, "invalid_limit"},
		{"no period", "/v1/tenants/acme/late-usage", 400, "invalid_period"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			if status, code := call(t, viewer, "GET", srv.URL+tt.path, "", "", nil); status != tt.status || code != tt.code {
				t.Fatalf("%s: %d %s, want %d %s", tt.path, status, code, tt.status, tt.code)
			}
		})
	}
}

// The late-usage report lists the facts billed late into a period with the
// period each occurred in by the tenant's calendar (Los Angeles: a fact of
// 05:00 UTC on November 1st occurred in October), page by page.
func TestLateUsageReportNamesBothPeriods(t *testing.T) {
	pool := pgtest.NewPool(t, Template)
	ib := NewInbox(t)
	f := NewFeed(t, "acme")
	la, err := time.LoadLocation("America/Los_Angeles")
	if err != nil {
		t.Fatal(err)
	}
	octEnd := time.Date(2026, 11, 1, 0, 0, 0, 0, la)
	late1 := f.Fact("api_calls", "3", octEnd.Add(-2*time.Hour), "late-1", map[string]string{"region": "eu"})
	late2 := f.Fact("api_calls", "4", octEnd.Add(-time.Hour), "late-2", nil)
	onTime := f.Fact("api_calls", "5", octEnd.Add(time.Hour), "on-time", nil)
	lateDec := f.Fact("api_calls", "6", octEnd.Add(-3*time.Hour), "late-dec", nil)
	Decide(t, pool, ib, f.ClosedAt("2026-10", octEnd), late1, late2, onTime, lateDec,
		f.LateCharge(late1, "2026-11", "0.01"), f.LateCharge(late2, "2026-11", "0.01"),
		f.Charge(onTime, "2026-11", "0.01"), f.LateCharge(lateDec, "2026-12", "0.01"))
	srv := tenantServer(t, pool)
	viewer := auth.Client(auth.DevToken(auth.RoleViewer, "acme"))

	got := map[string]chargeFactJSON{}
	for next, pages := "", 0; ; pages++ {
		u := srv.URL + "/v1/tenants/acme/late-usage?period=2026-11&limit=1"
		if next != "" {
			u += "&cursor=" + url.QueryEscape(next)
		}
		var pg chargeFactPage
		if status, code := call(t, viewer, "GET", u, "", "", &pg); status != 200 || len(pg.Charges) > 1 || pages > 2 {
			t.Fatalf("page %d: %d %s %+v", pages, status, code, pg)
		}
		for _, c := range pg.Charges {
			got[c.Fact.SourceEventID] = c
		}
		if pg.Next == nil {
			break
		}
		next = *pg.Next
	}
	if len(got) != 2 {
		t.Fatalf("late facts of 2026-11: %v, want late-1 and late-2", got)
	}
	for _, src := range []string{"late-1", "late-2"} {
		c := got[src]
		if !c.Late || c.OccurrencePeriod != "2026-10" || c.BilledPeriod != "2026-11" {
			t.Errorf("%s: %+v, want late, occurred in 2026-10, billed in 2026-11", src, c)
		}
	}
	if got["late-1"].Fact.Properties["region"] != "eu" {
		t.Errorf("late-1's properties: %v", got["late-1"].Fact.Properties)
	}
}

// A tenant runs one reconciliation at a time (each reads a whole period
// from four services): a second while the first runs is 429
// reconciliation_busy, another tenant's runs, and once the first ends the
// tenant may ask again.
func TestTenantReconciliationOneAtATime(t *testing.T) {
	pool := pgtest.NewPool(t, Template)
	release := make(chan struct{})
	entered := make(chan string, 8)
	billing := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		entered <- r.URL.Query().Get("tenantId")
		<-release
		w.WriteHeader(http.StatusServiceUnavailable)
	}))
	t.Cleanup(billing.Close)
	released := false
	free := func() {
		if !released {
			released = true
			close(release)
		}
	}
	t.Cleanup(free)
	srv, _ := operatorServerOf(t, pool, map[string]string{"billing": billing.URL})
	path := func(tenant string) string {
		return srv.URL + "/v1/tenants/" + tenant + "/periods/2026-11/reconciliation"
	}
	start := func(tenant string) chan int {
		done := make(chan int, 1)
		go func() {
			resp, err := auth.Client(auth.DevToken(auth.RoleViewer, tenant)).Get(path(tenant))
			if err != nil {
				done <- 0
				return
			}
			resp.Body.Close()
			done <- resp.StatusCode
		}()
		return done
	}
	acme := start("acme")
	if got := <-entered; got != "acme" {
		t.Fatalf("billing asked for %q, want acme", got)
	}
	viewer := auth.Client(auth.DevToken(auth.RoleViewer, "acme"))
	if status, code := call(t, viewer, "GET", path("acme"), "", "", nil); status != http.StatusTooManyRequests || code != "reconciliation_busy" {
		t.Fatalf("a second reconciliation of acme while one runs: %d %s, want 429 reconciliation_busy", status, code)
	}
	globex := start("globex")
	if got := <-entered; got != "globex" {
		t.Fatalf("billing asked for %q, want globex", got)
	}
	free()
	for name, done := range map[string]chan int{"acme": acme, "globex": globex} {
		if status := <-done; status != http.StatusBadGateway {
			t.Errorf("%s's reconciliation with billing failing: %d, want 502", name, status)
		}
	}
	if status, code := call(t, viewer, "GET", path("acme"), "", "", nil); status != http.StatusBadGateway || code != "service_unavailable" {
		t.Errorf("acme's reconciliation once the first ended: %d %s, want 502 service_unavailable (its slot given back)", status, code)
	}
}

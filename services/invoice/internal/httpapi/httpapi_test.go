package httpapi_test

import (
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/go-chi/chi/v5"
	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/usagebilling/billing/pkg/api/invoiceapi"
	"github.com/usagebilling/billing/pkg/envelope"
	"github.com/usagebilling/billing/pkg/events"
	"github.com/usagebilling/billing/services/invoice/internal/app"
	"github.com/usagebilling/billing/services/invoice/internal/document"
	"github.com/usagebilling/billing/services/invoice/internal/httpapi"
	. "github.com/usagebilling/billing/services/invoice/internal/invoicetest"
	"github.com/usagebilling/billing/testkit/apitest"
	"github.com/usagebilling/billing/testkit/authtest"
	"github.com/usagebilling/billing/testkit/pgtest"
)

func TestMain(m *testing.M) { os.Exit(pgtest.Main(m)) }

// seller is who the test server's documents name.
var seller = document.Seller{Name: "Northwind Metering GmbH", Address: []string{"Friedrichstraße 68", "10117 Berlin"}}

func server(t *testing.T, pool *pgxpool.Pool) *httptest.Server {
	t.Helper()
	r := chi.NewRouter()
	r.Use(authtest.SignedIn("viewer@acme.example", "viewer"))
	httpapi.New(app.New(app.Deps{Pool: pool}, app.Config{}), seller, slog.New(slog.DiscardHandler)).Routes(r)
	srv := httptest.NewServer(apitest.Handler(t, invoiceapi.YAML(), r))
	t.Cleanup(srv.Close)
	return srv
}

func get(t *testing.T, srv *httptest.Server, path string) (int, string, map[string]any) {
	t.Helper()
	resp, err := http.Get(srv.URL + path)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	var v map[string]any
	if err := json.Unmarshal(body, &v); err != nil {
		t.Fatalf("GET %s: body %q is not a JSON object: %v", path, body, err)
	}
	return resp.StatusCode, resp.Header.Get("Content-Type"), v
}

func TestGetInvoices(t *testing.T) {
	pool := pgtest.NewPool(t, Template)
	ib := NewInbox(t)
	p := NewPeriod(t, "acme", "2026-10")
	c1, c2 := p.Charge("USD", "3", "0.335"), p.Charge("KRW", "1", "99.5")
	c3 := p.ChargeOf("USD", "storage_gb", 4, "0.5", "0.01")
	a1 := p.Adjustment("USD", "-0.5")
	closed := p.Close()
	adj := p.Adjustment("USD", "-0.5")
	q := NewPeriod(t, "acme", "2026-11")
	c4, c5 := q.Charge("USD", "2", "1.25"), q.Charge("USD", "1", "1.25")
	Decide(t, pool, ib, c1, c2, c3, a1, closed, adj, c4, c5)
	srv := server(t, pool)

	status, _, body := get(t, srv, "/v1/tenants/acme/invoices?period=2026-10")
	if status != 200 || body["next"] != nil {
		t.Fatalf("list: %d %v, want one page", status, body)
	}
	list := body["invoices"].([]any)
	if len(list) != 2 {
		t.Fatalf("list: %d invoices, want KRW and USD", len(list))
	}
	krw, usd := list[0].(map[string]any), list[1].(map[string]any)
	if krw["currency"] != "KRW" || krw["status"] != "issued" || krw["subtotal"] != "99.5" || krw["total"] != "100" ||
		krw["issuedAt"] == nil || krw["number"] != float64(1) {
		t.Fatalf("KRW invoice %v", krw)
	}
	// 1.005 + 0.005 - 0.5 = 0.51.
	if usd["currency"] != "USD" || usd["subtotal"] != "0.51" || usd["total"] != "0.51" || usd["number"] != float64(2) {
		t.Fatalf("USD invoice %v", usd)
	}
	lines, _ := json.Marshal(usd["lines"])
	want := `[{"amount":"1.005","chargeCount":1,"kind":"charge","lineId":"charge/api_calls/1","meterCode":"api_calls","priceVersion":1,"quantity":"3"},` +
		`{"amount":"0.005","chargeCount":1,"kind":"charge","lineId":"charge/storage_gb/4","meterCode":"storage_gb","priceVersion":4,"quantity":"0.5"},` +
		`{"amount":"-0.5","kind":"adjustment","lineId":"adjustment/` + a1.EventID.String() + `","originEventId":"` + a1.EventID.String() + `"}]`
	if string(lines) != want {
		t.Fatalf("USD lines\n%s\nwant\n%s", lines, want)
	}
	corr := usd["corrections"].([]any)
	if len(corr) != 1 || corr[0].(map[string]any)["originEventId"] != adj.EventID.String() || corr[0].(map[string]any)["amount"] != "-0.5" ||
		corr[0].(map[string]any)["correctionId"] == "" || corr[0].(map[string]any)["issuedAt"] == nil {
		t.Fatalf("USD corrections %v", corr)
	}
	// The rounding line, on the KRW invoice.
	lines, _ = json.Marshal(krw["lines"])
	want = `[{"amount":"99.5","chargeCount":1,"kind":"charge","lineId":"charge/api_calls/1","meterCode":"api_calls","priceVersion":1,"quantity":"1"},` +
		`{"amount":"0.5","kind":"rounding","lineId":"rounding","originEventId":"` + closed.EventID.String() + `"}]`
	if string(lines) != want {
		t.Fatalf("KRW lines\n%s\nwant\n%s", lines, want)
	}

	// Every period, the open one included: its charge line computed from its
	// charges, its subtotal the running sum, no number.
	_, _, body = get(t, srv, "/v1/tenants/acme/invoices")
	all := body["invoices"].([]any)
	if len(all) != 3 {
		t.Fatalf("all periods: %d invoices, want 3", len(all))
	}
	open := all[2].(map[string]any)
	if _, numbered := open["number"]; numbered || open["period"] != "2026-11" || open["status"] != "open" || open["total"] != nil ||
		open["issuedAt"] != nil || open["subtotal"] != "3.75" || len(open["corrections"].([]any)) != 0 {
		t.Fatalf("open invoice %v", open)
	}
	if l := open["lines"].([]any); len(l) != 1 || l[0].(map[string]any)["chargeCount"] != float64(2) || l[0].(map[string]any)["quantity"] != "3" {
		t.Fatalf("open invoice's lines %v, want one line of 2 charges", l)
	}

	// One invoice by id; the same id under another tenant is not found.
	id := usd["invoiceId"].(string)
	status, _, one := get(t, srv, "/v1/tenants/acme/invoices/"+id)
	if status != 200 || one["invoiceId"] != id || one["tenantId"] != "acme" || one["period"] != "2026-10" || one["total"] != "0.51" ||
		len(one["lines"].([]any)) != 3 || one["number"] != float64(2) {
		t.Fatalf("get: %d %v", status, one)
	}
	// An empty list is an empty array, not null.
	status, _, body = get(t, srv, "/v1/tenants/nobody/invoices?period=2026-10")
	if status != 200 || body["invoices"] == nil || len(body["invoices"].([]any)) != 0 {
		t.Fatalf("unknown tenant: %d %v, want 200 and []", status, body)
	}

	for _, tt := range []struct {
		name, path string
		status     int
		code       string
	}{
		{"another tenant's invoice", "/v1/tenants/other/invoices/" + id, 404, "not_found"},
		{"unknown invoice", "/v1/tenants/acme/invoices/" + uuid.NewString(), 404, "not_found"},
		{"invoice id not a uuid", "/v1/tenants/acme/invoices/nope", 400, "invalid_invoice_id"},
		{"invoice id braced", "/v1/tenants/acme/invoices/%7B" + id + "%7D", 400, "invalid_invoice_id"},
		{"invoice id as urn:uuid:", "/v1/tenants/acme/invoices/urn:uuid:" + id, 400, "invalid_invoice_id"},
		{"invoice id of 32 bare digits", "/v1/tenants/acme/invoices/" + strings.ReplaceAll(id, "-", ""), 400, "invalid_invoice_id"},
		{"nil invoice id", "/v1/tenants/acme/invoices/" + uuid.Nil.String(), 400, "invalid_invoice_id"},
		{"invalid tenant on get", "/v1/tenants/a%20b/invoices/" + id, 400, "invalid_tenant_id"},
		{"invalid tenant on list", "/v1/tenants/" + strings.Repeat("x", 129) + "/invoices", 400, "invalid_tenant_id"},
		{"tenant with a dot", "/v1/tenants/a.b/invoices", 400, "invalid_tenant_id"},
		{"period not a month", "/v1/tenants/acme/invoices?period=2026-13", 400, "invalid_period"},
		{"period with a day", "/v1/tenants/acme/invoices?period=2026-10-01", 400, "invalid_period"},
		{"period words", "/v1/tenants/acme/invoices?period=october", 400, "invalid_period"},
		{"period single digit month", "/v1/tenants/acme/invoices?period=2026-1", 400, "invalid_period"},
		{"period of year 0", "/v1/tenants/acme/invoices?period=0000-01", 400, "invalid_period"},
		{"period of year 9999", "/v1/tenants/acme/invoices?period=9999-12", 400, "invalid_period"},
		{"period before 1970", "/v1/tenants/acme/invoices?period=1969-12", 400, "invalid_period"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			status, ct, body := get(t, srv, tt.path)
			if status != tt.status || body["code"] != tt.code || ct != "application/problem+json" {
				t.Fatalf("%s: %d %s %v, want %d %s problem", tt.path, status, ct, body, tt.status, tt.code)
			}
		})
	}
}

// The list is read page by page: limit invoices a page, next the cursor of
// the following page, absent on the last; every invoice once, in (period,
// currency) order, whatever is added meanwhile before the cursor.
func TestListInvoicesPageByPage(t *testing.T) {
	pool := pgtest.NewPool(t, Template)
	ib := NewInbox(t)
	var envs []envelope.Envelope
	var want []string
	for _, period := range []string{"2026-08", "2026-09", "2026-10"} {
		p := NewPeriod(t, "acme", period)
		for _, cur := range []string{"EUR", "JPY", "USD"} {
			envs = append(envs, p.Charge(cur, "1", "1"))
			want = append(want, period+" "+cur)
		}
		if period != "2026-10" {
			envs = append(envs, p.Close())
		}
	}
	Decide(t, pool, ib, envs...)
	srv := server(t, pool)

	read := func(query string) []string {
		t.Helper()
		var got []string
		path := "/v1/tenants/acme/invoices?" + query
		for pages := 0; ; pages++ {
			status, _, body := get(t, srv, path)
			if status != 200 || pages > 10 {
				t.Fatalf("GET %s: %d %v", path, status, body)
			}
			invs := body["invoices"].([]any)
			for _, inv := range invs {
				m := inv.(map[string]any)
				got = append(got, m["period"].(string)+" "+m["currency"].(string))
			}
			next, ok := body["next"].(string)
			if !ok {
				return got
			}
			if len(invs) == 0 {
				t.Fatalf("GET %s: an empty page with a next", path)
			}
			path = "/v1/tenants/acme/invoices?" + query + "&cursor=" + url.QueryEscape(next)
		}
	}
	for _, limit := range []int{1, 2, 4, 9, 10} {
		if got := read(fmt.Sprintf("limit=%d", limit)); !slices.Equal(got, want) {
			t.Fatalf("limit %d: %v, want %v", limit, got, want)
		}
	}
	if got := read("limit=2&period=2026-09"); !slices.Equal(got, want[3:6]) {
		t.Fatalf("one period by 2: %v, want %v", got, want[3:6])
	}
	status, _, body := get(t, srv, "/v1/tenants/acme/invoices?limit=9")
	if status != 200 || len(body["invoices"].([]any)) != 9 || body["next"] != nil {
		t.Fatalf("limit 9 of 9: %d %v, want one page without next", status, body)
	}

	// A page starts after its cursor: an invoice created before it since
	// is not read again, one after it is.
	_, _, first := get(t, srv, "/v1/tenants/acme/invoices?limit=4")
	next := first["next"].(string)
	late := NewPeriod(t, "acme", "2026-10")
	early := NewPeriod(t, "acme", "2026-08")
	Decide(t, pool, ib, late.Charge("KRW", "1", "1"), early.Charge("KRW", "1", "1"))
	_, _, second := get(t, srv, "/v1/tenants/acme/invoices?limit=100&cursor="+url.QueryEscape(next))
	var rest []string
	for _, inv := range second["invoices"].([]any) {
		m := inv.(map[string]any)
		rest = append(rest, m["period"].(string)+" "+m["currency"].(string))
	}
	if wantRest := []string{"2026-09 JPY", "2026-09 USD", "2026-10 EUR", "2026-10 JPY", "2026-10 KRW", "2026-10 USD"}; !slices.Equal(rest, wantRest) {
		t.Fatalf("after the cursor: %v, want %v", rest, wantRest)
	}

	for _, tt := range []struct {
		name, query, code string
	}{
		{"cursor not base64", "cursor=!!!", "invalid_cursor"},
		{"cursor not json", "cursor=" + base64.RawURLEncoding.EncodeToString([]byte("nope")), "invalid_cursor"},
		{"cursor of another shape", "cursor=" + base64.RawURLEncoding.EncodeToString([]byte(`{"x":1}`)), "invalid_cursor"},
		{"cursor with a bad period", "cursor=" + base64.RawURLEncoding.EncodeToString([]byte(`{"period":"2026-13","currency":"USD"}`)), "invalid_cursor"},
		{"limit zero", "limit=0", "invalid_limit"},
		{"limit too large", "limit=1001", "invalid_limit"},
		{"limit not a number", "limit=ten", "invalid_limit"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			status, ct, body := get(t, srv, "/v1/tenants/acme/invoices?"+tt.query)
			if status != 400 || body["code"] != tt.code || ct != "application/problem+json" {
				t.Fatalf("%s: %d %s %v, want 400 %s problem", tt.query, status, ct, body, tt.code)
			}
		})
	}
}

func TestDatabaseDownIs503(t *testing.T) {
	// Nothing listens on port 1: every connection attempt fails.
	pool, err := pgxpool.New(t.Context(), "postgres://invoice@127.0.0.1:1/invoice?connect_timeout=2")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	srv := server(t, pool)
	status, _, body := get(t, srv, "/v1/tenants/acme/invoices")
	if status != 503 || body["code"] != "database_unavailable" {
		t.Fatalf("with the pool closed: %d %v, want 503 database_unavailable", status, body)
	}
}

// A charge line of a dimension price carries its dimensions; an unpriced
// line its meter, quantity and count, amount 0, no price version; a line
// without dimensions none (the document validates every answer).
func TestCatalogLinesInJSON(t *testing.T) {
	pool := pgtest.NewPool(t, Template)
	ib := NewInbox(t)
	p := NewPeriod(t, "acme", "2026-10")
	gpt4 := events.ChargeRated{MeterCode: "tokens", Quantity: D("1000"), UnitPrice: D("0.00003"), Amount: D("0.03"),
		PriceVersion: 2, Dimensions: map[string]string{"model": "gpt-4"}, OccurredAt: time.Now().UTC()}
	seats := events.ChargeRated{MeterCode: "seats", Aggregation: "max", Quantity: D("7"), Unpriced: true, OccurredAt: time.Now().UTC()}
	Decide(t, pool, ib, p.ChargeRated(gpt4), p.ChargeRated(seats), p.Charge("USD", "3", "0.01"), p.Close())
	srv := server(t, pool)
	_, _, body := get(t, srv, "/v1/tenants/acme/invoices?period=2026-10")
	lines, _ := json.Marshal(body["invoices"].([]any)[0].(map[string]any)["lines"])
	want := `[{"amount":"0.03","chargeCount":1,"kind":"charge","lineId":"charge/api_calls/1","meterCode":"api_calls","priceVersion":1,"quantity":"3"},` +
		`{"amount":"0.03","chargeCount":1,"dimensions":{"model":"gpt-4"},"kind":"charge","lineId":"charge/tokens/2/model=gpt-4","meterCode":"tokens","priceVersion":2,"quantity":"1000"},` +
		`{"amount":"0","chargeCount":1,"kind":"unpriced","lineId":"unpriced/seats","meterCode":"seats","quantity":"7"}]`
	if string(lines) != want {
		t.Fatalf("lines\n%s\nwant\n%s", lines, want)
	}
}

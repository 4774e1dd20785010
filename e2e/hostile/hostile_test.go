//go:build hostile

package hostile

import (
	"bufio"
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"regexp"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/go-chi/chi/v5"
	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/usagebilling/billing/e2e/stack"
	"github.com/usagebilling/billing/e2e/stack/stacktest"
	"github.com/usagebilling/billing/pkg/auth"
	"github.com/usagebilling/billing/pkg/envelope"
	"github.com/usagebilling/billing/pkg/events"
	"github.com/usagebilling/billing/pkg/service"
	"github.com/usagebilling/billing/services/billing"
	"github.com/usagebilling/billing/services/invoice"
	"github.com/usagebilling/billing/services/meter"
	"github.com/usagebilling/billing/services/query"
	"github.com/usagebilling/billing/services/usage"
)

// The server timeouts the stack's services run with here, short so that the
// slow-client checks end soon; the suite asserts each slow connection is
// closed, with slowBound as the bound past which it counts as a hang.
const (
	readHeaderTimeout = 2 * time.Second
	readTimeout       = 3 * time.Second
	idleTimeout       = 3 * time.Second
	slowBound         = 30 * time.Second
	tenant            = "hostile"
	// goodPeriod is a valid period that has not begun: a close of it is
	// refused (period_in_future) whatever else the request holds.
	goodPeriod = "2099-01"
)

// route is one route of a service's router and the roles it admits.
type route struct {
	service, method, pattern string
	roles                    []string
}

func (r route) String() string { return r.service + " " + r.method + " " + r.pattern }

var specs = map[string]service.Spec{"meter": meter.Spec, "usage": usage.Spec, "billing": billing.Spec, "invoice": invoice.Spec, "query": query.Spec}

// routesOf builds each service's router as the service does (service.NewRouter
// over its Spec, on its database in the stack) and lists every route with its
// declared roles: the suite covers what the routers serve, not a table.
func routesOf(t *testing.T, s *stack.Stack) []route {
	var out []route
	for _, name := range s.Services() {
		spec := specs[name]
		cfg, err := service.LoadConfig(service.NewEnvFrom(map[string]string{
			"DATABASE_URL": s.DatabaseURL(name), "AUTH_DEV_KEY": "true", "HTTP_ADDR": "127.0.0.1:0"}), spec.Name, spec.DefaultPort)
		if err != nil {
			t.Fatalf("%s config: %v", name, err)
		}
		pool, err := pgxpool.New(t.Context(), s.DatabaseURL(name))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(pool.Close)
		reg := envelope.NewRegistry()
		events.Register(reg)
		if spec.Register != nil {
			spec.Register(reg)
		}
		d := service.Deps{Config: cfg, Logger: slog.New(slog.DiscardHandler), Pool: pool, Metrics: prometheus.NewRegistry(), Registry: reg}
		parts, err := spec.Build(t.Context(), d)
		if err != nil {
			t.Fatalf("%s build: %v", name, err)
		}
		r := service.NewRouter(d, prometheus.NewRegistry(), parts)
		if err := chi.Walk(r, func(method, pattern string, h http.Handler, _ ...func(http.Handler) http.Handler) error {
			var roles []string
			if g, ok := auth.GuardOf(h); ok {
				roles = g.Roles()
			}
			out = append(out, route{name, method, pattern, roles})
			return nil
		}); err != nil {
			t.Fatal(err)
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].String() < out[j].String() })
	return out
}

// outcome is one answer, classified.
type outcome struct {
	route, input string
	status       int
	problem      string // the problem's code; "" when none
	html         bool   // the console's refusal, an HTML page
	err          error  // transport error (a hang or a reset)
}

// tally counts outcomes by route and status, and keeps the failures.
type tally struct {
	byRoute  map[string]map[string]int
	total    int
	failures []string
}

func (t *tally) add(o outcome) {
	if t.byRoute == nil {
		t.byRoute = map[string]map[string]int{}
	}
	if t.byRoute[o.route] == nil {
		t.byRoute[o.route] = map[string]int{}
	}
	key := fmt.Sprint(o.status)
	if o.problem != "" {
		key += " " + o.problem
	}
	if o.html && o.status >= 400 {
		key += " html"
	}
	if o.err != nil {
		key = "error"
	}
	t.byRoute[o.route][key]++
	t.total++
	switch {
	case o.err != nil:
		t.failures = append(t.failures, fmt.Sprintf("%s [%s]: %v", o.route, o.input, o.err))
	case o.status >= 500:
		t.failures = append(t.failures, fmt.Sprintf("%s [%s]: %d %s", o.route, o.input, o.status, o.problem))
	case o.status >= 400 && o.problem == "" && !o.html:
		t.failures = append(t.failures, fmt.Sprintf("%s [%s]: %d without a problem+json body", o.route, o.input, o.status))
	}
}

func (t *tally) print(tb testing.TB) {
	routes := slices.Sorted(func(yield func(string) bool) {
		for r := range t.byRoute {
			if !yield(r) {
				return
			}
		}
	})
	var b strings.Builder
	fmt.Fprintf(&b, "%d bad inputs over %d routes; outcomes by route:\n", t.total, len(routes))
	for _, r := range routes {
		keys := make([]string, 0, len(t.byRoute[r]))
		for k := range t.byRoute[r] {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		parts := make([]string, len(keys))
		for i, k := range keys {
			parts[i] = fmt.Sprintf("%s x%d", k, t.byRoute[r][k])
		}
		fmt.Fprintf(&b, "  %-75s %s\n", r, strings.Join(parts, ", "))
	}
	tb.Log(b.String())
}

// request is one input: a method, a path (already escaped), headers, a body.
type request struct {
	name, method, path string
	header             http.Header
	body               []byte
}

var param = regexp.MustCompile(`\{[^}]+\}`)

// fill fills a pattern's parameters with valid values, but bad for the one
// named bad (with value).
func fill(pattern, bad, value string) string {
	return param.ReplaceAllStringFunc(pattern, func(p string) string {
		if p == bad {
			return value
		}
		switch p {
		case "{tenantId}":
			return tenant
		case "{period}":
			return goodPeriod
		case "{set}":
			return "charges"
		default:
			return uuid.NewString()
		}
	})
}

// badParams are bad values (escaped, as on the wire) of each path
// parameter kind.
func badParams(p string) []string {
	common := []string{"%00", "%FF%FE", "a%00b", strings.Repeat("x", 2000), "%ED%A0%80", "..%2F..%2Fetc", "%27%3B--"}
	switch p {
	case "{tenantId}":
		return append(common, "a%20b", strings.Repeat("t", 129), "t%C3%A9", "-", "t.t")
	case "{period}":
		return append(common, "0000-01", "9999-12", "2026-13", "2026-1", "2026-11%00", "%EF%BC%92%EF%BC%90%EF%BC%92%EF%BC%96-11", "1969-12")
	default:
		return append(common, "not-a-uuid", "00000000-0000-0000-0000-00000000000g", "-1", "0", "1e999")
	}
}

func b64(s string) string { return base64.RawURLEncoding.EncodeToString([]byte(s)) }

// badQueries are query strings with bad values of every parameter the
// routes read: limits, cursors, periods, filters.
var badQueries = []string{
	"limit=-1", "limit=0", "limit=99999999999999999999", "limit=abc", "limit=1e3", "limit=1&limit=2000",
	"cursor=!!!", "cursor=" + b64(`{"a":1,"a":2}`), "cursor=" + b64(`[]`), "cursor=" + b64(`"x"`), "cursor=" + b64(`{"id":"\u0000"}`),
	"cursor=" + strings.Repeat("A", 5000), "cursor=%00", "cursor=%FF",
	"period=0000-01", "period=9999-12", "period=%FF", "period=2026-11%00",
	"reason=%00", "reason=%C3%28", "service=%00", "service=" + strings.Repeat("s", 5000), "tenantId=%00", "tenantId=a%20b",
	"status=%00", "status=nonsense", "after=%00", "after=zzz", "from=0001-01-01T00:00:00Z", "a%00=1", "%zz", "x=" + strings.Repeat("%FF", 3000),
}

// badBodies are request bodies no route accepts: malformed JSON and every
// lenient shape strict decoding refuses.
func badBodies() []struct {
	name        string
	body        []byte
	contentType string
} {
	type b = struct {
		name        string
		body        []byte
		contentType string
	}
	j := "application/json"
	mb := strings.Repeat("a", 1<<20)
	return []b{
		{"empty", nil, j},
		{"truncated", []byte(`{"reason":`), j},
		{"array", []byte(`[]`), j},
		{"string", []byte(`"x"`), j},
		{"number", []byte(`1`), j},
		{"trailing object", []byte(`{"reason":1}{}`), j},
		{"trailing garbage", []byte(`{"x":1} x`), j},
		{"duplicate member", []byte(`{"reason":"a","reason":"b"}`), j},
		{"case-variant members", []byte(`{"meterCode":"a","METERCODE":"x"}`), j},
		{"case-variant member", []byte(`{"METERCODE":"x","CURRENCY":"USD","UNITPRICE":"1"}`), j},
		{"duplicate in array", []byte(`{"events":[{"meterCode":"a","meterCode":"b"}]}`), j},
		{"wrong types", []byte(`{"reason":123,"amount":{},"url":[1],"timeZone":1,"meterCode":true,"events":"x"}`), j},
		{"wrong types 2", []byte(`{"events":[1,2],"tiers":"x","quantity":[]}`), j},
		{"huge exponent", []byte(`{"quantity":1e999999999,"amount":1e999999999}`), j},
		{"huge digits", []byte(`{"amount":` + strings.Repeat("9", 500) + `}`), j},
		{"huge negative", []byte(`{"unitPrice":-1e400}`), j},
		{"escaped NUL", []byte(`{"reason":"a\u0000b","url":"http://x\u0000"}`), j},
		{"raw NUL", []byte("{\"reason\":\"a\x00b\"}"), j},
		{"invalid UTF-8", []byte("{\"reason\":\"\xff\xfe\"}"), j},
		{"invalid UTF-8 key", []byte("{\"\xff\":1}"), j},
		{"lone surrogate", []byte(`{"reason":"\ud800"}`), j},
		{"1 MB string", []byte(`{"reason":"` + mb + `"}`), j},
		{"2 MB body", bytes.Repeat([]byte(" "), 2<<20), j},
		{"deep nesting", []byte(strings.Repeat("[", 100000)), j},
		{"deep objects", []byte(strings.Repeat(`{"a":`, 5000)), j},
		{"text/plain", []byte(`{"reason":`), "text/plain"},
		{"form", []byte("service=usage&eventId=not-a-uuid&reason=%00"), "application/x-www-form-urlencoded"},
		{"form invalid UTF-8", []byte("reason=%FF%FE&eventId=%00&url=%00"), "application/x-www-form-urlencoded"},
		{"multipart", []byte("--x\r\nContent-Disposition: form-data; name=\"reason\"\r\n\r\n\x00\r\n--x--\r\n"), "multipart/form-data; boundary=x"},
		{"utf-16 charset", []byte("\xff\xfe{\x00}\x00"), "application/json; charset=utf-16"},
		{"xml", []byte(`<reason>x</reason>`), "application/xml"},
	}
}

// lenient is an input a hostile client found accepted:
// an otherwise valid command or read, with one thing wrong. Each must be
// refused with its stable code; the read-back shows nothing was written.
type lenient struct {
	service, method, path string
	operator              bool   // an operator's token; else role's, else the suite's tenant's (every tenant role)
	role                  string // a role's token (on the suite's tenant when tenant-scoped)
	contentType           string // "" for application/json
	body                  string
	status                int
	code                  string
}

func lenientInputs() []lenient {
	id := uuid.NewString()
	ops := func(method, path, body string, status int, code string) lenient {
		return lenient{service: "query", method: method, path: path, operator: true, body: body, status: status, code: code}
	}
	ten := func(service, method, path, body string, status int, code string) lenient {
		return lenient{service: service, method: method, path: "/v1/tenants/" + tenant + path, body: body, status: status, code: code}
	}
	redrive := func(eventID, reason string) string {
		return `{"service":"usage","eventId":"` + eventID + `","reason":"` + reason + `"}`
	}
	nines := strings.Repeat("9", 38)
	out := []lenient{
		ops("POST", "/v1/operator/webhook-intents/"+id+"/retry", `{"reason":"endpoint fixed"}`, 404, "webhook_intent_not_found"),
		ops("POST", "/v1/operator/webhook-intents/"+id+"/retry", `{"reason":"bell\u0007"}`, 400, "control_character"),
		ops("POST", "/v1/operator/redrives", redrive(id, `bell\u0007`), 400, "control_character"),
		ops("POST", "/v1/operator/dead-letters/release", redrive(id, `\u001b[2Jclear`), 400, "control_character"),
		ops("GET", "/v1/operator/reconciliation?tenantId="+tenant+"&period=0000-01", "", 400, "invalid_period"),
		ops("GET", "/v1/operator/quarantine?tenantId="+strings.Repeat("t", 1000), "", 400, "invalid_tenant_id"),
		ops("GET", "/v1/operator/quarantine?service=nosuch", "", 400, "unknown_service"),
		ops("GET", "/v1/operator/dead-letters?service=nosuch", "", 400, "unknown_service"),
		ops("GET", "/v1/operator/quarantine?limit=1&limit=500", "", 400, "repeated_query_parameter"),
		ten("invoice", "GET", "/invoices?period=0000-01", "", 400, "invalid_period"),
		ten("query", "GET", "/late-usage?period=0000-01", "", 400, "invalid_period"),
		ten("query", "GET", "/late-usage?period="+goodPeriod+"&cursor=bm9wZQ", "", 400, "invalid_cursor"),
		ten("query", "GET", "/periods/"+goodPeriod+"/charge-facts?lineId=charge%2Fapi_calls%2F0", "", 400, "invalid_line_id"),
		ten("query", "GET", "/periods/"+goodPeriod+"/charge-facts?limit=1001", "", 400, "invalid_limit"),
		ten("query", "GET", "/periods/0000-01/reconciliation", "", 400, "invalid_period"),
		ten("invoice", "GET", "/invoices?limit=1&limit=2", "", 400, "repeated_query_parameter"),
		ten("billing", "GET", "/charges?period="+goodPeriod+"&meterCode="+strings.Repeat("m", 1000), "", 400, "invalid_meter_code"),
		{service: "usage", method: "GET", path: "/internal/v1/quarantine?state=nonsense", role: auth.RoleService, status: 400, code: "invalid_state"},
		ops("GET", "/v1/operator/quarantine?state=nonsense", "", 400, "invalid_state"),
		ten("invoice", "POST", "/webhook-endpoints", `{"url":"https://hooks.example:99999/x"}`, 400, "invalid_url"),
		ten("invoice", "POST", "/webhook-endpoints", `{"url":"https://169.254.169.254/latest/meta-data/"}`, 422, "endpoint_address_refused"),
		ten("invoice", "POST", "/webhook-endpoints", `{"url":"https://[::ffff:10.0.0.1]:8443/x"}`, 422, "endpoint_address_refused"),
		ten("invoice", "POST", "/webhook-endpoints", `{"url":"http://hooks.example/x"}`, 422, "https_required"),
		ten("billing", "PUT", "/settings", `null`, 400, "malformed_json"),
		ten("billing", "PUT", "/settings", `{"taxRates":[{"code":"VAT","name":"VAT","rate":"1"}]}`, 422, "tax_rate_out_of_range"),
		ten("billing", "PUT", "/settings", `{"taxRates":[{"code":"VAT","name":"VAT","rate":"20%"}]}`, 400, "invalid_tax_rate"),
		ten("billing", "PUT", "/settings", `{"taxRates":[{"code":"VAT","name":"bell\u0007","rate":"0.2"}]}`, 400, "control_character"),
		ten("invoice", "POST", "/credit-grants", `{"currency":"USD","amount":"`+nines+`","reason":"r"}`, 400, "decimal_out_of_range"),
		ten("invoice", "POST", "/credit-grants", `{"currency":"USD","amount":"0.001","reason":"r"}`, 422, "amount_precision"),
		ten("invoice", "POST", "/credit-grants", `{"currency":"USD","amount":"5","reason":"bell\u0007"}`, 400, "control_character"),
		ten("invoice", "POST", "/credit-grants", `{"currency":"USD","amount":"5","reason":"r","expiresAt":"2000-01-01T00:00:00Z"}`, 422, "invalid_expiry"),
		ten("invoice", "POST", "/alerts", `{"kind":"usage","meterCode":"api_calls","threshold":"`+nines+`"}`, 400, "decimal_out_of_range"),
		ten("invoice", "POST", "/alerts", `{"kind":"usage","meterCode":"api_calls","threshold":"1e3"}`, 400, "invalid_threshold"),
		ten("invoice", "POST", "/alerts", `{"kind":"usage","meterCode":"api_calls","threshold":"0"}`, 400, "invalid_threshold"),
		ten("invoice", "POST", "/alerts", `{"kind":"usage","meterCode":"../calls","threshold":"1"}`, 400, "invalid_meter_code"),
		ten("invoice", "POST", "/alerts", `{"kind":"usage","meterCode":"api_calls","currency":"USD","threshold":"1"}`, 400, "invalid_field"),
		ten("invoice", "POST", "/alerts", `{"kind":"spend","currency":"USD","threshold":"0.001"}`, 422, "amount_precision"),
		ten("invoice", "POST", "/alerts", `{"kind":"alarm","currency":"USD","threshold":"1"}`, 400, "invalid_kind"),
		ten("billing", "POST", "/adjustments", `{"correctionOf":"`+id+`","amount":"-1","currency":"USD","reason":"bell\u0007"}`, 400, "control_character"),
		ten("billing", "POST", "/adjustments", `{"correctionOf":"`+id+`","amount":"`+nines+`","currency":"USD","reason":"r"}`, 400, "decimal_out_of_range"),
		ten("meter", "POST", "/prices", `{"meterCode":"api","currency":"USD","unitPrice":"`+nines+`"}`, 400, "decimal_out_of_range"),
		ten("usage", "POST", "/usage", `{"sourceSystem":"s","sourceEventId":"e","meterCode":"api","quantity":"`+nines+`","occurredAt":"`+
			time.Now().UTC().Format(time.RFC3339)+`"}`, 400, "decimal_out_of_range"),
	}
	for _, e := range []string{uuid.Nil.String(), "{" + id + "}", "urn:uuid:" + id, strings.ReplaceAll(id, "-", "")} {
		out = append(out,
			ops("POST", "/v1/operator/redrives", redrive(e, "r"), 400, "invalid_event_id"),
			ops("POST", "/v1/operator/dead-letters/release", redrive(e, "r"), 400, "invalid_event_id"),
			// Path ids too: another spelling is no id (uuid.Parse would
			// read it and end or show the resource of the canonical one).
			ten("billing", "POST", "/subscriptions/"+url.PathEscape(e)+"/end", `{"endsAt":"2099-01-01T00:00:00Z"}`, 400, "invalid_subscription_id"),
			ten("invoice", "GET", "/invoices/"+url.PathEscape(e), "", 400, "invalid_invoice_id"),
			ten("invoice", "DELETE", "/alerts/"+url.PathEscape(e), "", 400, "invalid_alert_id"))
	}
	// A plan's fixed fee and minimum spend are amounts like any other.
	for _, body := range []string{
		`{"code":"hostile_plan","name":"n","currency":"USD","fixedFees":[{"code":"f","name":"F","amount":"` + nines + `"}]}`,
		`{"code":"hostile_plan","name":"n","currency":"USD","minimumSpend":"` + nines + `"}`,
	} {
		out = append(out, lenient{service: "meter", method: "POST", path: "/v1/plans", role: auth.RoleCatalogAdmin, body: body,
			status: 400, code: "decimal_out_of_range"})
	}
	utf16 := ten("billing", "PUT", "/settings", `{"timeZone":"UTC"}`, 415, "unsupported_media_type")
	utf16.contentType = "application/json; charset=utf-16"
	return append(append(out, utf16), catalogInputs()...)
}

// The suite's catalog meter (defined before the read-back): its events
// are of type catalogEventType; the tenant has no price for it.
const (
	catalogMeter     = "hostile_tokens"
	catalogEventType = "hostile.tokens"
)

// catalogInputs are the lenient inputs of the meter catalog's routes
// (docs/catalog.md): meter definitions, properties, CloudEvents, prices
// by dimension and the usage analytics, each with one thing wrong.
func catalogInputs() []lenient {
	admin := func(body string) lenient {
		return lenient{service: "meter", method: "POST", path: "/v1/meters", role: auth.RoleCatalogAdmin, body: body, status: 400, code: "invalid_meter"}
	}
	ten := func(service, method, path, body string, status int, code string) lenient {
		return lenient{service: service, method: method, path: "/v1/tenants/" + tenant + path, body: body, status: status, code: code}
	}
	now := time.Now().UTC()
	fact := func(properties string) string {
		return `{"sourceSystem":"s","sourceEventId":"` + uuid.NewString() + `","meterCode":"api","quantity":"1","occurredAt":"` +
			now.Format(time.RFC3339) + `","properties":` + properties + `}`
	}
	var many []string
	for i := range 17 {
		many = append(many, fmt.Sprintf(`"p%d":"v"`, i))
	}
	event := func(typ string, data string) string {
		return `{"specversion":"1.0","id":"` + uuid.NewString() + `","source":"hostile","type":"` + typ + `","subject":"` + tenant +
			`","time":"` + now.Format(time.RFC3339) + `","data":` + data + `}`
	}
	cloud := func(contentType, body string, status int, code string) lenient {
		return lenient{service: "usage", method: "POST", path: "/v1/events", role: auth.RolePlatformIngest, contentType: contentType,
			body: body, status: status, code: code}
	}
	single, batch := "application/cloudevents+json", "application/cloudevents-batch+json"
	usage := func(query string, status int, code string) lenient {
		return ten("query", "GET", "/meters/api/usage?"+query, "", status, code)
	}
	month := "from=" + now.AddDate(0, -1, 0).Format(time.RFC3339) + "&to=" + now.Format(time.RFC3339)
	out := []lenient{
		admin(`{"code":"bad code!","name":"n","aggregation":"sum"}`),
		admin(`{"code":"m_avg","name":"n","aggregation":"avg"}`),
		admin(`{"code":"m_uc","name":"n","aggregation":"unique_count"}`),
		admin(`{"code":"m_dims","name":"n","aggregation":"sum","dimensions":["a","b","c","d","e","f"]}`),
		admin(`{"code":"m_dup","name":"n","aggregation":"count","dimensions":["a","a"]}`),
		{service: "meter", method: "POST", path: "/v1/meters", role: auth.RoleCatalogAdmin, status: 400, code: "control_character",
			body: `{"code":"m_ctl","name":"bell\u0007","aggregation":"count"}`},
		{service: "meter", method: "POST", path: "/v1/meters", role: auth.RoleCatalogAdmin, status: 409, code: "event_type_taken",
			body: `{"code":"hostile_other","name":"n","aggregation":"count","eventType":"` + catalogEventType + `"}`},
		ten("usage", "POST", "/usage", fact(`{`+strings.Join(many, ",")+`}`), 400, "too_many_properties"),
		ten("usage", "POST", "/usage", fact(`{"model":1}`), 400, "invalid_properties"),
		ten("usage", "POST", "/usage", fact(`{"a b":"v"}`), 400, "invalid_properties"),
		ten("usage", "POST", "/usage", fact(`{"model":"`+strings.Repeat("v", 257)+`"}`), 400, "invalid_properties"),
		ten("usage", "POST", "/usage", fact(`["model"]`), 400, "invalid_properties"),
		ten("meter", "POST", "/prices", `{"meterCode":"api","currency":"USD","unitPrice":"1","dimensions":{"model":"gpt-4"}}`, 400, "invalid_dimensions"),
		cloud(single, event("no.such.type", `{"tokens":1}`), 400, "unknown_event_type"),
		// One event the tenant has no price for and one of no meter: the
		// batch is refused whole, each event named.
		cloud(batch, `[`+event(catalogEventType, `{"tokens":1}`)+`,`+event("no.such.type", `{}`)+`]`, 400, "events_refused"),
		cloud(batch, `[]`, 400, "missing_field"), // a batch holds 1 to 1,000 events
		usage(month+"&windowSize=week", 400, "invalid_window_size"),
		usage(month+"&windowSize=day&timeZone=Mars/Olympus", 400, "invalid_time_zone"),
		usage(month+"&windowSize=day&timeZone=Local", 400, "invalid_time_zone"),
		usage("from=yesterday&to="+now.Format(time.RFC3339)+"&windowSize=day", 400, "invalid_time"),
		usage("from="+now.Format(time.RFC3339)+"&to="+now.AddDate(0, -1, 0).Format(time.RFC3339)+"&windowSize=day", 400, "invalid_range"),
		usage("from="+now.AddDate(0, -2, 0).Format(time.RFC3339)+"&to="+now.Format(time.RFC3339)+"&windowSize=hour", 400, "range_too_large"),
		usage(month+"&windowSize=day&groupBy=model", 400, "invalid_dimension"),
		usage(month+"&windowSize=day&filter=model", 400, "invalid_filter"),
		usage(month+"&windowSize=day&groupBy=,", 400, "invalid_dimension"),
		ten("query", "GET", "/meters/no_such_meter/usage?"+month+"&windowSize=day", "", 404, "meter_not_found"),
	}
	return out
}

// lenientRequest is the request of l, with a fresh Idempotency-Key.
func lenientRequest(l lenient) request {
	h := http.Header{}
	switch {
	case l.operator:
		h.Set("Authorization", "Bearer "+auth.DevToken(auth.RoleOperator, ""))
	case l.role != "":
		h.Set("Authorization", token(route{roles: []string{l.role}}))
	default:
		h.Set("Authorization", "Bearer "+auth.DevToken(auth.RoleTenant, tenant))
	}
	h.Set("Idempotency-Key", uuid.NewString())
	h.Set("X-Correlation-Id", "hostile-"+uuid.NewString()[:8])
	ct := l.contentType
	if ct == "" {
		ct = "application/json"
	}
	h.Set("Content-Type", ct)
	var body []byte
	if l.body != "" {
		body = []byte(l.body)
	}
	return request{"lenient " + clip(l.body), l.method, l.path, h, body}
}

// console is the operator console's session: its routes are a browser's,
// signed in with a cookie, their forms carrying a CSRF token; their
// refusals are HTML pages for a person, not problem+json.
var console struct{ cookie, csrf string }

func isConsole(r route) bool { return strings.HasPrefix(r.pattern, "/console") }

var csrfField = regexp.MustCompile(`name="csrf" value="([^"]+)"`)

// signIn makes the console session: the operator's development token as
// the console's cookie, and the CSRF token of its forms read from a page.
func signIn(t *testing.T, ctx context.Context, c *http.Client, base string) {
	console.cookie = "console_session=" + auth.DevToken(auth.RoleOperator, "")
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, base+"/console/quarantine", nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Cookie", console.cookie)
	resp, err := c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	page, _ := io.ReadAll(resp.Body)
	m := csrfField.FindSubmatch(page)
	if resp.StatusCode != http.StatusOK || m == nil {
		t.Fatalf("console: %d, no form token in the page", resp.StatusCode)
	}
	console.csrf = string(m[1])
}

// consoleForms are console form bodies each invalid for the route (the
// form token is right, so they reach the handler): NUL and invalid UTF-8
// in the reason or the service, a bad event id, no reason, a reason too
// long. A webhook retry reads the reason alone (its intent is the path's):
// it gets only the forms with a bad reason.
func consoleForms(r route) []string {
	csrf := "csrf=" + url.QueryEscape(console.csrf)
	id := uuid.NewString()
	forms := []string{
		csrf + "&service=usage&eventId=" + id + "&reason=a%00b",
		csrf + "&service=usage&eventId=" + id + "&reason=%FF%FE",
		csrf + "&service=usage&eventId=" + id + "&reason=",
		csrf + "&service=usage&eventId=" + id + "&reason=" + strings.Repeat("r", 600),
		csrf + "&service=usage&eventId=" + id + "&reason=" + strings.Repeat("r", 1<<20),
		csrf + "&service=nonesuch&eventId=" + id + "&reason=r%00",
		"csrf=forged&service=usage&eventId=" + id + "&reason=%00",
		csrf + "&%zz=1&reason=%00",
	}
	if strings.HasPrefix(r.pattern, "/console/webhooks/") {
		return forms
	}
	return append(forms,
		csrf+"&service=usage%00&eventId="+id+"&reason=r",
		csrf+"&service=%C3%28&eventId="+id+"&reason=r",
		csrf+"&service=usage&eventId=not-a-uuid&reason=r",
		csrf+"&service=usage&eventId=%00&reason=r",
		csrf+"&service=nonesuch&eventId="+id+"&reason=r")
}

// token is a development token of the route's first role (on the suite's
// tenant for a tenant-scoped role): what lets the bad input reach the
// handler.
func token(r route) string {
	if len(r.roles) == 0 {
		return ""
	}
	role := r.roles[0]
	t := ""
	if auth.TenantScoped(role) {
		t = tenant
	}
	return "Bearer " + auth.DevToken(role, t)
}

func baseHeader(r route) http.Header {
	h := http.Header{}
	if isConsole(r) {
		h.Set("Cookie", console.cookie)
	} else if tok := token(r); tok != "" {
		h.Set("Authorization", tok)
	}
	h.Set("Idempotency-Key", uuid.NewString())
	h.Set("X-Correlation-Id", "hostile-"+uuid.NewString()[:8])
	h.Set("Content-Type", "application/json")
	return h
}

// inputs are the bad requests for one route.
func inputs(r route, served map[string][]string) []request {
	var out []request
	add := func(name, method, path string, h http.Header, body []byte) {
		out = append(out, request{name, method, path, h, body})
	}
	// A body no route accepts, sent with the mutations of the path, query
	// and headers so that no one of them can be a valid command.
	badBody := []byte(`{"reason":`)
	body := func() []byte {
		if r.method == http.MethodGet || r.method == http.MethodDelete {
			return nil
		}
		return badBody
	}
	for _, p := range param.FindAllString(r.pattern, -1) {
		for _, v := range badParams(p) {
			add("path "+p+"="+clip(v), r.method, fill(r.pattern, p, v), baseHeader(r), body())
		}
	}
	for _, q := range badQueries {
		add("query "+clip(q), r.method, fill(r.pattern, "", "")+"?"+q, baseHeader(r), body())
	}
	if r.method == http.MethodPost || r.method == http.MethodPut || r.method == http.MethodPatch {
		for _, b := range badBodies() {
			h := baseHeader(r)
			h.Set("Content-Type", b.contentType)
			add("body "+b.name, r.method, fill(r.pattern, "", ""), h, b.body)
		}
	}
	if isConsole(r) && r.method == http.MethodPost {
		for i, f := range consoleForms(r) {
			h := baseHeader(r)
			h.Set("Content-Type", "application/x-www-form-urlencoded")
			add(fmt.Sprintf("console form %d", i), r.method, fill(r.pattern, "", ""), h, []byte(f))
		}
	}
	// Headers: oversize, invalid UTF-8 keys, no or bad credentials.
	h := baseHeader(r)
	h.Set("X-Junk", strings.Repeat("j", 40<<10))
	add("header 40 KB", r.method, fill(r.pattern, "", ""), h, body())
	h = baseHeader(r)
	h.Set("Idempotency-Key", "\xff\xfe")
	h.Set("X-Correlation-Id", "\xff")
	add("header invalid UTF-8", r.method, fill(r.pattern, "", ""), h, body())
	h = baseHeader(r)
	h.Set("Idempotency-Key", strings.Repeat("k", 4000))
	h.Set("X-Correlation-Id", strings.Repeat("c", 4000))
	add("header long keys", r.method, fill(r.pattern, "", ""), h, body())
	for _, a := range []string{"", "Bearer x.y.z", "Basic YTpi", "Bearer " + strings.Repeat("A", 20000)} {
		h = baseHeader(r)
		if a == "" {
			h.Del("Authorization")
		} else {
			h.Set("Authorization", a)
		}
		add("credential "+clip(a), r.method, fill(r.pattern, "", ""), h, body())
	}
	// Wrong methods: every method the pattern does not serve.
	for _, m := range []string{http.MethodGet, http.MethodPost, http.MethodPut, http.MethodPatch, http.MethodDelete} {
		if slices.Contains(served[r.service+" "+r.pattern], m) {
			continue
		}
		add("method "+m, m, fill(r.pattern, "", ""), baseHeader(r), badBody)
	}
	return out
}

func clip(s string) string {
	if len(s) > 40 {
		return s[:40] + "..."
	}
	return s
}

// send sends one request and classifies the answer.
func send(ctx context.Context, c *http.Client, base string, in request) (int, string, error) {
	status, code, _, err := sendHTML(ctx, c, base, in)
	return status, code, err
}

// sendHTML is send that also says whether the answer was an HTML page.
func sendHTML(ctx context.Context, c *http.Client, base string, in request) (int, string, bool, error) {
	req, err := http.NewRequestWithContext(ctx, in.method, base+in.path, bytes.NewReader(in.body))
	if err != nil {
		return 0, "", false, fmt.Errorf("build: %w", err)
	}
	req.Header = in.header
	resp, err := c.Do(req)
	if err != nil {
		return 0, "", false, err
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if err != nil {
		return resp.StatusCode, "", false, fmt.Errorf("read the answer: %w", err)
	}
	html := strings.HasPrefix(resp.Header.Get("Content-Type"), "text/html")
	if resp.StatusCode < 400 || resp.Header.Get("Content-Type") != "application/problem+json" {
		return resp.StatusCode, "", html, nil
	}
	var p struct{ Code string }
	if json.Unmarshal(raw, &p) != nil || p.Code == "" {
		return resp.StatusCode, "", false, nil
	}
	return resp.StatusCode, p.Code, false, nil
}

// snapshot reads what a write would change, through the APIs: the items
// of every list the suite's tenant and the operator can read.
func snapshot(t *testing.T, ctx context.Context, c *http.Client, urls map[string]string, routes []route) map[string]string {
	out := map[string]string{}
	for _, r := range routes {
		if r.method != http.MethodGet || slices.Contains(auth.OpenPaths, r.pattern) || isConsole(r) ||
			strings.Contains(r.pattern, "{") && !onlyTenant(r.pattern) {
			continue
		}
		path := fill(r.pattern, "", "")
		if strings.Contains(r.pattern, "/periods/") {
			continue
		}
		switch r.pattern {
		case "/v1/tenants/{tenantId}/charges": // a period's charges: this month's
			path += "?period=" + time.Now().UTC().Format("2006-01")
		case "/v1/operator/reconciliation":
			path += "?tenantId=" + tenant + "&period=" + time.Now().UTC().Format("2006-01")
		case "/v1/tenants/{tenantId}/late-usage": // the facts billed late into this month
			path += "?period=" + time.Now().UTC().Format("2006-01")
		}
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, urls[r.service]+path, nil)
		if err != nil {
			t.Fatal(err)
		}
		if tok := token(r); tok != "" {
			req.Header.Set("Authorization", tok)
		}
		resp, err := c.Do(req)
		if err != nil {
			t.Fatalf("snapshot %s: %v", r, err)
		}
		raw, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		var v map[string]any
		desc := fmt.Sprint(resp.StatusCode)
		if json.Unmarshal(raw, &v) == nil {
			if r.pattern == "/v1/tenants/{tenantId}/summary" {
				desc += " " + summaryTotals(v)
			}
			// A list: the length of each array member ("items", "prices", ...).
			for _, k := range slices.Sorted(func(yield func(string) bool) {
				for k := range v {
					if !yield(k) {
						return
					}
				}
			}) {
				if a, ok := v[k].([]any); ok {
					desc += fmt.Sprintf(" %s: %d", k, len(a))
				}
			}
		}
		out[r.String()] = desc
	}
	return out
}

func onlyTenant(pattern string) bool {
	return strings.Count(pattern, "{") == 1 && strings.Contains(pattern, "{tenantId}")
}

// summaryTotals are a summary's money figures (what a write would move),
// without its timestamps.
func summaryTotals(v map[string]any) string {
	keys := make([]string, 0, len(v))
	for k := range v {
		if !strings.HasSuffix(strings.ToLower(k), "at") && !strings.Contains(strings.ToLower(k), "through") {
			keys = append(keys, k)
		}
	}
	sort.Strings(keys)
	var b strings.Builder
	for _, k := range keys {
		raw, _ := json.Marshal(v[k])
		fmt.Fprintf(&b, "%s=%s ", k, raw)
	}
	return b.String()
}

// TestHostileInput starts the five services and sends every route the bad
// inputs above, then slow clients, then reads back that nothing was
// written. It prints the outcomes by route.
func TestHostileInput(t *testing.T) {
	ctx := t.Context()
	began := time.Now()
	s := stacktest.Start(t, stack.Options{PostgresFast: true, DirectDB: true, Env: map[string]string{
		"HTTP_READ_HEADER_TIMEOUT": readHeaderTimeout.String(),
		"HTTP_READ_TIMEOUT":        readTimeout.String(),
		"HTTP_IDLE_TIMEOUT":        idleTimeout.String(),
		"RATE_LIMIT_RPS":           "100000", // the suite's own rate is not what is tested
		"RATE_LIMIT_BURST":         "100000",
	}})
	urls := s.URLs()
	routes := routesOf(t, s)
	served := map[string][]string{}
	for _, r := range routes {
		served[r.service+" "+r.pattern] = append(served[r.service+" "+r.pattern], r.method)
	}
	client := &http.Client{Timeout: slowBound, CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}

	// A price for the suite's tenant, so that its lists are not empty.
	seed := request{"seed", http.MethodPost, "/v1/tenants/" + tenant + "/prices", baseHeader(route{roles: []string{auth.RoleBillingAdmin}}),
		[]byte(`{"meterCode":"api","currency":"USD","unitPrice":"0.01"}`)}
	if status, code, err := send(ctx, client, urls["meter"], seed); err != nil || status/100 != 2 {
		t.Fatalf("seed price: %d %s %v", status, code, err)
	}
	define := request{"seed meter", http.MethodPost, "/v1/meters", baseHeader(route{roles: []string{auth.RoleCatalogAdmin}}),
		[]byte(`{"code":"` + catalogMeter + `","name":"Hostile tokens","aggregation":"sum","valueProperty":"tokens","dimensions":["model"],"eventType":"` + catalogEventType + `"}`)}
	if status, code, err := send(ctx, client, urls["meter"], define); err != nil || status/100 != 2 {
		t.Fatalf("seed meter: %d %s %v", status, code, err)
	}
	waitCatalog(t, ctx, client, urls)
	signIn(t, ctx, client, urls["query"])
	before := snapshot(t, ctx, client, urls, routes)

	var tl tally
	for _, r := range routes {
		if slices.Contains(auth.OpenPaths, r.pattern) {
			continue
		}
		for _, in := range inputs(r, served) {
			status, code, html, err := sendHTML(ctx, client, urls[r.service], in)
			tl.add(outcome{route: r.String(), input: in.name, status: status, problem: code, err: err, html: html && isConsole(r)})
		}
	}
	// The lenient inputs, each with its own stable refusal; and an actor
	// (the token's subject) holding a control character.
	for _, l := range lenientInputs() {
		status, code, err := send(ctx, client, urls[l.service], lenientRequest(l))
		name := l.service + " " + l.method + " " + strings.SplitN(l.path, "?", 2)[0]
		tl.add(outcome{route: name, input: "lenient", status: status, problem: code, err: err})
		if err == nil && (status != l.status || code != l.code) {
			t.Errorf("lenient input %s %s %s: %d %s, want %d %s", l.service, l.method, clip(l.path)+" "+clip(l.body), status, code, l.status, l.code)
		}
	}
	mallory, err := auth.Token(auth.DevKey, auth.NewClaims("mal\u001b[31mlory", auth.RoleOperator, "", time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	actor := lenientRequest(lenient{method: "POST", path: "/v1/operator/redrives", operator: true,
		body: `{"service":"usage","eventId":"` + uuid.NewString() + `","reason":"r"}`})
	actor.header.Set("Authorization", "Bearer "+mallory)
	if status, code, err := send(ctx, client, urls["query"], actor); err != nil || status != 400 || code != "control_character" {
		t.Errorf("an actor with ESC: %d %s %v, want 400 control_character", status, code, err)
	}
	slow := slowClients(t, strings.TrimPrefix(urls["usage"], "http://"))
	for _, o := range slow {
		tl.add(o)
	}
	tl.print(t)
	raw := rawProtocol(t, strings.TrimPrefix(urls["billing"], "http://"))

	after := snapshot(t, ctx, client, urls, routes)
	for k, v := range before {
		if after[k] != v {
			t.Errorf("written: %s read %q before the suite, %q after", k, v, after[k])
		}
	}
	var lists []string
	for _, k := range slices.Sorted(mapKeys(before)) {
		lists = append(lists, k+": "+before[k])
	}
	t.Logf("read back through the APIs, before and after (compared): %d reads\n  %s", len(before), strings.Join(lists, "\n  "))
	t.Logf("net/http's own answers (before any handler, plain text, not problem+json): %s", strings.Join(raw, "; "))
	if tl.total < 200 {
		t.Errorf("only %d bad inputs", tl.total)
	}
	for _, f := range tl.failures {
		t.Error(f)
	}
	t.Logf("%d inputs, %d failures, in %s", tl.total, len(tl.failures), time.Since(began).Round(time.Second))
}

// waitCatalog waits until usage knows the suite's catalog meter (an event
// of its type is refused no_price_in_effect, not unknown_event_type) and
// query knows the implied meter api (its usage answers 200), so that the
// catalog's lenient inputs meet the refusal they are for.
func waitCatalog(t *testing.T, ctx context.Context, c *http.Client, urls map[string]string) {
	now := time.Now().UTC()
	event := lenient{service: "usage", method: "POST", path: "/v1/events", role: auth.RolePlatformIngest, contentType: "application/cloudevents+json",
		body: `{"specversion":"1.0","id":"` + uuid.NewString() + `","source":"hostile","type":"` + catalogEventType + `","subject":"` + tenant +
			`","time":"` + now.Format(time.RFC3339) + `","data":{"tokens":1}}`}
	read := lenient{service: "query", method: "GET", path: "/v1/tenants/" + tenant + "/meters/api/usage?from=" +
		now.AddDate(0, 0, -1).Format(time.RFC3339) + "&to=" + now.Format(time.RFC3339) + "&windowSize=day"}
	for _, w := range []struct {
		l      lenient
		status int
		code   string
	}{{event, 422, "no_price_in_effect"}, {read, 200, ""}} {
		deadline := time.Now().Add(60 * time.Second)
		for {
			status, code, err := send(ctx, c, urls[w.l.service], lenientRequest(w.l))
			if err == nil && status == w.status && code == w.code {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("the catalog did not reach %s in 60 s: %s %s answers %d %s %v, want %d %s",
					w.l.service, w.l.method, w.l.path, status, code, err, w.status, w.code)
			}
			time.Sleep(100 * time.Millisecond) // polled: the catalog reaches the service through Kafka
		}
	}
}

func mapKeys(m map[string]string) func(func(string) bool) {
	return func(yield func(string) bool) {
		for k := range m {
			if !yield(k) {
				return
			}
		}
	}
}

// slowClients opens connections that send slowly or not at all and checks
// that the server closes each (within slowBound; it should take the read or
// idle timeout), answering no 5xx.
func slowClients(t *testing.T, addr string) []outcome {
	tok := auth.DevToken(auth.RoleIngest, tenant)
	head := func(length int) string {
		return "POST /v1/tenants/" + tenant + "/usage HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer " + tok +
			"\r\nContent-Type: application/json\r\nX-Correlation-Id: slow\r\nContent-Length: " + fmt.Sprint(length) + "\r\n\r\n"
	}
	cases := []struct {
		name  string
		write func(c net.Conn) // what the client sends before it waits
		drip  string           // then sent one byte a second until closed
	}{
		{"slow body", func(c net.Conn) { io.WriteString(c, head(1000)) }, strings.Repeat("x", 1000)},
		{"stalled body", func(c net.Conn) { io.WriteString(c, head(1000)+`{"sourceSystem":`) }, ""},
		{"slow headers", func(c net.Conn) { io.WriteString(c, "GET /healthz HTTP/1.1\r\n") }, strings.Repeat("X-A: b\r\n", 100)},
		{"stalled headers", func(c net.Conn) { io.WriteString(c, "GET /healthz HTTP/1.1\r\nHost: x\r\n") }, ""},
		{"idle keep-alive", func(c net.Conn) { io.WriteString(c, "GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n") }, ""},
	}
	out := make([]outcome, len(cases))
	done := make(chan int)
	for i, tc := range cases {
		go func() {
			defer func() { done <- i }()
			o := outcome{route: "usage slow clients", input: tc.name}
			c, err := net.DialTimeout("tcp", addr, 5*time.Second)
			if err != nil {
				o.err = err
				out[i] = o
				return
			}
			defer c.Close()
			tc.write(c)
			closed := make(chan struct{})
			var statuses []int
			go func() {
				defer close(closed)
				br := bufio.NewReader(c)
				for {
					resp, err := http.ReadResponse(br, nil)
					if err != nil {
						return // closed by the server
					}
					statuses = append(statuses, resp.StatusCode)
					io.Copy(io.Discard, resp.Body)
					resp.Body.Close()
				}
			}()
			start := time.Now()
			tick := time.NewTicker(time.Second)
			defer tick.Stop()
			for n := 0; ; {
				select {
				case <-closed:
					o.status = 0
					for _, s := range statuses {
						o.status = max(o.status, s)
					}
					if o.status >= 400 {
						o.problem = "answered"
					}
					t.Logf("slow client %q: closed by the server after %s (answers %v)", tc.name, time.Since(start).Round(100*time.Millisecond), statuses)
					out[i] = o
					return
				case <-tick.C:
					if time.Since(start) > slowBound {
						o.err = fmt.Errorf("still open after %s", slowBound)
						out[i] = o
						return
					}
					if n < len(tc.drip) {
						c.SetWriteDeadline(time.Now().Add(time.Second))
						c.Write([]byte{tc.drip[n]})
						n++
					}
				}
			}
		}()
	}
	for range cases {
		<-done
	}
	return out
}

// rawProtocol sends what net/http answers itself, before any handler:
// those answers are plain text (net/http offers no hook), recorded, not
// counted as the suite's refusals; the check is that each is answered.
func rawProtocol(t *testing.T, addr string) []string {
	var out []string
	for _, tc := range []struct{ name, req string }{
		{"HTTP/9.9", "GET /healthz HTTP/9.9\r\nHost: x\r\n\r\n"},
		{"garbage request line", "\x00\xff garbage\r\n\r\n"},
		{"header over net/http's 1 MiB limit", "GET /healthz HTTP/1.1\r\nHost: x\r\nX-Junk: " + strings.Repeat("j", 2<<20) + "\r\n\r\n"},
		{"bad header name", "GET /healthz HTTP/1.1\r\nHost: x\r\nBad Header: x\r\n\r\n"},
		{"two Content-Length", "POST /healthz HTTP/1.1\r\nHost: x\r\nContent-Length: 1\r\nContent-Length: 2\r\n\r\nx"},
	} {
		c, err := net.DialTimeout("tcp", addr, 5*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		c.SetDeadline(time.Now().Add(slowBound))
		go func() { io.WriteString(c, tc.req) }()
		resp, err := http.ReadResponse(bufio.NewReader(c), nil)
		switch {
		case err != nil && errors.Is(err, io.EOF):
			out = append(out, tc.name+": closed without an answer")
		case err != nil:
			t.Errorf("%s: %v", tc.name, err)
		default:
			out = append(out, fmt.Sprintf("%s: %d %s", tc.name, resp.StatusCode, resp.Header.Get("Content-Type")))
			resp.Body.Close()
		}
		c.Close()
	}
	return out
}

package httpapi_test

import (
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/go-chi/chi/v5"
	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/usagebilling/billing/pkg/api/queryapi"
	"github.com/usagebilling/billing/pkg/auth"
	"github.com/usagebilling/billing/pkg/envelope"
	"github.com/usagebilling/billing/pkg/events"
	"github.com/usagebilling/billing/pkg/inbox"
	"github.com/usagebilling/billing/pkg/ops"
	"github.com/usagebilling/billing/pkg/page"
	"github.com/usagebilling/billing/services/query/internal/app"
	"github.com/usagebilling/billing/services/query/internal/httpapi"
	"github.com/usagebilling/billing/services/query/internal/operator"
	. "github.com/usagebilling/billing/services/query/internal/querytest"
	"github.com/usagebilling/billing/testkit/apitest"
	"github.com/usagebilling/billing/testkit/pgtest"
)

// operatorServer serves the operator API behind the access policy, with
// "usage" at an address where nothing listens.
func operatorServer(t *testing.T, pool *pgxpool.Pool) (*httptest.Server, *operator.Operator) {
	t.Helper()
	return operatorServerOf(t, pool, map[string]string{"usage": "http://127.0.0.1:1"})
}

// operatorServerOf serves the operator API reaching the other services at
// urls.
func operatorServerOf(t *testing.T, pool *pgxpool.Pool, urls map[string]string) (*httptest.Server, *operator.Operator) {
	t.Helper()
	keys, err := auth.NewKeys(auth.DevKey)
	if err != nil {
		t.Fatal(err)
	}
	log := slog.New(slog.DiscardHandler)
	op := operator.New(pool, ops.NewClient(urls, keys, "query"), app.New(app.Deps{Pool: pool}, app.Config{}).Reconciliation(), log)
	r := chi.NewRouter()
	r.Use(auth.Middleware(keys, log))
	httpapi.NewOperator(op, log).Routes(r)
	srv := httptest.NewServer(apitest.Handler(t, queryapi.YAML(), r))
	t.Cleanup(srv.Close)
	return srv, op
}

var alice = auth.Client(mustToken(auth.NewClaims("alice", auth.RoleOperator, "", time.Hour)))

func mustToken(c auth.Claims) string {
	s, err := auth.Token(auth.DevKey, c)
	if err != nil {
		panic(err)
	}
	return s
}

func call(t *testing.T, c *http.Client, method, url, corr, body string, out any) (int, string) {
	t.Helper()
	req, err := http.NewRequest(method, url, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	if corr != "" {
		req.Header.Set("X-Correlation-Id", corr)
	}
	resp, err := c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if out != nil && resp.StatusCode < 300 {
		if err := json.Unmarshal(b, out); err != nil {
			t.Fatalf("decode %s: %v", b, err)
		}
	}
	var p struct{ Code string }
	_ = json.Unmarshal(b, &p)
	return resp.StatusCode, p.Code
}

// opsInbox decides ops events with the operator's handlers.
func opsInbox(t *testing.T, op *operator.Operator) *inbox.Inbox {
	t.Helper()
	return NewInboxWith(t, op.Handlers())
}

func opsEvent(t *testing.T, eventType, aggID, producer, corr string, payload any) Event {
	t.Helper()
	e, err := envelope.New(envelope.Meta{EventType: eventType, SchemaVersion: 1, TenantID: events.OpsTenant,
		AggregateType: events.AggregateOps, AggregateID: aggID, AggregateVersion: 1, OccurredAt: time.Now(),
		Producer: producer, CorrelationID: corr}, payload)
	if err != nil {
		t.Fatal(err)
	}
	return Event{Topic: events.TopicOps, Envelope: e}
}

func completed(t *testing.T, id uuid.UUID, service string, eventID uuid.UUID, corr, outcome, reason string) Event {
	return opsEvent(t, events.TypeRedriveCompleted, events.RedriveAggregateID(id)+".completed", service, corr,
		events.RedriveCompleted{RedriveID: id, Service: service, EventID: eventID.String(), Action: events.ActionRedrive,
			Outcome: outcome, Reason: reason})
}

func quarantined(t *testing.T, service string, eventID uuid.UUID, tenant, reason string) Event {
	t.Helper()
	sha := uuid.NewString() + uuid.NewString()
	p := events.EventQuarantined{Service: service, EventType: "UsageAccepted", EventTenantID: tenant, Reason: reason,
		Topic: events.TopicUsage, Partition: 2, Offset: 7, QuarantinedAt: time.Now().UTC(), RawSHA256: sha}
	if eventID != uuid.Nil {
		p.EventID = eventID.String()
	}
	return opsEvent(t, events.TypeEventQuarantined, events.QuarantineAggregateID(service, sha), service, "", p)
}

type redriveJSON struct {
	RedriveID string  `json:"redriveId"`
	Service   string  `json:"service"`
	EventID   string  `json:"eventId"`
	State     string  `json:"state"`
	Outcome   *string `json:"outcome"`
	Audit     []struct {
		State, Actor, CorrelationID, Reason string
		Outcome                             *string
		At                                  time.Time
	} `json:"audit"`
}

func TestRedriveIsAudited(t *testing.T) {
	pool := pgtest.NewPool(t, Template)
	srv, op := operatorServer(t, pool)
	eventID := uuid.Must(uuid.NewV7())

	var accepted struct{ RedriveID, State string }
	status, code := call(t, alice, "POST", srv.URL+"/v1/operator/redrives", "ticket-42",
		`{"service":"usage","eventId":"`+eventID.String()+`","reason":"decoder v2 deployed"}`, &accepted)
	if status != http.StatusAccepted || accepted.State != "requested" {
		t.Fatalf("POST redrive: %d %s %+v", status, code, accepted)
	}
	// The request went out through the outbox, addressed to usage.
	var raw []byte
	if err := pool.QueryRow(t.Context(), `SELECT envelope FROM outbox_event WHERE topic = $1`, events.TopicOpsCommands).Scan(&raw); err != nil {
		t.Fatal(err)
	}
	reg := envelope.NewRegistry()
	events.Register(reg)
	d, err := reg.Decode(raw)
	if err != nil {
		t.Fatal(err)
	}
	req := d.Payload.(events.RedriveRequested)
	if req.Service != "usage" || req.EventID != eventID.String() || req.Actor != "alice" || req.RedriveID.String() != accepted.RedriveID ||
		d.Envelope.CorrelationID != "ticket-42" {
		t.Fatalf("RedriveRequested %+v %+v", d.Envelope, req)
	}

	var rd redriveJSON
	if status, _ := call(t, alice, "GET", srv.URL+"/v1/operator/redrives/"+accepted.RedriveID, "", "", &rd); status != 200 ||
		rd.State != "requested" || rd.Outcome != nil || len(rd.Audit) != 1 {
		t.Fatalf("before completion: %d %+v", status, rd)
	}

	// usage answers; the answer delivered twice is recorded once.
	ib := opsInbox(t, op)
	done := completed(t, req.RedriveID, "usage", eventID, "ticket-42", "applied", "")
	Decide(t, pool, ib, done, done)
	if status, _ := call(t, alice, "GET", srv.URL+"/v1/operator/redrives/"+accepted.RedriveID, "", "", &rd); status != 200 {
		t.Fatal(status)
	}
	if rd.State != "completed" || rd.Outcome == nil || *rd.Outcome != "applied" || rd.Service != "usage" || rd.EventID != eventID.String() ||
		len(rd.Audit) != 2 {
		t.Fatalf("after completion: %+v", rd)
	}
	a0, a1 := rd.Audit[0], rd.Audit[1]
	if a0.State != "requested" || a0.Actor != "alice" || a0.CorrelationID != "ticket-42" || a0.Reason != "decoder v2 deployed" ||
		a1.State != "completed" || a1.Actor != "service:usage" || a1.CorrelationID != "ticket-42" || a1.At.Before(a0.At) {
		t.Fatalf("audit %+v", rd.Audit)
	}

	// The audit is append-only.
	for _, sql := range []string{`UPDATE redrive_audit SET actor = 'mallory'`, `DELETE FROM redrive_audit`, `TRUNCATE redrive_audit`} {
		if _, err := pool.Exec(t.Context(), sql); err == nil || !strings.Contains(err.Error(), "append-only") {
			t.Errorf("%s: %v, want refused", sql, err)
		}
	}

	for _, id := range []string{uuid.NewString(), uuid.Nil.String(), // unknown; other spellings of a known one
		"%7B" + accepted.RedriveID + "%7D", "urn:uuid:" + accepted.RedriveID, strings.ReplaceAll(accepted.RedriveID, "-", "")} {
		if status, code := call(t, alice, "GET", srv.URL+"/v1/operator/redrives/"+id, "", "", nil); status != 404 || code != "redrive_not_found" {
			t.Fatalf("redrive %s: %d %s, want 404 redrive_not_found", id, status, code)
		}
	}
}

// TestSubmitRefusesAnUnknownEvent: a redrive or release of an event the
// service answers it does not hold (a typo) is 404 event_not_found, and
// nothing is audited or sent; one it holds is requested. A service that
// cannot be asked gets the request all the same (TestRedriveIsAudited).
func TestSubmitRefusesAnUnknownEvent(t *testing.T) {
	pool := pgtest.NewPool(t, Template)
	held := uuid.NewString()
	// billing, as its internal endpoints answer: one quarantined event
	// (redriven already: state=all finds it), one dead letter.
	billing := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		switch r.URL.Path {
		case "/internal/v1/quarantine":
			if q := r.URL.Query(); q.Get("state") != "all" || q.Get("eventId") != held {
				fmt.Fprint(w, `{"items":[],"next":null}`)
				return
			}
			fmt.Fprintf(w, `{"items":[{"id":1,"eventId":%q,"state":"redriven"}],"next":null}`, held)
		case "/internal/v1/dead-letters":
			fmt.Fprintf(w, `{"items":[{"id":7,"eventId":%q}],"next":null}`, held)
		default:
			http.NotFound(w, r)
		}
	}))
	t.Cleanup(billing.Close)
	srv, _ := operatorServerOf(t, pool, map[string]string{"billing": billing.URL})
	for _, tc := range []struct {
		name, path, service, event string
		status                     int
		code                       string
	}{
		{"redrive of an unknown event", "/v1/operator/redrives", "billing", uuid.NewString(), 404, "event_not_found"},
		{"release of an unknown dead letter", "/v1/operator/dead-letters/release", "billing", uuid.NewString(), 404, "event_not_found"},
		{"redrive of an event query does not hold", "/v1/operator/redrives", operator.Self, uuid.NewString(), 404, "event_not_found"},
		{"release of a dead letter query does not hold", "/v1/operator/dead-letters/release", operator.Self, uuid.NewString(), 404, "event_not_found"},
		{"redrive of a held event", "/v1/operator/redrives", "billing", held, 202, ""},
		{"release of a held dead letter", "/v1/operator/dead-letters/release", "billing", held, 202, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var before int
			if err := pool.QueryRow(t.Context(), `SELECT count(*) FROM redrive_audit`).Scan(&before); err != nil {
				t.Fatal(err)
			}
			body := fmt.Sprintf(`{"service":%q,"eventId":%q,"reason":"typo?"}`, tc.service, tc.event)
			status, code := call(t, alice, "POST", srv.URL+tc.path, "ticket-7", body, nil)
			if status != tc.status || code != tc.code {
				t.Fatalf("%d %s, want %d %s", status, code, tc.status, tc.code)
			}
			var after int
			if err := pool.QueryRow(t.Context(), `SELECT count(*) FROM redrive_audit`).Scan(&after); err != nil {
				t.Fatal(err)
			}
			if want := map[bool]int{true: 1, false: 0}[tc.status == 202]; after-before != want {
				t.Fatalf("%d audit rows written, want %d", after-before, want)
			}
		})
	}
}

func TestSubmitRefusesBadInput(t *testing.T) {
	pool := pgtest.NewPool(t, Template)
	srv, _ := operatorServer(t, pool)
	id := uuid.NewString()
	tests := []struct {
		name, path, corr, body string
		status                 int
		code                   string
	}{
		{"no correlation id", "/v1/operator/redrives", "", `{"service":"usage","eventId":"` + id + `","reason":"r"}`, 400, "missing_correlation_id"},
		{"bad correlation id", "/v1/operator/redrives", "two words", `{"service":"usage","eventId":"` + id + `","reason":"r"}`, 400, "invalid_correlation_id"},
		{"malformed", "/v1/operator/redrives", "c", `{"service":`, 400, "malformed_json"},
		{"unknown field", "/v1/operator/redrives", "c", `{"service":"usage","eventId":"` + id + `","reason":"r","force":true}`, 400, "unknown_field"},
		{"no reason", "/v1/operator/redrives", "c", `{"service":"usage","eventId":"` + id + `"}`, 400, "missing_field"},
		{"long reason", "/v1/operator/redrives", "c", `{"service":"usage","eventId":"` + id + `","reason":"` + strings.Repeat("x", 501) + `"}`, 400, "invalid_field"},
		{"bad event id", "/v1/operator/redrives", "c", `{"service":"usage","eventId":"42","reason":"r"}`, 400, "invalid_event_id"},
		{"unknown service", "/v1/operator/redrives", "c", `{"service":"ledger","eventId":"` + id + `","reason":"r"}`, 400, "unknown_service"},
		{"release: unknown service", "/v1/operator/dead-letters/release", "c", `{"service":"ledger","eventId":"` + id + `","reason":"r"}`, 400, "unknown_service"},
		{"release: no correlation id", "/v1/operator/dead-letters/release", "", `{"service":"usage","eventId":"` + id + `","reason":"r"}`, 400, "missing_correlation_id"},
		{"reason with BEL", "/v1/operator/redrives", "c", `{"service":"usage","eventId":"` + id + `","reason":"r\u0007"}`, 400, "control_character"},
		{"release: reason with ESC", "/v1/operator/dead-letters/release", "c", `{"service":"usage","eventId":"` + id + `","reason":"\u001b[2Jr"}`, 400, "control_character"},
		{"actor with ESC", "/v1/operator/redrives", "c", `{"service":"usage","eventId":"` + id + `","reason":"r"}`, 400, "control_character"},
	}
	// One event has one spelling: uuid.Parse's other forms, and the nil
	// UUID, are refused on both commands.
	for _, path := range []string{"/v1/operator/redrives", "/v1/operator/dead-letters/release"} {
		for _, e := range []string{"00000000-0000-0000-0000-000000000000", "{" + id + "}", "urn:uuid:" + id,
			strings.ReplaceAll(id, "-", "")} {
			tests = append(tests, struct {
				name, path, corr, body string
				status                 int
				code                   string
			}{path + " " + e, path, "c", `{"service":"usage","eventId":"` + e + `","reason":"r"}`, 400, "invalid_event_id"})
		}
	}
	mallory := auth.Client(mustToken(auth.NewClaims("mal\u001b[31mlory", auth.RoleOperator, "", time.Hour)))
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := alice
			if strings.HasPrefix(tt.name, "actor") {
				c = mallory
			}
			status, code := call(t, c, "POST", srv.URL+tt.path, tt.corr, tt.body, nil)
			if status != tt.status || code != tt.code {
				t.Fatalf("%d %s, want %d %s", status, code, tt.status, tt.code)
			}
		})
	}
	var n int
	if err := pool.QueryRow(t.Context(), `SELECT (SELECT count(*) FROM redrive_audit) + (SELECT count(*) FROM outbox_event)`).Scan(&n); err != nil || n != 0 {
		t.Fatalf("%d rows written (%v), want none", n, err)
	}
}

func TestQuarantineView(t *testing.T) {
	pool := pgtest.NewPool(t, Template)
	srv, op := operatorServer(t, pool)
	ib := opsInbox(t, op)
	e1, e2, e3 := uuid.Must(uuid.NewV7()), uuid.Must(uuid.NewV7()), uuid.Must(uuid.NewV7())
	n1 := quarantined(t, "billing", e1, "acme", envelope.ReasonUnsupportedSchema)
	n2 := quarantined(t, "query", e2, "beta", envelope.ReasonDigestMismatch)
	n3 := quarantined(t, "invoice", uuid.Nil, "", envelope.ReasonMalformed)
	n4 := quarantined(t, "billing", e3, "acme", inbox.ReasonDigestConflict)
	Decide(t, pool, ib, n1, n2, n3, n4, n1) // n1 delivered twice

	type viewPage struct {
		Items []struct {
			Service, EventType, TenantID, Reason, State string
			EventID                                     *string
		}
		Next *string
	}
	var p viewPage
	// list reads a page into p; next stays nil when absent.
	list := func(query string) int {
		t.Helper()
		p = viewPage{}
		status, _ := call(t, alice, "GET", srv.URL+"/v1/operator/quarantine?"+query, "", "", &p)
		return status
	}
	if status := list("limit=3"); status != 200 || len(p.Items) != 3 || p.Next == nil {
		t.Fatalf("first page: %d %+v", status, p)
	}
	if p.Items[0].Service != "billing" || *p.Items[0].EventID != e1.String() || p.Items[0].Reason != "unsupported_schema" ||
		p.Items[0].TenantID != "acme" || p.Items[2].EventID != nil || p.Items[2].Reason != "malformed" {
		t.Fatalf("items %+v", p.Items)
	}
	if status := list("limit=3&cursor=" + *p.Next); status != 200 || len(p.Items) != 1 || p.Next != nil {
		t.Fatalf("second page: %d %+v", status, p)
	}
	for query, want := range map[string]int{"service=billing": 2, "tenantId=acme": 2, "reason=digest_mismatch": 1, "service=billing&reason=digest_conflict": 1, "tenantId=zeta": 0} {
		if status := list(query); status != 200 || len(p.Items) != want {
			t.Errorf("%s: %d %d items, want %d", query, status, len(p.Items), want)
		}
	}
	// Filters that can match nothing are the client's mistake, said so.
	for path, want := range map[string]string{
		"/v1/operator/quarantine?service=nosuch":                            "unknown_service",
		"/v1/operator/quarantine?tenantId=" + strings.Repeat("t", 1000):     "invalid_tenant_id",
		"/v1/operator/quarantine?tenantId=a%20b":                            "invalid_tenant_id",
		"/v1/operator/dead-letters?service=nosuch":                          "unknown_service",
		"/v1/operator/reconciliation?tenantId=" + strings.Repeat("t", 1000): "invalid_tenant_id",
	} {
		if status, code := call(t, alice, "GET", srv.URL+path, "", "", nil); status != 400 || code != want {
			t.Errorf("%.60s: %d %s, want 400 %s", path, status, code, want)
		}
	}

	// Redriven e1 (applied) leaves the default view; e3 still quarantined stays.
	Decide(t, pool, ib, completed(t, uuid.New(), "billing", e1, "c", "applied", ""),
		completed(t, uuid.New(), "billing", e3, "c", "quarantined", inbox.ReasonDigestConflict))
	if status := list("service=billing"); status != 200 ||
		len(p.Items) != 1 || *p.Items[0].EventID != e3.String() {
		t.Fatalf("after redrive: %+v", p)
	}
	if status := list("service=billing&state=all"); status != 200 ||
		len(p.Items) != 2 || p.Items[0].State != "redriven" || p.Items[1].State != "quarantined" {
		t.Fatalf("state=all: %+v", p)
	}
	for q, code := range map[string]string{"cursor=x": "invalid_cursor", "cursor=" + page.Encode("seq"): "invalid_cursor",
		"limit=0": "invalid_limit", "limit=1001": "invalid_limit", "limit=many": "invalid_limit", "state=gone": "invalid_state"} {
		if status, got := call(t, alice, "GET", srv.URL+"/v1/operator/quarantine?"+q, "", "", nil); status != 400 || got != code {
			t.Errorf("%s: %d %s, want 400 %s", q, status, got, code)
		}
	}
}

func TestRecoveryShowsAnUnreachableService(t *testing.T) {
	pool := pgtest.NewPool(t, Template)
	srv, _ := operatorServer(t, pool)
	if err := pgx.BeginFunc(t.Context(), pool, func(tx pgx.Tx) error {
		_, err := tx.Exec(t.Context(), `INSERT INTO inbox_quarantine (raw_sha256, reason, raw, topic, partition, "offset")
			VALUES ('abc', 'malformed', '\x00', 't', 0, 0)`)
		return err
	}); err != nil {
		t.Fatal(err)
	}
	var out struct {
		Services map[string]struct {
			Available   bool
			Error       string
			Quarantined int
		}
	}
	if status, _ := call(t, alice, "GET", srv.URL+"/v1/operator/recovery", "", "", &out); status != 200 {
		t.Fatal(status)
	}
	if q := out.Services["query"]; !q.Available || q.Quarantined != 1 {
		t.Errorf("query: %+v", q)
	}
	if u := out.Services["usage"]; u.Available || u.Error == "" {
		t.Errorf("usage: %+v", u)
	}
	if status, code := call(t, alice, "GET", srv.URL+"/v1/operator/reconciliation?tenantId=acme&period=2026-11", "", "", nil); status != 502 || code != "service_unavailable" {
		t.Errorf("reconciliation without billing: %d %s", status, code)
	}
	for _, q := range []string{"tenantId=a%20b&period=2026-11", "tenantId=acme&period=2026-13", "tenantId=acme",
		"tenantId=acme&period=0000-01", "tenantId=acme&period=9999-12", "tenantId=acme&period=1969-12"} {
		if status, code := call(t, alice, "GET", srv.URL+"/v1/operator/reconciliation?"+q, "", "", nil); status != 400 ||
			(strings.Contains(q, "period=") && !strings.Contains(q, "%20") && code != "invalid_period") {
			t.Errorf("%s: %d %s, want 400 invalid_period", q, status, code)
		}
	}
}

// The quarantine view pages with the shared contract: limit 1-1000 (100
// by default), an opaque cursor, next absent on the last page; a page
// starts after its cursor's item whatever arrived meanwhile.
func TestQuarantinePages(t *testing.T) {
	pool := pgtest.NewPool(t, Template)
	srv, op := operatorServer(t, pool)
	ib := opsInbox(t, op)
	var want []string
	for range 5 {
		id := uuid.Must(uuid.NewV7())
		Decide(t, pool, ib, quarantined(t, "billing", id, "acme", envelope.ReasonMalformed))
		want = append(want, id.String())
	}
	for _, tt := range []struct {
		query string
		pages []int
	}{
		{"", []int{5}},
		{"limit=1000", []int{5}},
		{"limit=2", []int{2, 2, 1}},
		{"limit=5", []int{5}},
		{"limit=1", []int{1, 1, 1, 1, 1}},
		{"service=billing&limit=4", []int{4, 1}},
		{"service=invoice&limit=4", []int{0}},
	} {
		items, pages := listPages(t, srv.URL+"/v1/operator/quarantine?"+tt.query, "")
		wantItems := want
		if tt.pages[0] == 0 {
			wantItems = nil
		}
		if fmt.Sprint(pages) != fmt.Sprint(tt.pages) || fmt.Sprint(eventIDs(items)) != fmt.Sprint(wantItems) {
			t.Errorf("%q: pages %v of %v, want %v of %v", tt.query, pages, eventIDs(items), tt.pages, wantItems)
		}
	}

	var first listPage
	if status, _ := call(t, alice, "GET", srv.URL+"/v1/operator/quarantine?limit=2", "", "", &first); status != 200 || first.Next == nil {
		t.Fatalf("first page: %d %+v", status, first)
	}
	late := uuid.Must(uuid.NewV7())
	Decide(t, pool, ib, quarantined(t, "invoice", late, "acme", envelope.ReasonMalformed))
	items, pages := listPages(t, srv.URL+"/v1/operator/quarantine?limit=2", *first.Next)
	if got, want := eventIDs(items), append(want[2:], late.String()); fmt.Sprint(pages) != "[2 2]" || fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("after the first page: pages %v of %v, want [2 2] of %v", pages, got, want)
	}
}

type listedItem struct {
	Service string
	EventID *string
}

type listPage struct {
	Items []listedItem
	Next  *string
}

func eventIDs(items []listedItem) []string {
	var out []string
	for _, it := range items {
		out = append(out, *it.EventID)
	}
	return out
}

// listPages follows next from the page at u after cursor next ("": the
// first) to the last, checking that next is absent there, not null.
func listPages(t *testing.T, u, next string) (items []listedItem, pages []int) {
	t.Helper()
	for range 1000 {
		pageURL := u
		if next != "" {
			pageURL += "&cursor=" + url.QueryEscape(next)
		}
		var raw map[string]json.RawMessage
		if status, code := call(t, alice, "GET", pageURL, "", "", &raw); status != 200 {
			t.Fatalf("%s: %d %s", pageURL, status, code)
		}
		var p listPage
		if err := json.Unmarshal(raw["items"], &p.Items); err != nil {
			t.Fatal(err)
		}
		if n, ok := raw["next"]; ok {
			if err := json.Unmarshal(n, &p.Next); err != nil || p.Next == nil {
				t.Fatalf("%s: next %s, want a cursor or none", pageURL, n)
			}
		}
		items = append(items, p.Items...)
		pages = append(pages, len(p.Items))
		if p.Next == nil {
			return items, pages
		}
		next = *p.Next
	}
	t.Fatal("next never ends")
	return nil, nil
}

// internalAPI serves another service's internal endpoints (pkg/ops) on a
// database of its own, and returns its URL and database.
func internalAPI(t *testing.T) (string, *pgxpool.Pool) {
	t.Helper()
	pool := pgtest.NewPool(t, Template)
	keys, err := auth.NewKeys(auth.DevKey)
	if err != nil {
		t.Fatal(err)
	}
	r := chi.NewRouter()
	r.Use(auth.Middleware(keys, nil))
	ops.NewAPI(pool, nil, nil).Routes(r)
	srv := httptest.NewServer(apitest.Handler(t, queryapi.YAML(), r))
	t.Cleanup(srv.Close)
	return srv.URL, pool
}

// deadLetters adds n dead letters (and one event still pending) to the
// outbox of pool, and returns the event ids of all its dead letters, in
// outbox order.
func deadLetters(t *testing.T, pool *pgxpool.Pool, n int) []string {
	t.Helper()
	ctx := t.Context()
	if _, err := pool.Exec(ctx, `
		WITH e AS (
			INSERT INTO outbox_event (event_id, topic, partition_key, shard, event_type, envelope, attempts, last_error, dead_at)
			SELECT gen_random_uuid(), 'usage.events.v1', 'k', 0, 'UsageAccepted', '\x00'::bytea, 10, 'refused (test)',
			       CASE WHEN i <= $1 THEN now() END
			FROM generate_series(1, $1 + 1) AS i
			RETURNING shard, id, event_id, dead_at)
		INSERT INTO outbox_pending (shard, id, event_id) SELECT shard, id, event_id FROM e WHERE dead_at IS NULL`, n); err != nil {
		t.Fatal(err)
	}
	rows, err := pool.Query(ctx, `SELECT event_id::text FROM outbox_event WHERE dead_at IS NOT NULL ORDER BY id`)
	if err != nil {
		t.Fatal(err)
	}
	ids, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		t.Fatal(err)
	}
	return ids
}

// Dead letters page with the shared contract across services: by service
// name, then outbox order, each service's internal list read as far as the
// page needs.
func TestDeadLetterPages(t *testing.T) {
	pool := pgtest.NewPool(t, Template)
	billingURL, billingDB := internalAPI(t)
	usageURL, usageDB := internalAPI(t)
	srv, _ := operatorServerOf(t, pool, map[string]string{"billing": billingURL, "usage": usageURL})
	billing, query, usage := deadLetters(t, billingDB, 2), deadLetters(t, pool, 3), deadLetters(t, usageDB, 1)
	all := append(append(append([]string{}, billing...), query...), usage...)
	services := func(items []listedItem) string {
		var out []string
		for _, it := range items {
			out = append(out, it.Service)
		}
		return strings.Join(out, " ")
	}
	for _, tt := range []struct {
		query    string
		want     []string
		services string
		pages    []int
	}{
		{"", all, "billing billing query query query usage", []int{6}},
		{"limit=2", all, "billing billing query query query usage", []int{2, 2, 2}},
		{"limit=4", all, "billing billing query query query usage", []int{4, 2}},
		{"limit=1", all, "billing billing query query query usage", []int{1, 1, 1, 1, 1, 1}},
		{"service=query&limit=2", query, "query query query", []int{2, 1}},
		{"service=usage", usage, "usage", []int{1}},
		{"service=billing&limit=2", billing, "billing billing", []int{2}},
	} {
		items, pages := listPages(t, srv.URL+"/v1/operator/dead-letters?"+tt.query, "")
		if fmt.Sprint(eventIDs(items)) != fmt.Sprint(tt.want) || services(items) != tt.services || fmt.Sprint(pages) != fmt.Sprint(tt.pages) {
			t.Errorf("%q: pages %v of %v (%s), want %v of %v (%s)", tt.query, pages, eventIDs(items), services(items),
				tt.pages, tt.want, tt.services)
		}
	}

	// A page larger than a service's internal page (ops.MaxLimit) is read
	// in several calls.
	usage = deadLetters(t, usageDB, ops.MaxLimit+100)
	all = append(append(append([]string{}, billing...), query...), usage...)
	for query, pages := range map[string][]int{"limit=1000": {len(all)}, "": {100, 100, 100, 100, 100, 100, len(all) - 600},
		"service=usage&limit=1000": {len(usage)}, "limit=550": {550, len(all) - 550}} {
		items, got := listPages(t, srv.URL+"/v1/operator/dead-letters?"+query, "")
		want := all
		if strings.HasPrefix(query, "service=usage") {
			want = usage
		}
		if fmt.Sprint(eventIDs(items)) != fmt.Sprint(want) || fmt.Sprint(got) != fmt.Sprint(pages) {
			t.Errorf("%q: pages %v, want %v (or the items differ)", query, got, pages)
		}
	}

	var first listPage
	if status, _ := call(t, alice, "GET", srv.URL+"/v1/operator/dead-letters?limit=1", "", "", &first); status != 200 || first.Next == nil {
		t.Fatalf("first page: %d %+v", status, first)
	}
	var ofQuery listPage
	if status, _ := call(t, alice, "GET", srv.URL+"/v1/operator/dead-letters?service=query&limit=1", "", "", &ofQuery); status != 200 || ofQuery.Next == nil {
		t.Fatalf("first page of query: %d %+v", status, ofQuery)
	}
	for q, want := range map[string]struct {
		status int
		code   string
	}{
		"cursor=x":                 {400, "invalid_cursor"},
		"cursor=" + page.Encode(7): {400, "invalid_cursor"},
		"limit=0":                  {400, "invalid_limit"},
		"limit=1001":               {400, "invalid_limit"},
		"service=ledger":           {400, "unknown_service"},
		"service=usage&cursor=" + url.QueryEscape(*ofQuery.Next): {400, "invalid_cursor"}, // another service's
		"service=query&cursor=" + url.QueryEscape(*first.Next):   {400, "invalid_cursor"}, // the list of all, at billing
	} {
		if status, code := call(t, alice, "GET", srv.URL+"/v1/operator/dead-letters?"+q, "", "", nil); status != want.status || code != want.code {
			t.Errorf("%s: %d %s, want %d %s", q, status, code, want.status, want.code)
		}
	}
	// A service that cannot be reached fails the page that needs it.
	down, _ := operatorServer(t, pool)
	if status, code := call(t, alice, "GET", down.URL+"/v1/operator/dead-letters", "", "", nil); status != http.StatusBadGateway || code != "service_unavailable" {
		t.Errorf("with usage down: %d %s, want 502 service_unavailable", status, code)
	}
	if items, _ := listPages(t, down.URL+"/v1/operator/dead-letters?service=query", ""); fmt.Sprint(eventIDs(items)) != fmt.Sprint(query) {
		t.Errorf("query's own with usage down: %v, want %v", eventIDs(items), query)
	}
}

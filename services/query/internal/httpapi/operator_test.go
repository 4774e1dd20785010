package httpapi_test

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/go-chi/chi/v5"
	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/usagebilling/billing/pkg/auth"
	"github.com/usagebilling/billing/pkg/envelope"
	"github.com/usagebilling/billing/pkg/events"
	"github.com/usagebilling/billing/pkg/inbox"
	"github.com/usagebilling/billing/pkg/ops"
	"github.com/usagebilling/billing/pkg/pgtest"
	"github.com/usagebilling/billing/services/query/internal/httpapi"
	"github.com/usagebilling/billing/services/query/internal/operator"
	. "github.com/usagebilling/billing/services/query/internal/querytest"
)

// operatorServer serves the operator API behind the access policy, with
// "usage" at an address where nothing listens.
func operatorServer(t *testing.T, pool *pgxpool.Pool) (*httptest.Server, *operator.Operator) {
	t.Helper()
	keys, err := auth.NewKeys(auth.DevKey)
	if err != nil {
		t.Fatal(err)
	}
	log := slog.New(slog.DiscardHandler)
	op := operator.New(pool, ops.NewClient(map[string]string{"usage": "http://127.0.0.1:1"}, keys, "query"), log)
	r := chi.NewRouter()
	r.Use(auth.Middleware(keys, log))
	httpapi.NewOperator(op, log).Routes(r)
	srv := httptest.NewServer(r)
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
	reg := envelope.NewRegistry()
	events.Register(reg)
	ib, err := inbox.New(reg, op.Handlers(), inbox.Options{Service: "query", OriginConstraints: operator.OriginConstraints})
	if err != nil {
		t.Fatal(err)
	}
	return ib
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
		events.RedriveCompleted{RedriveID: id, Service: service, EventID: eventID.String(), Action: events.ActionRedecide,
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
	if err := pool.QueryRow(context.Background(), `SELECT envelope FROM outbox_event WHERE topic = $1`, events.TopicOpsCommands).Scan(&raw); err != nil {
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
		if _, err := pool.Exec(context.Background(), sql); err == nil || !strings.Contains(err.Error(), "append-only") {
			t.Errorf("%s: %v, want refused", sql, err)
		}
	}

	if status, code := call(t, alice, "GET", srv.URL+"/v1/operator/redrives/"+uuid.NewString(), "", "", nil); status != 404 || code != "redrive_not_found" {
		t.Fatalf("unknown redrive: %d %s", status, code)
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
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			status, code := call(t, alice, "POST", srv.URL+tt.path, tt.corr, tt.body, nil)
			if status != tt.status || code != tt.code {
				t.Fatalf("%d %s, want %d %s", status, code, tt.status, tt.code)
			}
		})
	}
	var n int
	if err := pool.QueryRow(context.Background(), `SELECT (SELECT count(*) FROM redrive_audit) + (SELECT count(*) FROM outbox_event)`).Scan(&n); err != nil || n != 0 {
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

	type page struct {
		Items []struct {
			Service, EventType, TenantID, Reason, State string
			EventID                                     *string
		}
		Next *string
	}
	var p page
	if status, _ := call(t, alice, "GET", srv.URL+"/v1/operator/quarantine?limit=3", "", "", &p); status != 200 || len(p.Items) != 3 || p.Next == nil {
		t.Fatalf("first page: %d %+v", status, p)
	}
	if p.Items[0].Service != "billing" || *p.Items[0].EventID != e1.String() || p.Items[0].Reason != "unsupported_schema" ||
		p.Items[0].TenantID != "acme" || p.Items[2].EventID != nil || p.Items[2].Reason != "malformed" {
		t.Fatalf("items %+v", p.Items)
	}
	if status, _ := call(t, alice, "GET", srv.URL+"/v1/operator/quarantine?limit=3&cursor="+*p.Next, "", "", &p); status != 200 || len(p.Items) != 1 || p.Next != nil {
		t.Fatalf("second page: %d %+v", status, p)
	}
	for query, want := range map[string]int{"service=billing": 2, "tenantId=acme": 2, "reason=digest_mismatch": 1, "service=billing&reason=digest_conflict": 1, "tenantId=zeta": 0} {
		if status, _ := call(t, alice, "GET", srv.URL+"/v1/operator/quarantine?"+query, "", "", &p); status != 200 || len(p.Items) != want {
			t.Errorf("%s: %d %d items, want %d", query, status, len(p.Items), want)
		}
	}

	// Redriven e1 (applied) leaves the default view; e3 still quarantined stays.
	Decide(t, pool, ib, completed(t, uuid.New(), "billing", e1, "c", "applied", ""),
		completed(t, uuid.New(), "billing", e3, "c", "quarantined", inbox.ReasonDigestConflict))
	if status, _ := call(t, alice, "GET", srv.URL+"/v1/operator/quarantine?service=billing", "", "", &p); status != 200 ||
		len(p.Items) != 1 || *p.Items[0].EventID != e3.String() {
		t.Fatalf("after redrive: %+v", p)
	}
	if status, _ := call(t, alice, "GET", srv.URL+"/v1/operator/quarantine?service=billing&state=all", "", "", &p); status != 200 ||
		len(p.Items) != 2 || p.Items[0].State != "redriven" || p.Items[1].State != "quarantined" {
		t.Fatalf("state=all: %+v", p)
	}
	for _, q := range []string{"cursor=x", "limit=0", "limit=501", "state=gone"} {
		if status, _ := call(t, alice, "GET", srv.URL+"/v1/operator/quarantine?"+q, "", "", nil); status != 400 {
			t.Errorf("%s: %d, want 400", q, status)
		}
	}
}

func TestRecoveryShowsAnUnreachableService(t *testing.T) {
	pool := pgtest.NewPool(t, Template)
	srv, _ := operatorServer(t, pool)
	if err := pgx.BeginFunc(context.Background(), pool, func(tx pgx.Tx) error {
		_, err := tx.Exec(context.Background(), `INSERT INTO inbox_quarantine (raw_sha256, reason, raw, topic, partition, "offset")
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
	for _, q := range []string{"tenantId=a%20b&period=2026-11", "tenantId=acme&period=2026-13", "tenantId=acme"} {
		if status, _ := call(t, alice, "GET", srv.URL+"/v1/operator/reconciliation?"+q, "", "", nil); status != 400 {
			t.Errorf("%s: %d, want 400", q, status)
		}
	}
}

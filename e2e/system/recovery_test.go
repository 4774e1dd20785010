package system_test

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/shopspring/decimal"

	"github.com/usagebilling/billing/pkg/auth"
	"github.com/usagebilling/billing/pkg/envelope"
	"github.com/usagebilling/billing/pkg/events"
	"github.com/usagebilling/billing/pkg/inbox"
	"github.com/usagebilling/billing/services/billing"
	"github.com/usagebilling/billing/testkit/kafkatest"
	"github.com/usagebilling/billing/testkit/servicetest"
)

func build(t *testing.T, m envelope.Meta, payload any) envelope.Envelope {
	t.Helper()
	if m.AggregateVersion == 0 {
		m.AggregateVersion = 1
	}
	if m.SchemaVersion == 0 {
		m.SchemaVersion = 1
	}
	if m.OccurredAt.IsZero() {
		m.OccurredAt = time.Now()
	}
	e, err := envelope.New(m, payload)
	if err != nil {
		t.Fatal(err)
	}
	return e
}

func marshal(t *testing.T, e envelope.Envelope) []byte {
	t.Helper()
	b, err := e.Marshal()
	if err != nil {
		t.Fatal(err)
	}
	return b
}

type accepted struct {
	UsageID uuid.UUID `json:"usageId"`
	EventID uuid.UUID `json:"eventId"`
}

type redriveView struct {
	RedriveID, Service, EventID, State string
	Outcome                            *string
	Audit                              []struct {
		State, Actor, CorrelationID, Reason string
		Outcome                             *string
	}
}

type quarantineItem struct {
	Service, EventType, TenantID, Reason, State string
	EventID                                     *string
}

type reconciliation struct {
	Counts     map[string]int
	Mismatches []struct{ Kind, OriginEventID, Detail string }
}

// The operator's recovery path on the running system: poison events are
// quarantined in the services that consume them while healthy events flow,
// the operator API lists them, a redrive after the fix applies the event
// exactly once with an audit of who asked and why, a digest conflict stays
// quarantined, a dead letter is released, and reconciliation is empty on
// the healthy flow and names the ids of a row broken behind its back.
func TestOperatorRecovery(t *testing.T) {
	s := newStack(t)
	ctx := t.Context()
	op := auth.Client(mustToken(t, auth.NewClaims("alice", auth.RoleOperator, "", time.Hour)))
	acme := auth.Client(auth.DevToken(auth.RoleTenant, "acme"))
	beta := auth.Client(auth.DevToken(auth.RoleTenant, "beta"))
	period := events.Period(time.Now())

	// Healthy before: prices for acme and beta (the facts occur once they
	// are in effect, right after their tenants' published schedule), a
	// usage fact of each.
	var effective time.Time
	for tenant, c := range map[string]*http.Client{"acme": acme, "beta": beta} {
		var p struct{ EffectiveAt time.Time }
		if status, code := call(t, c, "POST", s.URL("meter")+"/v1/tenants/"+tenant+"/prices",
			map[string]string{"Idempotency-Key": "price-" + tenant},
			map[string]string{"meterCode": "api_calls", "currency": "USD", "unitPrice": "0.01"}, &p); status != http.StatusCreated {
			t.Fatalf("price of %s: %d %s", tenant, status, code)
		}
		if p.EffectiveAt.After(effective) {
			effective = p.EffectiveAt
		}
	}
	// Deliberate: the facts must occur once the prices are in effect, a wall-clock time.
	time.Sleep(time.Until(effective) + time.Millisecond)
	postUsage := func(c *http.Client, tenant, source, qty string) accepted {
		t.Helper()
		var a accepted
		servicetest.Eventually(t, "usage "+source+" accepted", time.Minute, func() bool {
			status, code := call(t, c, "POST", s.URL("usage")+"/v1/tenants/"+tenant+"/usage", nil, map[string]string{
				"sourceSystem": "crm", "sourceEventId": source, "meterCode": "api_calls", "quantity": qty,
				"occurredAt": time.Now().UTC().Format(time.RFC3339Nano)}, &a)
			if status != http.StatusCreated && code != "unknown_meter" && code != "no_price_in_effect" {
				t.Fatalf("usage %s: %d %s", source, status, code)
			}
			return status == http.StatusCreated
		})
		return a
	}
	charges := func(c *http.Client, tenant string) map[string]string { // usage event id -> amount
		var out struct {
			Charges []struct{ UsageEventID, Amount string }
		}
		if status, _ := call(t, c, "GET", s.URL("billing")+"/v1/tenants/"+tenant+"/charges?period="+period, nil, nil, &out); status != 200 {
			return nil
		}
		m := map[string]string{}
		for _, ch := range out.Charges {
			m[ch.UsageEventID] = ch.Amount
		}
		return m
	}
	u1 := postUsage(acme, "acme", "u1", "100")
	b1 := postUsage(beta, "beta", "b1", "1")
	servicetest.Eventually(t, "u1 and b1 charged", time.Minute, func() bool {
		return charges(acme, "acme")[u1.EventID.String()] == "1" && charges(beta, "beta")[b1.EventID.String()] == "0.01"
	})

	// Poison.
	v2UsageID := uuid.Must(uuid.NewV7())
	v2 := build(t, envelope.Meta{EventType: events.TypeUsageAccepted, SchemaVersion: 2, TenantID: "beta",
		AggregateType: events.AggregateUsage, AggregateID: v2UsageID.String(), Producer: "usage"},
		events.UsageAccepted{UsageID: v2UsageID, SourceSystem: "crm", SourceEventID: "v2", MeterCode: "api_calls",
			Quantity: decimal.RequireFromString("3"), OccurredAt: time.Now().UTC(), Currency: "USD", PriceVersion: 1})
	kafkatest.Produce(t, s.Brokers, events.TopicUsage, kafkatest.Record{Key: v2.PartitionKey, Value: marshal(t, v2)})

	badDigest := build(t, envelope.Meta{EventType: events.TypePriceActivated, TenantID: "beta", AggregateType: events.AggregatePrice,
		AggregateID: events.PriceSeriesID("sms", "USD"), Producer: "meter"},
		events.PriceActivated{PriceID: uuid.New(), MeterCode: "sms", Currency: "USD", UnitPrice: decimal.RequireFromString("0.5"),
			EffectiveAt: time.Now().UTC(), Version: 1})
	var doc map[string]any
	if err := json.Unmarshal(marshal(t, badDigest), &doc); err != nil {
		t.Fatal(err)
	}
	doc["payloadDigest"] = strings.Repeat("ab", 32)
	tampered, _ := json.Marshal(doc)
	kafkatest.Produce(t, s.Brokers, events.TopicMeter, kafkatest.Record{Key: badDigest.PartitionKey, Value: tampered})

	unknown := build(t, envelope.Meta{EventType: "UsageRetracted", TenantID: "beta", AggregateType: events.AggregateBillingPeriod,
		AggregateID: period, Producer: "billing"}, map[string]string{"why": "no such event"})
	kafkatest.Produce(t, s.Brokers, events.TopicBilling, kafkatest.Record{Key: unknown.PartitionKey, Value: marshal(t, unknown)})

	kafkatest.Produce(t, s.Brokers, events.TopicInvoice, kafkatest.Record{Key: "junk", Value: []byte("\xff\xfe this is not an envelope")})

	forged := build(t, envelope.Meta{EventType: events.TypeUsageAccepted, TenantID: "acme", AggregateType: events.AggregateUsage,
		AggregateID: u1.UsageID.String(), Producer: "usage"},
		events.UsageAccepted{UsageID: u1.UsageID, SourceSystem: "crm", SourceEventID: "u1", MeterCode: "api_calls",
			Quantity: decimal.RequireFromString("100000"), OccurredAt: time.Now().UTC(), Currency: "USD", PriceVersion: 1})
	forged.EventID = u1.EventID // same event id, other content
	kafkatest.Produce(t, s.Brokers, events.TopicUsage, kafkatest.Record{Key: forged.PartitionKey, Value: marshal(t, forged)})

	// Healthy after.
	u2 := postUsage(acme, "acme", "u2", "50")
	servicetest.Eventually(t, "u2 charged and u1 unchanged", time.Minute, func() bool {
		c := charges(acme, "acme")
		return len(c) == 2 && c[u1.EventID.String()] == "1" && c[u2.EventID.String()] == "0.5"
	})
	servicetest.Eventually(t, "query projected u1 and u2", time.Minute, func() bool {
		var sum struct{ Usage struct{ Count int } }
		status, _ := call(t, acme, "GET", s.URL("query")+"/v1/tenants/acme/summary", nil, nil, &sum)
		return status == 200 && sum.Usage.Count == 2
	})

	// Each poison is quarantined with its reason in each service that
	// consumes its topic, and the operator API lists it.
	type q struct{ service, reason, eventID string }
	want := []q{
		{"billing", envelope.ReasonUnsupportedSchema, v2.EventID.String()},
		{"query", envelope.ReasonUnsupportedSchema, v2.EventID.String()},
		{"usage", envelope.ReasonDigestMismatch, badDigest.EventID.String()},
		{"billing", envelope.ReasonDigestMismatch, badDigest.EventID.String()},
		{"query", envelope.ReasonDigestMismatch, badDigest.EventID.String()},
		{"invoice", envelope.ReasonUnknownEventType, unknown.EventID.String()},
		{"query", envelope.ReasonUnknownEventType, unknown.EventID.String()},
		{"query", envelope.ReasonMalformed, ""},
		{"billing", inbox.ReasonDigestConflict, u1.EventID.String()},
		{"query", inbox.ReasonDigestConflict, u1.EventID.String()},
	}
	listed := func(query string) []quarantineItem {
		var page struct {
			Items []quarantineItem
			Next  *string
		}
		if status, code := call(t, op, "GET", s.URL("query")+"/v1/operator/quarantine?"+query, nil, nil, &page); status != 200 {
			t.Fatalf("quarantine view: %d %s", status, code)
		}
		return page.Items
	}
	servicetest.Eventually(t, "every quarantine listed", time.Minute, func() bool { return len(listed("limit=100")) == len(want) })
	items := listed("limit=100")
	for _, w := range want {
		found := false
		for _, it := range items {
			id := ""
			if it.EventID != nil {
				id = *it.EventID
			}
			found = found || (it.Service == w.service && it.Reason == w.reason && id == w.eventID && it.State == "quarantined")
		}
		if !found {
			t.Errorf("not listed: %+v in %+v", w, items)
		}
	}
	if got := listed("service=billing&reason=unsupported_schema"); len(got) != 1 || got[0].TenantID != "beta" {
		t.Errorf("filtered by service and reason: %+v", got)
	}
	if got := listed("tenantId=beta"); len(got) != 7 {
		t.Errorf("filtered by tenant: %d items, want 7", len(got))
	}
	var rec struct {
		Services map[string]struct {
			Available                          bool
			Quarantined, Deferred, DeadLetters int
			OutboxPending                      int
		}
	}
	if status, _ := call(t, op, "GET", s.URL("query")+"/v1/operator/recovery", nil, nil, &rec); status != 200 {
		t.Fatal(status)
	}
	for name, n := range map[string]int{"meter": 0, "usage": 1, "billing": 3, "invoice": 1, "query": 5} {
		if r := rec.Services[name]; !r.Available || r.Quarantined != n {
			t.Errorf("recovery of %s: %+v, want %d quarantined", name, r, n)
		}
	}

	redrive := func(service, eventID, corr string) redriveView {
		t.Helper()
		var acc struct{ RedriveID, State string }
		if status, code := call(t, op, "POST", s.URL("query")+"/v1/operator/redrives", map[string]string{"X-Correlation-Id": corr},
			map[string]string{"service": service, "eventId": eventID, "reason": "redrive " + corr}, &acc); status != http.StatusAccepted {
			t.Fatalf("redrive: %d %s", status, code)
		}
		var rv redriveView
		servicetest.Eventually(t, "redrive "+corr+" completed", time.Minute, func() bool {
			status, _ := call(t, op, "GET", s.URL("query")+"/v1/operator/redrives/"+acc.RedriveID, nil, nil, &rv)
			return status == 200 && rv.State == "completed"
		})
		return rv
	}
	outcome := func(rv redriveView) string {
		if rv.Outcome == nil {
			return ""
		}
		return *rv.Outcome
	}

	// Before the fix the redrive finds the same reason.
	if rv := redrive("billing", v2.EventID.String(), "too-early"); outcome(rv) != "quarantined" || rv.Audit[1].Reason != envelope.ReasonUnsupportedSchema {
		t.Fatalf("redrive before the fix: %+v", rv)
	}

	// The fix: billing restarts with a decoder for UsageAccepted v2.
	s.Stop("billing")
	fixed := billing.Spec
	fixed.Register = func(r *envelope.Registry) {
		envelope.Register[events.UsageAccepted](r, events.TypeUsageAccepted, 2)
	}
	s.Start(fixed)

	rv := redrive("billing", v2.EventID.String(), "fix-v2")
	if outcome(rv) != "applied" || rv.Service != "billing" || rv.EventID != v2.EventID.String() || len(rv.Audit) != 2 {
		t.Fatalf("redrive after the fix: %+v", rv)
	}
	if a := rv.Audit[0]; a.State != "requested" || a.Actor != "alice" || a.CorrelationID != "fix-v2" || a.Reason != "redrive fix-v2" {
		t.Errorf("requested: %+v", a)
	}
	if a := rv.Audit[1]; a.State != "completed" || a.Actor != "service:billing" || a.CorrelationID != "fix-v2" {
		t.Errorf("completed: %+v", a)
	}
	if c := charges(beta, "beta"); len(c) != 2 || c[v2.EventID.String()] != "0.03" {
		t.Fatalf("beta charges after the redrive: %v", c)
	}
	if rv := redrive("billing", v2.EventID.String(), "fix-v2-again"); outcome(rv) != "duplicate" {
		t.Fatalf("second redrive: %+v", rv)
	}
	if c := charges(beta, "beta"); len(c) != 2 {
		t.Fatalf("beta charges after the second redrive: %v", c)
	}
	// The digest conflict stays quarantined; the original charge stands.
	if rv := redrive("billing", u1.EventID.String(), "conflict"); outcome(rv) != "quarantined" || rv.Audit[1].Reason != inbox.ReasonDigestConflict {
		t.Fatalf("redrive of a digest conflict: %+v", rv)
	}
	if c := charges(acme, "acme"); c[u1.EventID.String()] != "1" {
		t.Fatalf("u1 charge after the conflict's redrive: %v", c)
	}
	if got := listed("service=billing"); len(got) != 2 {
		t.Errorf("billing still quarantined: %+v, want the digest mismatch and the conflict", got)
	}
	if got := listed("service=billing&state=all"); len(got) != 3 {
		t.Errorf("billing, all: %+v", got)
	}

	// A dead letter of meter's outbox is listed and released. The row is
	// made a dead letter by hand, sent already or not: dead_at set and its
	// pending entry (if the relay has not deleted it yet) deleted, in one
	// statement, as the relay's failed send does.
	var dead uuid.UUID
	if err := s.Pool("meter").QueryRow(ctx, `
		WITH d AS (
			UPDATE outbox_event SET dead_at = now(), attempts = 10, last_error = 'refused (test)'
			WHERE id = (SELECT min(id) FROM outbox_event WHERE event_type = 'PriceActivated')
			RETURNING shard, id, event_id
		), p AS (
			DELETE FROM outbox_pending p USING d WHERE p.shard = d.shard AND p.id = d.id
		)
		SELECT event_id FROM d`).Scan(&dead); err != nil {
		t.Fatal(err)
	}
	var dls struct {
		Items []struct{ Service, EventID, LastError string }
	}
	if status, _ := call(t, op, "GET", s.URL("query")+"/v1/operator/dead-letters", nil, nil, &dls); status != 200 ||
		len(dls.Items) != 1 || dls.Items[0].Service != "meter" || dls.Items[0].EventID != dead.String() {
		t.Fatalf("dead letters: %+v", dls)
	}
	var acc struct{ RedriveID string }
	if status, code := call(t, op, "POST", s.URL("query")+"/v1/operator/dead-letters/release", map[string]string{"X-Correlation-Id": "release-1"},
		map[string]string{"service": "meter", "eventId": dead.String(), "reason": "broker fixed"}, &acc); status != http.StatusAccepted {
		t.Fatalf("release: %d %s", status, code)
	}
	servicetest.Eventually(t, "the dead letter released and published again", time.Minute, func() bool {
		var rv redriveView
		call(t, op, "GET", s.URL("query")+"/v1/operator/redrives/"+acc.RedriveID, nil, nil, &rv)
		// Published again: no longer a dead letter, and no longer pending
		// (the redrive listed it pending; the relay deleted that entry once sent).
		var published bool
		_ = s.Pool("meter").QueryRow(ctx, `
			SELECT dead_at IS NULL AND NOT EXISTS (SELECT 1 FROM outbox_pending p WHERE p.event_id = $1)
			FROM outbox_event WHERE event_id = $1`, dead).Scan(&published)
		return outcome(rv) == "released" && published
	})

	// Reconciliation of the healthy tenant is empty, with the counts.
	reconcile := func() reconciliation {
		var r reconciliation
		if status, code := call(t, op, "GET", s.URL("query")+"/v1/operator/reconciliation?tenantId=acme&period="+period, nil, nil, &r); status != 200 {
			t.Fatalf("reconciliation: %d %s", status, code)
		}
		return r
	}
	servicetest.Eventually(t, "an empty reconciliation", time.Minute, func() bool { return len(reconcile().Mismatches) == 0 })
	if r := reconcile(); r.Counts["usageFacts"] != 2 || r.Counts["charges"] != 2 || r.Counts["invoiceLines"] != 2 || r.Counts["queryUsage"] != 2 {
		t.Errorf("counts %+v", r.Counts)
	}

	// A charge deleted behind billing's back (as the table's owner, past
	// the trigger that keeps charges immutable) is named by its usage event id.
	if _, err := s.Pool("billing").Exec(ctx, `ALTER TABLE charge DISABLE TRIGGER charge_immutable`); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Pool("billing").Exec(ctx, `DELETE FROM charge WHERE usage_event_id = $1`, u2.EventID); err != nil {
		t.Fatal(err)
	}
	r := reconcile()
	found := false
	for _, m := range r.Mismatches {
		found = found || (m.Kind == "missing_charge" && m.OriginEventID == u2.EventID.String())
	}
	if !found {
		t.Fatalf("mismatches %+v, want missing_charge of %s", r.Mismatches, u2.EventID)
	}
	t.Logf("reconciliation after the break: %s", fmt.Sprint(r.Mismatches))
}

func mustToken(t *testing.T, c auth.Claims) string {
	t.Helper()
	s, err := auth.Token(auth.DevKey, c)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

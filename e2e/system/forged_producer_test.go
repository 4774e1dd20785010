package system_test

import (
	"net/http"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/shopspring/decimal"

	"github.com/usagebilling/billing/pkg/auth"
	"github.com/usagebilling/billing/pkg/events"
	"github.com/usagebilling/billing/pkg/inbox"
	"github.com/usagebilling/billing/testkit/kafkatest"
	"github.com/usagebilling/billing/testkit/servicetest"
)

// TestForgedChargeRatedIsNeverBilled publishes forged ChargeRated events of
// 1,000 USD each between a tenant's genuine facts, on every path a service
// other than billing could reach under the broker's ACLs (usage's topic
// naming billing, ops.events.v1 naming invoice) and, as this stack's broker
// authorises no one, on billing's own topic naming the producer that wrote
// it (usage). Each consumer quarantines each forgery it reads as
// unauthorized_producer, and the issued invoice's total is the genuine
// facts' and nothing more. (A forgery on billing's topic that names billing
// is stopped by the broker's ACLs, not here: see kafkabroker's ACL test.)
func TestForgedChargeRatedIsNeverBilled(t *testing.T) {
	s := newStack(t)
	op := auth.Client(mustToken(t, auth.NewClaims("alice", auth.RoleOperator, "", time.Hour)))
	admin := auth.Client(auth.DevToken(auth.RoleBillingAdmin, "acme"))
	period := events.Period(time.Now())

	var p struct{ EffectiveAt time.Time }
	if status, code := call(t, admin, "POST", s.URL("meter")+"/v1/tenants/acme/prices", map[string]string{"Idempotency-Key": "price-acme"},
		map[string]string{"meterCode": "api_calls", "currency": "USD", "unitPrice": "0.01"}, &p); status != http.StatusCreated {
		t.Fatalf("price: %d %s", status, code)
	}
	time.Sleep(time.Until(p.EffectiveAt) + time.Millisecond) // facts occur once the price is in effect
	ingest := auth.Client(auth.DevToken(auth.RoleIngest, "acme"))
	postUsage := func(source string) {
		t.Helper()
		servicetest.Eventually(t, "usage "+source+" accepted", time.Minute, func() bool {
			status, code := call(t, ingest, "POST", s.URL("usage")+"/v1/tenants/acme/usage", nil, map[string]string{
				"sourceSystem": "gateway", "sourceEventId": source, "meterCode": "api_calls", "quantity": "10",
				"occurredAt": time.Now().UTC().Format(time.RFC3339Nano)}, nil)
			if status != http.StatusCreated && code != "unknown_meter" && code != "no_price_in_effect" {
				t.Fatalf("usage %s: %d %s", source, status, code)
			}
			return status == http.StatusCreated
		})
	}

	postUsage("genuine-1")
	forged := map[string]string{} // event id -> what it forges
	for _, f := range []struct{ topic, producer string }{
		{events.TopicUsage, events.ServiceBilling},
		{events.TopicOps, events.ServiceInvoice},
		{events.TopicBilling, events.ServiceUsage},
	} {
		now := time.Now().UTC()
		e, err := events.New(events.ChargeRated{
			ChargeID: uuid.Must(uuid.NewV7()), UsageEventID: uuid.Must(uuid.NewV7()), UsageID: uuid.Must(uuid.NewV7()),
			MeterCode: "api_calls", Currency: "USD", Quantity: decimal.NewFromInt(100000), UnitPrice: decimal.RequireFromString("0.01"),
			PriceVersion: 1, Amount: decimal.NewFromInt(1000), Period: period, OccurredAt: now,
			SourceSystem: "forger", SourceEventID: f.topic,
		}, events.Meta{Producer: f.producer, TenantID: "acme", AggregateID: uuid.NewString(), OccurredAt: now})
		if err != nil {
			t.Fatal(err)
		}
		kafkatest.Produce(t, s.Brokers, f.topic, kafkatest.Record{Key: e.PartitionKey, Value: marshal(t, e)})
		forged[e.EventID.String()] = f.producer + " on " + f.topic
	}
	postUsage("genuine-2")

	// Every consumer of each topic quarantines what it read of the forgeries:
	// billing usage's topic, invoice billing's, query all three.
	type q struct{ service, eventID string }
	want := map[q]bool{}
	for id, what := range forged {
		want[q{"query", id}] = true
		switch what {
		case events.ServiceBilling + " on " + events.TopicUsage:
			want[q{"billing", id}] = true
		case events.ServiceUsage + " on " + events.TopicBilling:
			want[q{"invoice", id}] = true
		}
	}
	servicetest.Eventually(t, "every forgery quarantined by every consumer", time.Minute, func() bool {
		var page struct{ Items []quarantineItem }
		if status, code := call(t, op, "GET", s.URL("query")+"/v1/operator/quarantine?limit=100&reason="+inbox.ReasonUnauthorizedProducer,
			nil, nil, &page); status != 200 {
			t.Fatalf("quarantine view: %d %s", status, code)
		}
		got := map[q]bool{}
		for _, it := range page.Items {
			if it.EventID != nil && it.EventType == events.TypeChargeRated {
				got[q{it.Service, *it.EventID}] = true
			}
		}
		for k := range want {
			if !got[k] {
				return false
			}
		}
		return len(got) == len(want)
	})

	// The period closes on the genuine charges alone: 2 x 10 x 0.01.
	servicetest.Eventually(t, "both genuine facts charged", time.Minute, func() bool {
		var out struct{ Charges []any }
		status, _ := call(t, admin, "GET", s.URL("billing")+"/v1/tenants/acme/charges?period="+period, nil, nil, &out)
		return status == 200 && len(out.Charges) == 2
	})
	if status, code := call(t, admin, "POST", s.URL("billing")+"/v1/tenants/acme/periods/"+period+"/close",
		map[string]string{"Idempotency-Key": "close-" + period}, nil, nil); status != http.StatusAccepted {
		t.Fatalf("close %s: %d %s", period, status, code)
	}
	type invoice struct {
		Status string
		Total  *decimal.Decimal
	}
	var issued invoice
	servicetest.Eventually(t, "acme's invoice issued", time.Minute, func() bool {
		var list struct{ Invoices []invoice }
		status, _ := call(t, admin, "GET", s.URL("invoice")+"/v1/tenants/acme/invoices?period="+period, nil, nil, &list)
		if status != 200 || len(list.Invoices) != 1 || list.Invoices[0].Status != "issued" {
			return false
		}
		issued = list.Invoices[0]
		return true
	})
	if issued.Total == nil || !issued.Total.Equal(decimal.RequireFromString("0.2")) {
		t.Fatalf("issued invoice total %v, want 0.2: the genuine facts' only", issued.Total)
	}
}

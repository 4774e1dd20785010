package e2e

import (
	"encoding/json"
	"net/http"
	"testing"
	"time"

	"github.com/IBM/sarama"
	"github.com/shopspring/decimal"

	"github.com/usagebilling/billing/e2e/scenario"
	"github.com/usagebilling/billing/e2e/stack"
	"github.com/usagebilling/billing/e2e/stack/stacktest"
	"github.com/usagebilling/billing/pkg/envelope"
	"github.com/usagebilling/billing/pkg/events"
	"github.com/usagebilling/billing/pkg/kafkaconf"
)

// A close waits for usage's watermarks (decision 0014), against the running
// meter, usage, billing and invoice (separate processes, real PostgreSQL,
// the embedded broker behind its fault proxy): a fact accepted while the path from usage
// through the broker to billing is cut, then a close of its period: the
// close waits (the period reads closing and is not closed) while the path
// is cut; once it is restored the fact is rated into that period, not late,
// and is on the period's issued invoice.
func TestCloseWaitsForUsageDelayedInThePipeline(t *testing.T) {
	s := stacktest.Start(t, stack.Options{
		BinDir:   stacktest.Binaries(t),
		Services: []string{"meter", "usage", "billing", "invoice"},
		Env: map[string]string{"CONSUMER_SWEEP_INTERVAL": "500ms", "METER_SCHEDULE_LEAD": "1s",
			"METER_WATERMARK_INTERVAL": "200ms", "USAGE_WATERMARK_INTERVAL": "200ms",
			"BILLING_CLOSE_WAIT": "1s", "BILLING_CLOSE_INTERVAL": "500ms"},
	})
	c := &schedClient{t: t, urls: s.URLs(), auth: scenario.DevAuthorize(), http: &http.Client{Timeout: 30 * time.Second},
		probes: map[string]bool{}}
	const tenant, meter = "delayed", "api_calls"
	price := c.activate(tenant, meter, "0.5", "")
	c.untilInEffect(price.EffectiveAt) // the probe too occurs once the price is in effect
	c.waitUsageKnows(tenant, meter)
	now := time.Now().UTC()
	period := events.Period(now)
	fact := func(id, qty string) []schedFact {
		return []schedFact{{SourceSystem: "close-wait", SourceEventID: id, MeterCode: meter, Quantity: qty,
			OccurredAt: time.Now().UTC().Format(time.RFC3339Nano)}}
	}
	c.sendBatch(tenant, fact("before-cut", "1"))
	c.waitCharges(tenant, 1, time.Minute)

	proxy := s.Proxy(stack.ProxyKafka)
	if err := proxy.Cut(); err != nil {
		t.Fatal(err)
	}
	restored := false
	t.Cleanup(func() {
		if !restored {
			_ = proxy.Restore()
		}
	})
	delayed := c.sendBatch(tenant, fact("during-cut", "2"))[0]

	var closeReply struct{ Period, Status string }
	status := c.do(http.MethodPost, c.urls["billing"]+"/v1/tenants/"+tenant+"/periods/"+period+"/close", tenant, nil, &closeReply,
		map[string]string{"Idempotency-Key": "close-while-cut"})
	if status != http.StatusAccepted || closeReply.Status != "closing" || closeReply.Period != period {
		t.Fatalf("close while the path is cut = %d %+v, want 202 closing", status, closeReply)
	}
	type periodView struct {
		Status           string     `json:"status"`
		CloseRequestedAt *time.Time `json:"closeRequestedAt"`
		WaitingFor       string     `json:"waitingFor"`
	}
	// The scheduler passes every 500ms and usage cuts every 200ms: several
	// of each happen while the path is cut, and none may close the period.
	var requestedAt time.Time
	for range 3 {
		time.Sleep(time.Second) // deliberate: time for several scheduler passes and usage cuts while cut
		var v periodView
		c.do(http.MethodGet, c.urls["billing"]+"/v1/tenants/"+tenant+"/periods/"+period, tenant, nil, &v, nil)
		if v.Status != "closing" || v.CloseRequestedAt == nil || v.WaitingFor == "" {
			t.Fatalf("period while cut = %+v, want closing with a reason", v)
		}
		requestedAt = *v.CloseRequestedAt
		t.Logf("period %s while the path is cut: %s, waiting for: %s", period, v.Status, v.WaitingFor)
	}
	if got := c.charges(tenant); len(got) != 1 {
		t.Fatalf("%d charges while cut, want the one before the cut", len(got))
	}

	cutAt := time.Now()
	if err := proxy.Restore(); err != nil {
		t.Fatal(err)
	}
	restored = true
	type line struct {
		Kind        string          `json:"kind"`
		Quantity    decimal.Decimal `json:"quantity"`
		ChargeCount int64           `json:"chargeCount"`
		Amount      decimal.Decimal `json:"amount"`
	}
	var inv struct {
		Status string `json:"status"`
		Lines  []line `json:"lines"`
	}
	// Polled: the invoice service's answer, once the restored path lets the close end.
	for deadline := time.Now().Add(2 * time.Minute); ; time.Sleep(250 * time.Millisecond) {
		var list struct {
			Invoices []json.RawMessage `json:"invoices"`
		}
		c.do(http.MethodGet, c.urls["invoice"]+"/v1/tenants/"+tenant+"/invoices?period="+period, tenant, nil, &list, nil)
		if len(list.Invoices) == 1 {
			if err := json.Unmarshal(list.Invoices[0], &inv); err != nil {
				t.Fatal(err)
			}
			if inv.Status == "issued" {
				break
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("no issued invoice of %s two minutes after the path was restored: %d invoices, status %q", period, len(list.Invoices), inv.Status)
		}
	}
	issuedAfter := time.Since(cutAt)

	// The delayed fact's charge is in the closed period, not late.
	var page struct {
		Charges []struct {
			UsageEventID string `json:"usageEventId"`
			Period       string `json:"period"`
			Late         bool   `json:"late"`
		} `json:"charges"`
	}
	c.do(http.MethodGet, c.urls["billing"]+"/v1/tenants/"+tenant+"/charges?limit=100&period="+period, tenant, nil, &page, nil)
	found := false
	for _, ch := range page.Charges {
		if ch.UsageEventID == delayed {
			found = true
			if ch.Late || ch.Period != period {
				t.Fatalf("delayed fact charged %+v, want in %s and not late", ch, period)
			}
		}
	}
	if !found {
		t.Fatalf("delayed fact %s has no charge in %s: %+v", delayed, period, page.Charges)
	}
	// On the invoice: the probe (0), the fact before the cut (1) and the
	// delayed one (2) at 0.5.
	var charged line
	for _, l := range inv.Lines {
		if l.Kind == "charge" {
			charged = l
		}
	}
	if !charged.Quantity.Equal(decimal.NewFromInt(3)) || charged.ChargeCount != 3 || !charged.Amount.Equal(decimal.RequireFromString("1.5")) {
		t.Fatalf("invoice line %+v, want 3 units in 3 charges for 1.5", charged)
	}
	var v periodView
	c.do(http.MethodGet, c.urls["billing"]+"/v1/tenants/"+tenant+"/periods/"+period, tenant, nil, &v, nil)
	if v.Status != "closed" {
		t.Fatalf("period after restore = %+v, want closed", v)
	}
	t.Logf("invoice of %s issued %s after the path was restored, with the delayed fact", period, issuedAfter.Round(10*time.Millisecond))
	checkUsageTopic(t, s.KafkaBrokers(), delayed, requestedAt)
}

// checkUsageTopic reads usage.events.v1 as the broker holds it: every
// watermark is on the partition it names, and the delayed fact comes before
// the first watermark of its partition past the close request.
func checkUsageTopic(t *testing.T, brokers []string, delayedEventID string, requestedAt time.Time) {
	t.Helper()
	client, err := sarama.NewClient(brokers, kafkaconf.New("close-wait-test"))
	if err != nil {
		t.Fatal(err)
	}
	defer client.Close()
	consumer, err := sarama.NewConsumerFromClient(client)
	if err != nil {
		t.Fatal(err)
	}
	defer consumer.Close()
	reg := envelope.NewRegistry()
	events.Register(reg)
	partitions, err := client.Partitions(events.TopicUsage)
	if err != nil {
		t.Fatal(err)
	}
	marks, factSeen, factBeforeMark := 0, false, false
	for _, p := range partitions {
		newest, err := client.GetOffset(events.TopicUsage, p, sarama.OffsetNewest)
		if err != nil {
			t.Fatal(err)
		}
		if newest == 0 {
			continue
		}
		pc, err := consumer.ConsumePartition(events.TopicUsage, p, sarama.OffsetOldest)
		if err != nil {
			t.Fatal(err)
		}
		factHere, passed := false, false
		for msg := range pc.Messages() {
			d, err := reg.Decode(msg.Value)
			if err != nil {
				t.Fatalf("%s/%d@%d: %v", events.TopicUsage, p, msg.Offset, err)
			}
			switch w := d.Payload.(type) {
			case events.UsageAcceptedThrough:
				marks++
				if w.Partition != p {
					t.Fatalf("watermark of partition %d found on partition %d", w.Partition, p)
				}
				if !w.Through.Before(requestedAt) && !passed {
					passed = true
					factBeforeMark = factBeforeMark || factHere
				}
			case events.UsageAccepted:
				if d.Envelope.EventID.String() == delayedEventID {
					factSeen, factHere = true, true
					if passed {
						t.Fatalf("the delayed fact is on partition %d after a watermark past the close request", p)
					}
				}
			}
			if msg.Offset >= newest-1 {
				break
			}
		}
		_ = pc.Close()
	}
	if marks == 0 || !factSeen || !factBeforeMark {
		t.Fatalf("usage topic: %d watermarks, delayed fact seen %v, before a watermark past the request %v", marks, factSeen, factBeforeMark)
	}
	t.Logf("usage topic: %d watermarks across %d partitions, each on its own; the delayed fact before its partition's first watermark past the close request", marks, len(partitions))
}

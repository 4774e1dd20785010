package billingctl_test

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/usagebilling/billing/e2e/stack"
	"github.com/usagebilling/billing/e2e/stack/stacktest"
)

// TestBillingctlInvoiceExplain: a tenant's viewer traces its issued invoice
// with the command line against the five services: `invoice explain`
// prints the charge line, its three charges and each charge's fact with
// its source event id and properties; `period reconcile` finds nothing
// amiss; a fact sent after the close is in the next period's
// `late-usage`, with both periods.
func TestBillingctlInvoiceExplain(t *testing.T) {
	s := stacktest.Start(t, stack.Options{PostgresFast: true,
		Env: map[string]string{"CONSUMER_SWEEP_INTERVAL": "500ms"}})
	env := map[string]string{"BILLINGCTL_DEV": "true", "BILLINGCTL_SUBJECT": "alice"}
	for name, u := range s.URLs() {
		env["BILLINGCTL_"+strings.ToUpper(name)+"_URL"] = u
	}
	c := &ctl{t: t, env: env}
	tenant := fmt.Sprintf("explain-%d", time.Now().UnixNano())
	tn := []string{"-tenant", tenant}
	period := time.Now().UTC().Format("2006-01")
	first, err := time.Parse("2006-01", period)
	if err != nil {
		t.Fatal(err)
	}
	next := first.AddDate(0, 1, 0).Format("2006-01")

	c.ok(append(tn, "price", "activate", "-meter", "api_calls", "-currency", "USD", "-unit-price", "0.01")...)
	var prices struct {
		Prices []struct {
			EffectiveAt time.Time `json:"effectiveAt"`
		}
	}
	c.json(&prices, append(tn, "price", "list")...)
	if len(prices.Prices) != 1 {
		t.Fatalf("price list: %v", prices.Prices)
	}
	// Deliberate: the facts must occur once the price is in effect, a wall-clock time.
	time.Sleep(time.Until(prices.Prices[0].EffectiveAt) + time.Millisecond)
	facts := func(at time.Time, ids ...string) string {
		var b strings.Builder
		for _, id := range ids {
			fmt.Fprintf(&b, `{"sourceEventId":%q,"meterCode":"api_calls","quantity":"10","occurredAt":%q,"properties":{"route":"/v1/%s"}}`+"\n",
				id, at.Format(time.RFC3339Nano), id)
		}
		return b.String()
	}
	batch := facts(prices.Prices[0].EffectiveAt.Add(time.Millisecond), "req-1", "req-2", "req-3")
	eventually(t, "usage knowing the meter", func() error {
		if r := c.run(batch, append(tn, "usage", "send", "-")...); r.code != 0 {
			return fmt.Errorf("exit %d: %s%s", r.code, r.out, r.errOut)
		}
		return nil
	})
	eventually(t, "the three charges", func() error {
		var ch struct{ Charges []map[string]any }
		c.json(&ch, append(tn, "charges", "-period", period)...)
		if len(ch.Charges) != 3 {
			return fmt.Errorf("%d charges", len(ch.Charges))
		}
		return nil
	})
	c.ok(append(tn, "period", "close", period)...)
	var invoices struct{ Invoices []map[string]any }
	eventually(t, "the issued invoice", func() error {
		c.json(&invoices, append(tn, "invoice", "list", "-period", period)...)
		if len(invoices.Invoices) != 1 || invoices.Invoices[0]["status"] != "issued" {
			return fmt.Errorf("invoices %v, want one issued", invoices.Invoices)
		}
		return nil
	})
	id := invoices.Invoices[0]["invoiceId"].(string)

	var out string
	eventually(t, "the invoice explained down to its facts", func() error {
		out = c.ok(append(tn, "invoice", "explain", id, "-limit", "2", "-all")...)
		if strings.Contains(out, "not projected yet") || strings.Count(out, "  charge ") != 3 {
			return fmt.Errorf("not every charge with its fact yet:\n%s", out)
		}
		return nil
	})
	for _, want := range []string{"invoice " + id, "line charge/api_calls/", "charges 3",
		"fact billingctl/req-1", "route=/v1/req-1", "fact billingctl/req-2", "route=/v1/req-2", "fact billingctl/req-3", "route=/v1/req-3"} {
		if !strings.Contains(out, want) {
			t.Errorf("invoice explain lacks %q:\n%s", want, out)
		}
	}
	var explained struct {
		Lines []struct {
			LineID  string `json:"lineId"`
			Charges []struct {
				Fact struct{ SourceEventID string } `json:"fact"`
			} `json:"charges"`
		} `json:"lines"`
	}
	c.json(&explained, append(tn, "invoice", "explain", id)...)
	if len(explained.Lines) == 0 || len(explained.Lines[0].Charges) != 3 {
		t.Errorf("invoice explain -o json: %+v, want the charge line's 3 charges", explained)
	}

	eventually(t, "the period reconciled", func() error {
		var r struct {
			Counts        map[string]int
			MismatchCount int
		}
		c.json(&r, append(tn, "period", "reconcile", period)...)
		if r.MismatchCount != 0 || r.Counts["charges"] != 3 || r.Counts["usageFacts"] != 3 {
			return fmt.Errorf("reconciliation %+v", r)
		}
		return nil
	})

	// After the close, a fact of the closed period is billed late into the
	// next.
	if r := c.run(facts(time.Now().UTC(), "late-1"), append(tn, "usage", "send", "-")...); r.code != 0 {
		t.Fatalf("late fact: exit %d\n%s%s", r.code, r.out, r.errOut)
	}
	eventually(t, "the late fact reported", func() error {
		out = c.ok(append(tn, "late-usage", "-period", next)...)
		if !strings.Contains(out, "late-1") {
			return fmt.Errorf("late-usage -period %s:\n%s", next, out)
		}
		return nil
	})
	if !strings.Contains(out, period+"  ") || !strings.Contains(out, next) {
		t.Errorf("late-usage lacks the occurrence period %s or the billed period %s:\n%s", period, next, out)
	}
}

package e2e

import (
	"fmt"
	"maps"
	"net/http"
	"slices"
	"testing"
	"time"

	"github.com/shopspring/decimal"

	"github.com/usagebilling/billing/pkg/events"
	"github.com/usagebilling/billing/pkg/money"
)

type usageRequest struct {
	SourceSystem  string `json:"sourceSystem"`
	SourceEventID string `json:"sourceEventId"`
	MeterCode     string `json:"meterCode"`
	Quantity      string `json:"quantity"`
	OccurredAt    string `json:"occurredAt"`
}

type batchResult struct {
	Status  int    `json:"status"`
	UsageID string `json:"usageId"`
	EventID string `json:"eventId"`
	Code    string `json:"code"`
}

type charge struct {
	ChargeID     string          `json:"chargeId"`
	EventID      string          `json:"eventId"`
	UsageEventID string          `json:"usageEventId"`
	MeterCode    string          `json:"meterCode"`
	Currency     string          `json:"currency"`
	Quantity     decimal.Decimal `json:"quantity"`
	UnitPrice    decimal.Decimal `json:"unitPrice"`
	Amount       decimal.Decimal `json:"amount"`
	Period       string          `json:"period"`
	Late         bool            `json:"late"`
}

type invoiceLine struct {
	OriginEventID string          `json:"originEventId"`
	Kind          string          `json:"kind"`
	Amount        decimal.Decimal `json:"amount"`
}

type invoiceDoc struct {
	InvoiceID string           `json:"invoiceId"`
	Period    string           `json:"period"`
	Currency  string           `json:"currency"`
	Status    string           `json:"status"`
	Lines     []invoiceLine    `json:"lines"`
	Subtotal  decimal.Decimal  `json:"subtotal"`
	Total     *decimal.Decimal `json:"total"`
}

type summaryDoc struct {
	Usage struct {
		Count           int64                      `json:"count"`
		QuantityByMeter map[string]decimal.Decimal `json:"quantityByMeter"`
	} `json:"usage"`
	Charged  map[string]decimal.Decimal `json:"charged"`
	Adjusted map[string]decimal.Decimal `json:"adjusted"`
	Invoiced map[string]decimal.Decimal `json:"invoiced"`
}

// expected is what the test computes on its own, from its inputs only.
type expected struct {
	facts    int
	quantity map[string]decimal.Decimal // by meter
	charged  map[string]decimal.Decimal // by currency
	adjusted map[string]decimal.Decimal
}

var prices = []struct{ meter, currency, unitPrice string }{
	{"api_calls", "USD", "0.0015"},
	{"storage_gb", "KRW", "12.5"},
}

// TestBillingFlow drives all five services over HTTP as a client would:
// prices, 1,000 usage facts over three tenants with duplicates and a conflict
// mixed in, an adjustment per tenant, a period close; then it checks charges,
// invoices and the query summary against sums it computes from its inputs.
func TestBillingFlow(t *testing.T) {
	sys := startSystem(t)
	tenants := []string{"acme", "globex", "initech"}
	priceOf := map[string]decimal.Decimal{}
	currencyOf := map[string]string{}

	for _, tenant := range tenants {
		for _, p := range prices {
			var out struct {
				Version int64 `json:"version"`
			}
			status := call(t, http.MethodPost, sys.urls["meter"]+"/v1/tenants/"+tenant+"/prices",
				map[string]string{"meterCode": p.meter, "currency": p.currency, "unitPrice": p.unitPrice},
				map[string]string{"Idempotency-Key": "price-" + tenant + "-" + p.meter}, &out)
			if status != http.StatusCreated || out.Version != 1 {
				t.Fatalf("activate %s/%s: status %d version %d", tenant, p.meter, status, out.Version)
			}
			priceOf[p.meter] = decimal.RequireFromString(p.unitPrice)
			currencyOf[p.meter] = p.currency
		}
	}

	// 1,000 distinct usage facts, sent in batches of 100.
	want := map[string]*expected{}
	for _, tenant := range tenants {
		want[tenant] = &expected{quantity: map[string]decimal.Decimal{}, charged: map[string]decimal.Decimal{}, adjusted: map[string]decimal.Decimal{}}
	}
	facts := map[string][]usageRequest{}
	for i := range 1000 {
		tenant := tenants[i%3]
		m := prices[(i/3)%2].meter
		q := decimal.RequireFromString(fmt.Sprintf("%d.%d", i%17+1, i%10))
		facts[tenant] = append(facts[tenant], usageRequest{
			SourceSystem: "e2e", SourceEventID: fmt.Sprintf("ev-%04d", i), MeterCode: m,
			Quantity: q.String(), OccurredAt: time.Now().UTC().Format(time.RFC3339Nano),
		})
		w := want[tenant]
		w.facts++
		w.quantity[m] = w.quantity[m].Add(q)
		w.charged[currencyOf[m]] = w.charged[currencyOf[m]].Add(q.Mul(priceOf[m]))
	}
	sendBatch := func(tenant string, batch []usageRequest) []batchResult {
		var out struct {
			Results []batchResult `json:"results"`
		}
		status := call(t, http.MethodPost, sys.urls["usage"]+"/v1/tenants/"+tenant+"/usage:batch",
			map[string]any{"events": batch}, nil, &out)
		if status != http.StatusOK || len(out.Results) != len(batch) {
			t.Fatalf("batch for %s: status %d, %d results for %d events", tenant, status, len(out.Results), len(batch))
		}
		return out.Results
	}
	for _, tenant := range tenants {
		all := facts[tenant]
		for start := 0; start < len(all); start += 100 {
			batch := all[start:min(start+100, len(all))]
			// The usage service learns prices from meter's events; until they
			// arrive it refuses the meter and writes nothing.
			var results []batchResult
			waitUntil(t, 60*time.Second, "usage knowing the prices", func() (bool, string) {
				results = sendBatch(tenant, batch)
				for _, r := range results {
					if r.Code == "unknown_meter" {
						return false, "unknown_meter"
					}
				}
				return true, ""
			})
			for i, r := range results {
				if r.Status != http.StatusCreated && r.Status != http.StatusOK {
					t.Fatalf("%s %s: status %d code %s", tenant, batch[i].SourceEventID, r.Status, r.Code)
				}
			}
		}
	}

	// Duplicates: every tenant's first 40 facts again, in a batch and one by
	// one: replays, never new facts. And one conflict: same identity, other
	// quantity.
	for _, tenant := range tenants {
		for _, r := range sendBatch(tenant, facts[tenant][:30]) {
			if r.Status != http.StatusOK {
				t.Fatalf("replayed fact of %s: status %d code %s, want 200", tenant, r.Status, r.Code)
			}
		}
		for _, f := range facts[tenant][30:40] {
			if s := call(t, http.MethodPost, sys.urls["usage"]+"/v1/tenants/"+tenant+"/usage", f, nil, nil); s != http.StatusOK {
				t.Fatalf("replayed single fact of %s: status %d, want 200", tenant, s)
			}
		}
		conflict := facts[tenant][0]
		conflict.Quantity = "999"
		if s := call(t, http.MethodPost, sys.urls["usage"]+"/v1/tenants/"+tenant+"/usage", conflict, nil, nil); s != http.StatusConflict {
			t.Fatalf("conflicting fact of %s: status %d, want 409", tenant, s)
		}
	}

	period := events.Period(time.Now())
	chargesOf := func(tenant string) []charge {
		var out struct {
			Charges []charge `json:"charges"`
		}
		if s := call(t, http.MethodGet, sys.urls["billing"]+"/v1/tenants/"+tenant+"/charges?period="+period, nil, nil, &out); s != http.StatusOK {
			t.Fatalf("charges of %s: status %d", tenant, s)
		}
		return out.Charges
	}
	for _, tenant := range tenants {
		waitUntil(t, 2*time.Minute, "charges of "+tenant, func() (bool, string) {
			n := len(chargesOf(tenant))
			return n >= want[tenant].facts, fmt.Sprintf("%d/%d charges", n, want[tenant].facts)
		})
	}

	// One adjustment per tenant, on its first USD charge; then close.
	for _, tenant := range tenants {
		cs := chargesOf(tenant)
		if len(cs) != want[tenant].facts {
			t.Fatalf("%s: %d charges for %d usage facts", tenant, len(cs), want[tenant].facts)
		}
		i := slices.IndexFunc(cs, func(c charge) bool { return c.Currency == "USD" })
		amount := decimal.RequireFromString("-0.25")
		status := call(t, http.MethodPost, sys.urls["billing"]+"/v1/tenants/"+tenant+"/adjustments",
			map[string]string{"correctionOf": cs[i].ChargeID, "amount": amount.String(), "currency": "USD", "reason": "goodwill credit"},
			map[string]string{"Idempotency-Key": "adj-" + tenant}, nil)
		if status != http.StatusCreated {
			t.Fatalf("adjustment for %s: status %d", tenant, status)
		}
		want[tenant].adjusted["USD"] = want[tenant].adjusted["USD"].Add(amount)
		var closed struct {
			Period string `json:"period"`
			Status string `json:"status"`
		}
		status = call(t, http.MethodPost, sys.urls["billing"]+"/v1/tenants/"+tenant+"/periods/"+period+"/close", nil,
			map[string]string{"Idempotency-Key": "close-" + tenant + "-" + period}, &closed)
		if status != http.StatusAccepted || closed.Period != period {
			t.Fatalf("close %s %s: status %d %+v", tenant, period, status, closed)
		}
	}

	for _, tenant := range tenants {
		w := want[tenant]
		var invoices []invoiceDoc
		waitUntil(t, 2*time.Minute, "invoices of "+tenant, func() (bool, string) {
			var out struct {
				Invoices []invoiceDoc `json:"invoices"`
			}
			call(t, http.MethodGet, sys.urls["invoice"]+"/v1/tenants/"+tenant+"/invoices?period="+period, nil, nil, &out)
			issued := 0
			for _, inv := range out.Invoices {
				if inv.Status == "issued" {
					issued++
				}
			}
			invoices = out.Invoices
			return issued == len(w.charged), fmt.Sprintf("%d/%d issued", issued, len(w.charged))
		})
		cs := chargesOf(tenant)
		chargeEvents := map[string]bool{}
		for _, c := range cs {
			chargeEvents[c.EventID] = true
		}
		wantInvoiced := map[string]decimal.Decimal{}
		for _, inv := range invoices {
			subtotal := w.charged[inv.Currency].Add(w.adjusted[inv.Currency])
			total, err := money.Round(subtotal, inv.Currency)
			if err != nil {
				t.Fatal(err)
			}
			wantInvoiced[inv.Currency] = total
			lines := map[string]int{}
			sum := decimal.Zero
			for _, l := range inv.Lines {
				lines[l.Kind]++
				sum = sum.Add(l.Amount)
				if l.Kind == "charge" && !chargeEvents[l.OriginEventID] {
					t.Errorf("%s %s: charge line %s has no charge", tenant, inv.Currency, l.OriginEventID)
				}
			}
			wantAdjustments := 0
			if inv.Currency == "USD" {
				wantAdjustments = 1
			}
			wantCharges := 0
			for _, c := range cs {
				if c.Currency == inv.Currency {
					wantCharges++
				}
			}
			if lines["charge"] != wantCharges || lines["adjustment"] != wantAdjustments {
				t.Errorf("%s %s: %d charge and %d adjustment lines, want %d and %d",
					tenant, inv.Currency, lines["charge"], lines["adjustment"], wantCharges, wantAdjustments)
			}
			if !inv.Subtotal.Equal(subtotal) {
				t.Errorf("%s %s: subtotal %s, want %s (computed from the inputs)", tenant, inv.Currency, inv.Subtotal, subtotal)
			}
			if inv.Total == nil || !inv.Total.Equal(total) || !sum.Equal(total) {
				t.Errorf("%s %s: total %v and lines summing to %s, want %s (half-even to the minor unit)",
					tenant, inv.Currency, inv.Total, sum, total)
			}
			if wantRounding := !total.Equal(subtotal); (lines["rounding"] == 1) != wantRounding || lines["rounding"] > 1 {
				t.Errorf("%s %s: %d rounding lines for subtotal %s and total %s", tenant, inv.Currency, lines["rounding"], subtotal, total)
			}
		}

		var sum summaryDoc
		waitUntil(t, time.Minute, "query summary of "+tenant, func() (bool, string) {
			call(t, http.MethodGet, sys.urls["query"]+"/v1/tenants/"+tenant+"/summary", nil, nil, &sum)
			return len(sum.Invoiced) == len(wantInvoiced) && sum.Usage.Count == int64(w.facts),
				fmt.Sprintf("usage %d/%d, invoiced %v", sum.Usage.Count, w.facts, sum.Invoiced)
		})
		checkAmounts(t, tenant+" summary usage quantity", sum.Usage.QuantityByMeter, w.quantity)
		checkAmounts(t, tenant+" summary charged", sum.Charged, w.charged)
		checkAmounts(t, tenant+" summary adjusted", sum.Adjusted, w.adjusted)
		checkAmounts(t, tenant+" summary invoiced", sum.Invoiced, wantInvoiced)
	}
}

func checkAmounts(t *testing.T, what string, got, want map[string]decimal.Decimal) {
	t.Helper()
	keys := slices.Sorted(maps.Keys(want))
	if len(got) != len(want) {
		t.Errorf("%s: %v, want %v", what, got, want)
		return
	}
	for _, k := range keys {
		if !got[k].Equal(want[k]) {
			t.Errorf("%s[%s] = %s, want %s", what, k, got[k], want[k])
		}
	}
}

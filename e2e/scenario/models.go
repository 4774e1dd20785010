package scenario

import (
	"context"
	"fmt"
	"net/http"
	"time"

	"github.com/shopspring/decimal"

	"github.com/usagebilling/billing/pkg/api/billingapi"
	"github.com/usagebilling/billing/pkg/api/invoiceapi"
	"github.com/usagebilling/billing/pkg/api/meterapi"
	"github.com/usagebilling/billing/pkg/api/usageapi"
	"github.com/usagebilling/billing/pkg/money"
)

// ModelsTenant is the tenant of the pricing-models step: its own, so the
// flow's figures stay those of unit prices.
const ModelsTenant = "hooli"

// Graduated is the graduated price of the models step: 1,000 calls free,
// then 0.002 up to 10,000 with 1.00 on entering that tier, then 0.001.
var Graduated = struct {
	Meter, Currency string
	Tiers           []map[string]string
}{Meter: "api_calls", Currency: "USD", Tiers: []map[string]string{
	{"upTo": "1000", "unitPrice": "0"}, {"upTo": "10000", "unitPrice": "0.002", "flatFee": "1"}, {"unitPrice": "0.001"}}}

// ModelsResult is what the models step saw, beside what it computed from
// its inputs: the period's running estimate while open, and the graduated
// line of the issued invoice.
type ModelsResult struct {
	Tenant, Meter, Currency string
	Facts                   int
	Quantity                decimal.Decimal
	Estimate, WantEstimate  decimal.Decimal // billing's GET .../periods/{period}
	Line, WantLine          decimal.Decimal // the invoice's graduated line
	Total, WantTotal        decimal.Decimal // the invoice's total, rounded
	InvoiceNumber           int64
}

// graduatedAmount prices q under Graduated, written out here from the tiers
// as a client reads them (not with the services' code).
func graduatedAmount(q decimal.Decimal) decimal.Decimal {
	thousand, tenThousand := decimal.NewFromInt(1000), decimal.NewFromInt(10000)
	amount := decimal.Zero
	if q.GreaterThan(thousand) {
		amount = amount.Add(decimal.NewFromInt(1)) // the second tier's flat fee
		amount = amount.Add(decimal.Min(q, tenThousand).Sub(thousand).Mul(decimal.RequireFromString("0.002")))
	}
	if q.GreaterThan(tenThousand) {
		amount = amount.Add(q.Sub(tenThousand).Mul(decimal.RequireFromString("0.001")))
	}
	return amount
}

// pricingModels activates the graduated price for ModelsTenant, sends usage
// across its tiers, checks the period's running estimate, closes the
// period and checks the issued invoice's graduated line and total.
func (r *run) pricingModels(ctx context.Context) error {
	res := &ModelsResult{Tenant: ModelsTenant, Meter: Graduated.Meter, Currency: Graduated.Currency}
	r.res.Models = res
	if err := r.activateGraduated(ctx); err != nil {
		return err
	}
	if err := r.sendAcrossTiers(ctx, res); err != nil {
		return err
	}
	if err := r.checkGraduatedEstimate(ctx, res); err != nil {
		return err
	}
	if err := r.checkGraduatedInvoice(ctx, res); err != nil {
		return err
	}
	r.cfg.Progress("graduated price for %s: %s calls, estimate %s, invoice line %s, total %s",
		res.Tenant, res.Quantity, res.Estimate, res.Line, res.Total)
	return nil
}

// activateGraduated activates Graduated as version 1 of ModelsTenant's
// meter.
func (r *run) activateGraduated(ctx context.Context) error {
	tenant, g := ModelsTenant, Graduated
	body := map[string]any{"meterCode": g.Meter, "currency": g.Currency, "model": "graduated", "tiers": g.Tiers}
	var price meterapi.Price
	resp, err := r.call(ctx, http.MethodPost, r.ep.Meter+"/v1/tenants/"+tenant+"/prices", body,
		map[string]string{"Idempotency-Key": "price-" + tenant + "-" + g.Meter}, &price)
	if err != nil {
		return err
	}
	if resp.status != http.StatusCreated || price.Version != 1 {
		return fmt.Errorf("activate the graduated price of %s: status %d: %s", tenant, resp.status, resp.body)
	}
	r.res.Prices = append(r.res.Prices, priceOf(tenant, price))
	return r.untilInEffect(ctx, price.EffectiveAt)
}

// sendAcrossTiers sends 12 facts of 1,000.5 calls (across all three tiers),
// again while usage does not know the price yet, and waits for their
// charges.
func (r *run) sendAcrossTiers(ctx context.Context, res *ModelsResult) error {
	tenant := res.Tenant
	now := time.Now().UTC()
	var facts []usageapi.UsageRequest
	for i := range 12 {
		facts = append(facts, usageapi.UsageRequest{SourceSystem: "scenario", SourceEventId: fmt.Sprintf("models-%02d", i), MeterCode: res.Meter,
			Quantity: decimal.RequireFromString("1000.5"), OccurredAt: now.Add(time.Duration(i) * time.Millisecond)})
		res.Quantity = res.Quantity.Add(decimal.RequireFromString("1000.5"))
	}
	res.Facts = len(facts)
	pending := facts
	err := r.waitFor(ctx, "usage to know the graduated price of "+tenant, func() (bool, string, error) {
		results, err := r.sendBatch(ctx, tenant, pending)
		if err != nil {
			return false, "", err
		}
		var refused []usageapi.UsageRequest
		for i, x := range results {
			switch {
			case deref(x.Code) == "unknown_meter" || deref(x.Code) == "no_price_in_effect":
				refused = append(refused, pending[i])
			case x.Status != http.StatusCreated:
				r.mismatch("%s %s: status %d code %q, want 201", tenant, pending[i].SourceEventId, x.Status, deref(x.Code))
			}
		}
		pending = refused
		return len(pending) == 0, fmt.Sprintf("usage answers unknown_meter or no_price_in_effect for %d facts (it has not learned the price yet)", len(pending)), nil
	})
	if err != nil {
		return err
	}
	return r.waitFor(ctx, "the graduated charges of "+tenant, func() (bool, string, error) {
		cs, err := r.charges(ctx, tenant)
		return len(cs) >= len(facts), fmt.Sprintf("%d/%d charges", len(cs), len(facts)), err
	})
}

// checkGraduatedEstimate checks billing's running estimate of the open
// period against the graduated price of the quantity sent.
func (r *run) checkGraduatedEstimate(ctx context.Context, res *ModelsResult) error {
	tenant := res.Tenant
	res.WantEstimate = graduatedAmount(res.Quantity)
	var est billingapi.PeriodEstimate
	resp, err := r.call(ctx, http.MethodGet, r.ep.Billing+"/v1/tenants/"+tenant+"/periods/"+r.res.Period, nil, nil, &est)
	if err != nil {
		return err
	}
	res.Estimate = est.Estimate[res.Currency]
	if resp.status != http.StatusOK || est.Status != "open" || !res.Estimate.Equal(res.WantEstimate) {
		r.mismatch("estimate of %s %s: status %d %q, %s %s; want open, %s", tenant, r.res.Period, resp.status, est.Status,
			res.Currency, res.Estimate, res.WantEstimate)
	}
	return nil
}

// checkGraduatedInvoice closes the period, waits for its invoice to be
// issued and checks its graduated line and its total.
func (r *run) checkGraduatedInvoice(ctx context.Context, res *ModelsResult) error {
	tenant := res.Tenant
	resp, err := r.call(ctx, http.MethodPost, r.ep.Billing+"/v1/tenants/"+tenant+"/periods/"+r.res.Period+"/close", nil,
		map[string]string{"Idempotency-Key": "close-" + tenant + "-" + r.res.Period}, nil)
	if err != nil {
		return err
	}
	if resp.status != http.StatusAccepted {
		return fmt.Errorf("close %s %s: status %d: %s", tenant, r.res.Period, resp.status, resp.body)
	}
	var inv invoiceapi.Invoice
	err = r.waitFor(ctx, "the invoice of "+tenant, func() (bool, string, error) {
		invs, err := listAll[invoiceapi.Invoice](ctx, r, r.ep.Invoice+"/v1/tenants/"+tenant+"/invoices?period="+r.res.Period, "invoices", "invoices of "+tenant)
		if err != nil || len(invs) == 0 {
			return false, "no invoice yet", err
		}
		inv = invs[0]
		return inv.Status == "issued", "invoice " + string(inv.Status), nil
	})
	if err != nil {
		return err
	}
	res.InvoiceNumber, res.WantLine = deref(inv.Number), res.WantEstimate
	for _, l := range inv.Lines {
		if l.Kind == "charge" && deref(l.MeterCode) == res.Meter {
			res.Line = l.Amount
			if !deref(l.Quantity).Equal(res.Quantity) || deref(l.ChargeCount) != int64(res.Facts) {
				r.mismatch("%s's graduated line: %s in %d charges, want %s in %d", tenant, deref(l.Quantity), deref(l.ChargeCount), res.Quantity, res.Facts)
			}
		}
	}
	if !res.Line.Equal(res.WantLine) {
		r.mismatch("%s's graduated line: %s, want %s", tenant, res.Line, res.WantLine)
	}
	if res.WantTotal, err = money.Round(res.WantLine, res.Currency); err != nil {
		return err
	}
	if inv.Total.Valid {
		res.Total = inv.Total.Decimal
	}
	if !res.Total.Equal(res.WantTotal) {
		r.mismatch("%s's invoice total %s, want %s", tenant, res.Total, res.WantTotal)
	}
	return nil
}

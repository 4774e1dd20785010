// Package scenario is the billing flow a client drives over HTTP only, with
// its own account of what the system must answer: prices for two meters in
// two currencies, usage facts for several tenants (sent in batches and one
// by one, with replays and a conflict mixed in), an adjustment per tenant,
// the period close, then the charges, the invoices and the query summary,
// each compared with sums computed here from the inputs alone (exact
// decimals, half-even rounding per currency through pkg/money). The e2e
// tests and `make demo` run it; it is the one copy of that logic.
package scenario

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/google/uuid"
	"github.com/shopspring/decimal"

	"github.com/usagebilling/billing/pkg/api/billingapi"
	"github.com/usagebilling/billing/pkg/api/invoiceapi"
	"github.com/usagebilling/billing/pkg/api/meterapi"
	"github.com/usagebilling/billing/pkg/api/queryapi"
	"github.com/usagebilling/billing/pkg/api/usageapi"
	"github.com/usagebilling/billing/pkg/auth"
	"github.com/usagebilling/billing/pkg/events"
	"github.com/usagebilling/billing/pkg/money"
)

// Endpoints are the base URLs (http://host:port) of the five services.
type Endpoints struct {
	Meter, Usage, Billing, Invoice, Query string
}

// EndpointsFrom reads Endpoints from a map of service name to base URL.
func EndpointsFrom(urls map[string]string) Endpoints {
	return Endpoints{Meter: urls["meter"], Usage: urls["usage"], Billing: urls["billing"], Invoice: urls["invoice"], Query: urls["query"]}
}

// PriceSpec is a price the scenario activates for every tenant.
type PriceSpec struct {
	Meter, Currency, UnitPrice string
}

// Prices are the scenario's prices: two meters, two currencies of
// different minor units (USD 2, KRW 0), so both invoices need rounding.
var Prices = []PriceSpec{
	{Meter: "api_calls", Currency: "USD", UnitPrice: "0.0015"},
	{Meter: "storage_gb", Currency: "KRW", UnitPrice: "12.5"},
}

// Adjustment is the credit posted on each tenant's first USD charge.
var Adjustment = decimal.RequireFromString("-0.25")

// Config shapes a run. The zero value is the full scenario.
type Config struct {
	// Tenants default to acme, globex and initech.
	Tenants []string
	// Facts is the number of distinct usage facts, dealt round-robin to
	// the tenants; default 1,000. Each tenant's last SingleFacts go one
	// request each, the rest in batches of Batch (default 100).
	Facts, SingleFacts, Batch int
	// Replays is how many of each tenant's facts are sent again (two
	// thirds in a batch, the rest one by one); default 40.
	Replays int
	// Wait bounds each wait for asynchronous results; default 2 minutes.
	Wait time.Duration
	// Client sends the requests; nil means a client with a 30 s timeout.
	Client *http.Client
	// Authorize returns the Authorization header ("Bearer <token>") for
	// requests on a tenant's paths (/v1/tenants/{tenant}/...); nil means
	// DevAuthorize: tokens of the environment's signer (auth.SignerFromEnv:
	// the development key of the local stack, or the key AUTH_SIGNING_KEY
	// names, as for deploy/compose.yaml).
	Authorize func(tenant string) string
	// Progress receives what the scenario is doing and waiting for; nil
	// discards it.
	Progress func(format string, args ...any)
}

func (c *Config) defaults() {
	if len(c.Tenants) == 0 {
		c.Tenants = []string{"acme", "globex", "initech"}
	}
	if c.Facts == 0 {
		c.Facts = 1000
	}
	if c.SingleFacts == 0 {
		c.SingleFacts = 10
	}
	if c.Batch == 0 {
		c.Batch = 100
	}
	if c.Replays == 0 {
		c.Replays = 40
	}
	if c.Wait == 0 {
		c.Wait = 2 * time.Minute
	}
	if c.Client == nil {
		c.Client = &http.Client{Timeout: 30 * time.Second}
	}
	if c.Authorize == nil {
		c.Authorize = DevAuthorize()
	}
	if c.Progress == nil {
		c.Progress = func(string, ...any) {}
	}
}

// Result is what the run saw, beside what it expected, for a report.
type Result struct {
	Period   string
	Prices   []Price        // as meter lists them after activation
	Sent     []Sent         // per tenant
	Charges  []ChargeSum    // per tenant and currency
	Invoices []Invoice      // per tenant and currency
	Summary  []Summary      // per tenant
	Models   *ModelsResult  // the pricing-models step (a graduated price)
	Catalog  *CatalogResult // the catalog step (an AI API)
	Took     []StepTiming   // how long each step took
	// Mismatches lists every figure or answer that disagrees with what
	// was sent; empty means the system billed exactly what it was given.
	Mismatches []string
}

// Price is one price version, as the run reports it.
type Price struct {
	Tenant      string
	PriceID     string
	MeterCode   string
	Currency    string
	Model       string
	UnitPrice   decimal.Decimal // under unit pricing
	EffectiveAt time.Time
	Version     int64
}

// priceOf is the report of a price version of tenant as meter answered it.
func priceOf(tenant string, p meterapi.Price) Price {
	return Price{Tenant: tenant, PriceID: p.PriceId.String(), MeterCode: p.MeterCode, Currency: p.Currency,
		Model: string(p.Model), UnitPrice: deref(p.UnitPrice), EffectiveAt: p.EffectiveAt, Version: p.Version}
}

// Sent counts the usage requests of one tenant and their answers.
type Sent struct {
	Tenant          string
	Facts           int // distinct facts accepted (201)
	Batches         int // batch requests (a retry after unknown_meter counts too)
	Singles         int // single requests for new facts
	Replays         int // facts sent again, each answered 200 (a replay)
	Conflicts       int // same identity, other content, answered 409
	PriceReplays    int // price activations sent again with the same Idempotency-Key, answered as the first
	UnknownMeterTry int // batches with facts refused while usage did not know their price yet
}

// ChargeSum is a tenant's charges in one currency: seen and expected.
type ChargeSum struct {
	Tenant, Currency   string
	Count, WantCount   int
	Amount, WantAmount decimal.Decimal
	Quantity           decimal.Decimal
}

// Invoice summarises an issued invoice: its number, lines counted per kind,
// the charges its charge lines aggregate, the rounding line's amount, the
// subtotal and the rounded total, with the expected figures.
type Invoice struct {
	Tenant, Currency, InvoiceID, Status string
	Number                              int64
	Lines                               map[string]int // by kind: charge, adjustment, rounding
	Charges                             int64          // the charges the charge lines count
	Rounding                            decimal.Decimal
	Subtotal, WantSubtotal              decimal.Decimal
	Total, WantTotal                    decimal.Decimal
}

// Summary is a tenant's query summary, with what it should say.
type Summary struct {
	Tenant                     string
	UsageCount, WantUsageCount int64
	Quantity, WantQuantity     map[string]decimal.Decimal // by meter
	Charged, WantCharged       map[string]decimal.Decimal // by currency
	Adjusted, WantAdjusted     map[string]decimal.Decimal
	Invoiced, WantInvoiced     map[string]decimal.Decimal
}

// StepTiming is one step's duration.
type StepTiming struct {
	Step string
	Took time.Duration
}

// expected is what the scenario computes on its own, from its inputs only.
type expected struct {
	facts    int
	quantity map[string]decimal.Decimal // by meter
	charged  map[string]decimal.Decimal // by currency
	charges  map[string]int             // by currency
	adjusted map[string]decimal.Decimal
}

// run is one execution.
type run struct {
	cfg  Config
	ep   Endpoints
	res  *Result
	want map[string]*expected
	// facts[tenant] in the order sent
	facts map[string][]usageapi.UsageRequest
	// prices by meter
	unitPrice map[string]decimal.Decimal
	currency  map[string]string
	// effective is when the last price activated takes effect: a version
	// activated without effectiveAt takes effect right after its tenant's
	// published schedule (decision 0019), up to the schedule lead later.
	effective time.Time
}

// Run drives the scenario against ep. The error reports what stopped it
// (a service unreachable, an answer that makes going on pointless, a wait
// that timed out); figures that disagree are collected in
// Result.Mismatches and the run goes on, so a report shows all of them.
func Run(ctx context.Context, ep Endpoints, cfg Config) (*Result, error) {
	cfg.defaults()
	r := &run{
		cfg: cfg, ep: ep, res: &Result{Period: events.Period(time.Now())},
		want: map[string]*expected{}, facts: map[string][]usageapi.UsageRequest{},
		unitPrice: map[string]decimal.Decimal{}, currency: map[string]string{},
	}
	for _, t := range cfg.Tenants {
		r.want[t] = &expected{
			quantity: map[string]decimal.Decimal{}, charged: map[string]decimal.Decimal{},
			charges: map[string]int{}, adjusted: map[string]decimal.Decimal{},
		}
		r.res.Sent = append(r.res.Sent, Sent{Tenant: t})
	}
	steps := []struct {
		name string
		fn   func(context.Context) error
	}{
		{"activate prices", r.activatePrices},
		{"send usage", r.sendUsage},
		{"wait for charges", r.waitCharges},
		{"adjust and close the period", r.adjustAndClose},
		{"wait for invoices", r.waitInvoices},
		{"wait for the query summary", r.checkSummary},
		{"a graduated price, estimated and invoiced", r.pricingModels},
		{"an AI API billed from the meter catalog", r.catalog},
	}
	for _, s := range steps {
		t := time.Now()
		err := s.fn(ctx)
		r.res.Took = append(r.res.Took, StepTiming{s.name, time.Since(t)})
		if err != nil {
			return r.res, fmt.Errorf("%s: %w", s.name, err)
		}
	}
	return r.res, nil
}

func (r *run) mismatch(format string, args ...any) {
	r.res.Mismatches = append(r.res.Mismatches, fmt.Sprintf(format, args...))
}

func (r *run) sent(tenant string) *Sent {
	i := slices.IndexFunc(r.res.Sent, func(s Sent) bool { return s.Tenant == tenant })
	return &r.res.Sent[i]
}

func (r *run) activatePrices(ctx context.Context) error {
	for _, tenant := range r.cfg.Tenants {
		for _, p := range Prices {
			body := map[string]string{"meterCode": p.Meter, "currency": p.Currency, "unitPrice": p.UnitPrice}
			key := map[string]string{"Idempotency-Key": "price-" + tenant + "-" + p.Meter}
			var first meterapi.Price
			resp, err := r.call(ctx, http.MethodPost, r.ep.Meter+"/v1/tenants/"+tenant+"/prices", body, key, &first)
			if err != nil {
				return err
			}
			if resp.status != http.StatusCreated || first.Version != 1 {
				return fmt.Errorf("activate %s %s for %s: status %d, version %d: %s", p.Meter, p.Currency, tenant, resp.status, first.Version, resp.body)
			}
			// The same command again: the first answer, marked as a replay.
			var again meterapi.Price
			resp, err = r.call(ctx, http.MethodPost, r.ep.Meter+"/v1/tenants/"+tenant+"/prices", body, key, &again)
			if err != nil {
				return err
			}
			if resp.status != http.StatusCreated || resp.header.Get("Idempotent-Replayed") != "true" || again.PriceId != first.PriceId {
				r.mismatch("price activation replayed with the same Idempotency-Key for %s %s: status %d, Idempotent-Replayed %q, priceId %s (first %s); want the first answer again",
					tenant, p.Meter, resp.status, resp.header.Get("Idempotent-Replayed"), again.PriceId, first.PriceId)
			} else {
				r.sent(tenant).PriceReplays++
			}
			r.unitPrice[p.Meter] = decimal.RequireFromString(p.UnitPrice)
			r.currency[p.Meter] = p.Currency
			if first.EffectiveAt.After(r.effective) {
				r.effective = first.EffectiveAt
			}
		}
		for _, p := range Prices {
			var out meterapi.PriceList
			resp, err := r.call(ctx, http.MethodGet, r.ep.Meter+"/v1/tenants/"+tenant+"/prices?meterCode="+p.Meter, nil, nil, &out)
			if err != nil {
				return err
			}
			if resp.status != http.StatusOK || len(out.Prices) != 1 {
				r.mismatch("prices of %s %s: status %d, %d versions; want 200 and 1", tenant, p.Meter, resp.status, len(out.Prices))
			}
			for _, got := range out.Prices {
				if !deref(got.UnitPrice).Equal(decimal.RequireFromString(p.UnitPrice)) || got.Currency != p.Currency {
					r.mismatch("price of %s %s: %s %s, want %s %s", tenant, p.Meter, deref(got.UnitPrice), got.Currency, p.UnitPrice, p.Currency)
				}
				r.res.Prices = append(r.res.Prices, priceOf(tenant, got))
			}
		}
	}
	r.cfg.Progress("activated %d prices (%d tenants x %d meters), each sent twice with its Idempotency-Key",
		len(r.cfg.Tenants)*len(Prices), len(r.cfg.Tenants), len(Prices))
	return nil
}

// untilInEffect waits until at, when the prices just activated take
// effect, so that facts occurring from now on are priced by them.
func (r *run) untilInEffect(ctx context.Context, at time.Time) error {
	wait := time.Until(at)
	if wait <= 0 {
		return nil
	}
	r.cfg.Progress("the prices take effect at %s, after their tenants' published schedule: waiting %s",
		at.Format(time.RFC3339Nano), wait.Round(time.Millisecond))
	select {
	case <-time.After(wait + 10*time.Millisecond):
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

func (r *run) sendUsage(ctx context.Context) error {
	if err := r.untilInEffect(ctx, r.effective); err != nil { // the facts occur once every price is in effect
		return err
	}
	r.makeFacts(time.Now().UTC())
	for _, tenant := range r.cfg.Tenants {
		if err := r.sendFacts(ctx, tenant); err != nil {
			return err
		}
	}
	r.cfg.Progress("sent %d usage facts for %d tenants (batches of %d, the last %d per tenant one by one)",
		r.cfg.Facts, len(r.cfg.Tenants), r.cfg.Batch, r.cfg.SingleFacts)
	for _, tenant := range r.cfg.Tenants {
		if err := r.replay(ctx, tenant); err != nil {
			return err
		}
	}
	if err := r.sendConflict(ctx); err != nil {
		return err
	}
	replays := 0
	for _, s := range r.res.Sent {
		replays += s.Replays
	}
	r.cfg.Progress("replayed %d facts (all answered as replays) and sent 1 conflicting fact (answered 409 source_event_conflict)", replays)
	return nil
}

// makeFacts makes the flow's facts, spread over the tenants and meters, and
// what they must add up to.
func (r *run) makeFacts(now time.Time) {
	for i := range r.cfg.Facts {
		tenant := r.cfg.Tenants[i%len(r.cfg.Tenants)]
		m := Prices[(i/len(r.cfg.Tenants))%len(Prices)].Meter
		q := decimal.RequireFromString(fmt.Sprintf("%d.%d", i%17+1, i%10))
		r.facts[tenant] = append(r.facts[tenant], usageapi.UsageRequest{
			SourceSystem: "scenario", SourceEventId: fmt.Sprintf("ev-%05d", i), MeterCode: m,
			Quantity: q, OccurredAt: now.Add(time.Duration(i) * time.Millisecond),
		})
		w := r.want[tenant]
		cur := r.currency[m]
		w.facts++
		w.quantity[m] = w.quantity[m].Add(q)
		w.charged[cur] = w.charged[cur].Add(q.Mul(r.unitPrice[m]))
		w.charges[cur]++
	}
}

// sendFacts sends the tenant's facts: in batches, then the last
// SingleFacts one by one; each must be answered 201.
func (r *run) sendFacts(ctx context.Context, tenant string) error {
	all := r.facts[tenant]
	singles := min(r.cfg.SingleFacts, len(all))
	batched := all[:len(all)-singles]
	for start := 0; start < len(batched); start += r.cfg.Batch {
		if err := r.sendUntilKnown(ctx, tenant, batched[start:min(start+r.cfg.Batch, len(batched))]); err != nil {
			return err
		}
	}
	for _, f := range all[len(batched):] {
		resp, err := r.call(ctx, http.MethodPost, r.ep.Usage+"/v1/tenants/"+tenant+"/usage", f, nil, nil)
		if err != nil {
			return err
		}
		r.sent(tenant).Singles++
		if resp.status != http.StatusCreated {
			r.mismatch("%s %s sent alone: status %d, want 201: %s", tenant, f.SourceEventId, resp.status, resp.body)
			continue
		}
		r.sent(tenant).Facts++
	}
	return nil
}

// sendUntilKnown sends a batch of the tenant's facts. Usage learns prices
// from meter's events; until one arrives it refuses that meter's facts
// (unknown_meter, or no_price_in_effect once another tenant's price defined the meter) and writes nothing for them. Only those are sent again,
// so every fact must be answered 201 exactly once.
func (r *run) sendUntilKnown(ctx context.Context, tenant string, batch []usageapi.UsageRequest) error {
	pending := batch
	return r.waitFor(ctx, "usage to know the prices of "+tenant, func() (bool, string, error) {
		results, err := r.sendBatch(ctx, tenant, pending)
		if err != nil {
			return false, "", err
		}
		r.sent(tenant).Batches++
		var refused []usageapi.UsageRequest
		for i, res := range results {
			switch {
			case deref(res.Code) == "unknown_meter" || deref(res.Code) == "no_price_in_effect":
				refused = append(refused, pending[i])
			case res.Status != http.StatusCreated:
				r.mismatch("%s %s in a batch: status %d code %q, want 201", tenant, pending[i].SourceEventId, res.Status, deref(res.Code))
			default:
				r.sent(tenant).Facts++
			}
		}
		if len(refused) > 0 {
			r.sent(tenant).UnknownMeterTry++
		}
		pending = refused
		return len(pending) == 0, fmt.Sprintf("usage answers unknown_meter or no_price_in_effect for %d facts: PriceActivated not consumed yet", len(pending)), nil
	})
}

// replay sends the tenant's first facts again, in a batch and one by one;
// each must be answered 200, a replay, never a new fact.
func (r *run) replay(ctx context.Context, tenant string) error {
	all := r.facts[tenant]
	n := min(r.cfg.Replays, len(all))
	inBatch := n * 2 / 3
	results, err := r.sendBatch(ctx, tenant, all[:inBatch])
	if err != nil {
		return err
	}
	for i, res := range results {
		if res.Status != http.StatusOK {
			r.mismatch("%s %s replayed in a batch: status %d code %q, want 200", tenant, all[i].SourceEventId, res.Status, deref(res.Code))
			continue
		}
		r.sent(tenant).Replays++
	}
	for _, f := range all[inBatch:n] {
		resp, err := r.call(ctx, http.MethodPost, r.ep.Usage+"/v1/tenants/"+tenant+"/usage", f, nil, nil)
		if err != nil {
			return err
		}
		if resp.status != http.StatusOK {
			r.mismatch("%s %s replayed alone: status %d, want 200: %s", tenant, f.SourceEventId, resp.status, resp.body)
			continue
		}
		r.sent(tenant).Replays++
	}
	return nil
}

// sendConflict sends the first tenant's first fact with another quantity;
// it must be answered 409 source_event_conflict.
func (r *run) sendConflict(ctx context.Context) error {
	tenant := r.cfg.Tenants[0]
	conflict := r.facts[tenant][0]
	conflict.Quantity = decimal.RequireFromString("999")
	var problem usageapi.Problem
	resp, err := r.call(ctx, http.MethodPost, r.ep.Usage+"/v1/tenants/"+tenant+"/usage", conflict, nil, &problem)
	if err != nil {
		return err
	}
	if resp.status != http.StatusConflict || problem.Code != "source_event_conflict" {
		r.mismatch("conflicting fact for %s (same identity, quantity 999): status %d code %q, want 409 source_event_conflict", tenant, resp.status, problem.Code)
	} else {
		r.sent(tenant).Conflicts++
	}
	return nil
}

func (r *run) sendBatch(ctx context.Context, tenant string, batch []usageapi.UsageRequest) ([]usageapi.BatchResult, error) {
	var out usageapi.BatchResponse
	resp, err := r.call(ctx, http.MethodPost, r.ep.Usage+"/v1/tenants/"+tenant+"/usage:batch", usageapi.BatchRequest{Events: batch}, nil, &out)
	if err != nil {
		return nil, err
	}
	if resp.status != http.StatusOK || len(out.Results) != len(batch) {
		return nil, fmt.Errorf("batch for %s: status %d, %d results for %d events: %s", tenant, resp.status, len(out.Results), len(batch), resp.body)
	}
	return out.Results, nil
}

// charges reads every charge of the tenant's period, page by page; filter
// is added to the query string ("&meterCode=...&priceVersion=...").
func (r *run) charges(ctx context.Context, tenant string) ([]billingapi.Charge, error) {
	return r.chargesWhere(ctx, tenant, "")
}

func (r *run) chargesWhere(ctx context.Context, tenant, filter string) ([]billingapi.Charge, error) {
	return listAll[billingapi.Charge](ctx, r, r.ep.Billing+"/v1/tenants/"+tenant+"/charges?limit=1000&period="+r.res.Period+filter,
		"charges", "charges of "+tenant)
}

// listAll reads every page of a list (pkg/page): the items under
// key, following next until a page has none.
func listAll[T any](ctx context.Context, r *run, url, key, what string) ([]T, error) {
	var all []T
	cursor := ""
	for {
		var page map[string]json.RawMessage
		u := url
		if cursor != "" {
			u += "&cursor=" + cursor
		}
		resp, err := r.call(ctx, http.MethodGet, u, nil, nil, &page)
		if err != nil {
			return nil, err
		}
		if resp.status != http.StatusOK {
			return nil, fmt.Errorf("%s: status %d: %s", what, resp.status, resp.body)
		}
		var items []T
		if err := json.Unmarshal(page[key], &items); err != nil {
			return nil, fmt.Errorf("%s: %s: %w", what, key, err)
		}
		all = append(all, items...)
		cursor = ""
		if next, ok := page["next"]; ok {
			if err := json.Unmarshal(next, &cursor); err != nil {
				return nil, fmt.Errorf("%s: next: %w", what, err)
			}
		}
		if cursor == "" {
			return all, nil
		}
	}
}

func (r *run) waitCharges(ctx context.Context) error {
	total := 0
	for _, w := range r.want {
		total += w.facts
	}
	err := r.waitFor(ctx, "charges", func() (bool, string, error) {
		got := 0
		var parts []string
		for _, tenant := range r.cfg.Tenants {
			cs, err := r.charges(ctx, tenant)
			if err != nil {
				return false, "", err
			}
			got += len(cs)
			parts = append(parts, fmt.Sprintf("%s %d/%d", tenant, len(cs), r.want[tenant].facts))
		}
		return got >= total, "charges rated: " + strings.Join(parts, ", "), nil
	})
	if err != nil {
		return err
	}
	for _, tenant := range r.cfg.Tenants {
		cs, err := r.charges(ctx, tenant)
		if err != nil {
			return err
		}
		w := r.want[tenant]
		by := map[string]*ChargeSum{}
		usageEvents := map[uuid.UUID]bool{}
		for _, c := range cs {
			if usageEvents[c.UsageEventId] {
				r.mismatch("%s: two charges for usage event %s", tenant, c.UsageEventId)
			}
			usageEvents[c.UsageEventId] = true
			if want := c.Quantity.Mul(deref(c.UnitPrice)); !deref(c.Amount).Equal(want) {
				r.mismatch("%s charge %s: amount %s, want quantity %s x unit price %s = %s", tenant, c.ChargeId, deref(c.Amount), c.Quantity, deref(c.UnitPrice), want)
			}
			if p, ok := r.unitPrice[c.MeterCode]; !ok || !deref(c.UnitPrice).Equal(p) || c.PriceVersion != 1 || c.Currency != r.currency[c.MeterCode] {
				r.mismatch("%s charge %s: meter %s at %s %s (price version %d), want %s %s (version 1)",
					tenant, c.ChargeId, c.MeterCode, deref(c.UnitPrice), c.Currency, c.PriceVersion, p, r.currency[c.MeterCode])
			}
			if c.Late || c.Period != r.res.Period {
				r.mismatch("%s charge %s: period %s late %v, want %s on time", tenant, c.ChargeId, c.Period, c.Late, r.res.Period)
			}
			s := by[c.Currency]
			if s == nil {
				s = &ChargeSum{Tenant: tenant, Currency: c.Currency}
				by[c.Currency] = s
			}
			s.Count++
			s.Amount = s.Amount.Add(deref(c.Amount))
			s.Quantity = s.Quantity.Add(c.Quantity)
		}
		for _, cur := range sortedKeys(w.charged, by) {
			s := by[cur]
			if s == nil {
				s = &ChargeSum{Tenant: tenant, Currency: cur}
			}
			s.WantCount, s.WantAmount = w.charges[cur], w.charged[cur]
			if s.Count != s.WantCount || !s.Amount.Equal(s.WantAmount) {
				r.mismatch("%s %s charges: %d summing to %s, want %d summing to %s", tenant, cur, s.Count, s.Amount, s.WantCount, s.WantAmount)
			}
			r.res.Charges = append(r.res.Charges, *s)
		}
	}
	return nil
}

func (r *run) adjustAndClose(ctx context.Context) error {
	for _, tenant := range r.cfg.Tenants {
		cs, err := r.charges(ctx, tenant)
		if err != nil {
			return err
		}
		i := slices.IndexFunc(cs, func(c billingapi.Charge) bool { return c.Currency == "USD" })
		if i < 0 {
			return fmt.Errorf("%s has no USD charge to adjust", tenant)
		}
		var adj billingapi.Adjustment
		resp, err := r.call(ctx, http.MethodPost, r.ep.Billing+"/v1/tenants/"+tenant+"/adjustments",
			map[string]string{"correctionOf": cs[i].ChargeId.String(), "amount": Adjustment.String(), "currency": "USD", "reason": "goodwill credit"},
			map[string]string{"Idempotency-Key": "adj-" + tenant}, &adj)
		if err != nil {
			return err
		}
		if resp.status != http.StatusCreated {
			return fmt.Errorf("adjustment for %s: status %d: %s", tenant, resp.status, resp.body)
		}
		if adj.Period != r.res.Period {
			r.mismatch("adjustment for %s landed in period %s, want %s", tenant, adj.Period, r.res.Period)
		}
		r.want[tenant].adjusted["USD"] = r.want[tenant].adjusted["USD"].Add(Adjustment)

		var closed billingapi.CloseResponse
		resp, err = r.call(ctx, http.MethodPost, r.ep.Billing+"/v1/tenants/"+tenant+"/periods/"+r.res.Period+"/close", nil,
			map[string]string{"Idempotency-Key": "close-" + tenant + "-" + r.res.Period}, &closed)
		if err != nil {
			return err
		}
		if resp.status != http.StatusAccepted || closed.Period != r.res.Period {
			return fmt.Errorf("close %s %s: status %d: %s", tenant, r.res.Period, resp.status, resp.body)
		}
	}
	r.cfg.Progress("posted a %s USD adjustment per tenant and closed period %s for each", Adjustment, r.res.Period)
	return nil
}

// invoices reads every invoice of the tenant's period, page by page.
func (r *run) invoices(ctx context.Context, tenant string) ([]invoiceapi.Invoice, error) {
	return listAll[invoiceapi.Invoice](ctx, r, r.ep.Invoice+"/v1/tenants/"+tenant+"/invoices?period="+r.res.Period,
		"invoices", "invoices of "+tenant)
}

func (r *run) waitInvoices(ctx context.Context) error {
	got := map[string][]invoiceapi.Invoice{}
	err := r.waitFor(ctx, "invoices", func() (bool, string, error) {
		done := true
		var parts []string
		for _, tenant := range r.cfg.Tenants {
			invs, err := r.invoices(ctx, tenant)
			if err != nil {
				return false, "", err
			}
			issued := 0
			for _, inv := range invs {
				if inv.Status == "issued" {
					issued++
				}
			}
			got[tenant] = invs
			want := len(r.want[tenant].charged)
			done = done && issued >= want
			parts = append(parts, fmt.Sprintf("%s %d/%d", tenant, issued, want))
		}
		return done, "invoices issued: " + strings.Join(parts, ", "), nil
	})
	if err != nil {
		return err
	}
	for _, tenant := range r.cfg.Tenants {
		w := r.want[tenant]
		if len(got[tenant]) != len(w.charged) {
			r.mismatch("%s: %d invoices, want one per currency: %d", tenant, len(got[tenant]), len(w.charged))
		}
		numbers := map[int64]bool{}
		for _, inv := range got[tenant] {
			if err := r.checkInvoice(ctx, tenant, inv); err != nil {
				return err
			}
			if deref(inv.Number) < 1 || numbers[deref(inv.Number)] {
				r.mismatch("%s %s invoice: number %d is not a new positive number", tenant, inv.Currency, deref(inv.Number))
			}
			numbers[deref(inv.Number)] = true
		}
		for n := int64(1); n <= int64(len(numbers)); n++ {
			if !numbers[n] {
				r.mismatch("%s: invoice numbers %v are not gap-free from 1", tenant, numbers)
				break
			}
		}
	}
	return nil
}

// checkInvoice checks one issued invoice against what was sent and against
// billing's charges, through the APIs only: one charge line per meter and
// price version whose quantity, charge count and amount are the sums of the
// charges billing lists behind it (the amount the version's pricing over the
// line quantity: quantity x unit price under unit pricing), one line per
// adjustment, one rounding line when the total differs from the subtotal.
func (r *run) checkInvoice(ctx context.Context, tenant string, inv invoiceapi.Invoice) error {
	w := r.want[tenant]
	subtotal := w.charged[inv.Currency].Add(w.adjusted[inv.Currency])
	total, err := money.Round(subtotal, inv.Currency)
	if err != nil {
		return err
	}
	s := Invoice{
		Tenant: tenant, Currency: inv.Currency, InvoiceID: inv.InvoiceId.String(), Number: deref(inv.Number), Status: string(inv.Status),
		Lines: map[string]int{}, Subtotal: inv.Subtotal, WantSubtotal: subtotal, WantTotal: total,
	}
	if inv.Total.Valid {
		s.Total = inv.Total.Decimal
	}
	sum := decimal.Zero
	lineIDs := map[string]bool{}
	for _, l := range inv.Lines {
		s.Lines[string(l.Kind)]++
		sum = sum.Add(l.Amount)
		if lineIDs[l.LineId] {
			r.mismatch("%s %s invoice: two lines %s", tenant, inv.Currency, l.LineId)
		}
		lineIDs[l.LineId] = true
		switch l.Kind {
		case "rounding":
			s.Rounding = s.Rounding.Add(l.Amount)
		case "charge":
			s.Charges += deref(l.ChargeCount)
			behind, err := r.chargesWhere(ctx, tenant, fmt.Sprintf("&meterCode=%s&priceVersion=%d", url.QueryEscape(deref(l.MeterCode)), deref(l.PriceVersion)))
			if err != nil {
				return err
			}
			var qty, amount decimal.Decimal
			var n int64
			for _, c := range behind {
				if c.Currency != inv.Currency {
					continue
				}
				qty, amount, n = qty.Add(c.Quantity), amount.Add(deref(c.Amount)), n+1
			}
			if !qty.Equal(deref(l.Quantity)) || !amount.Equal(l.Amount) || n != deref(l.ChargeCount) || n == 0 {
				r.mismatch("%s %s invoice: line %s has quantity %s, %d charges, amount %s; billing lists %s, %d, %s behind it",
					tenant, inv.Currency, l.LineId, deref(l.Quantity), deref(l.ChargeCount), l.Amount, qty, n, amount)
			}
		}
	}
	wantAdjustments := 0
	if !w.adjusted[inv.Currency].IsZero() {
		wantAdjustments = 1
	}
	if s.Charges != int64(w.charges[inv.Currency]) || s.Lines["adjustment"] != wantAdjustments {
		r.mismatch("%s %s invoice: charge lines counting %d charges and %d adjustment lines, want %d and %d",
			tenant, inv.Currency, s.Charges, s.Lines["adjustment"], w.charges[inv.Currency], wantAdjustments)
	}
	if inv.Status != "issued" {
		r.mismatch("%s %s invoice %s: status %q, want issued", tenant, inv.Currency, inv.InvoiceId, inv.Status)
	}
	if !inv.Subtotal.Equal(subtotal) {
		r.mismatch("%s %s invoice: subtotal %s, want %s (charges + adjustments sent)", tenant, inv.Currency, inv.Subtotal, subtotal)
	}
	if !inv.Total.Valid || !inv.Total.Decimal.Equal(total) || !sum.Equal(total) {
		r.mismatch("%s %s invoice: total %v, lines summing to %s; want %s (%s rounded half-even to the minor unit)",
			tenant, inv.Currency, inv.Total.Decimal, sum, total, subtotal)
	}
	if wantRounding := !total.Equal(subtotal); (s.Lines["rounding"] == 1) != wantRounding || s.Lines["rounding"] > 1 ||
		!s.Rounding.Equal(total.Sub(subtotal)) {
		r.mismatch("%s %s invoice: %d rounding lines of %s for subtotal %s and total %s; want one line of %s when they differ",
			tenant, inv.Currency, s.Lines["rounding"], s.Rounding, subtotal, total, total.Sub(subtotal))
	}
	r.res.Invoices = append(r.res.Invoices, s)
	return nil
}

func (r *run) checkSummary(ctx context.Context) error {
	for _, tenant := range r.cfg.Tenants {
		w := r.want[tenant]
		wantInvoiced := map[string]decimal.Decimal{}
		for cur, amount := range w.charged {
			total, err := money.Round(amount.Add(w.adjusted[cur]), cur)
			if err != nil {
				return err
			}
			wantInvoiced[cur] = total
		}
		var sum queryapi.Summary
		err := r.waitFor(ctx, "query summary of "+tenant, func() (bool, string, error) {
			sum = queryapi.Summary{}
			resp, err := r.call(ctx, http.MethodGet, r.ep.Query+"/v1/tenants/"+tenant+"/summary", nil, nil, &sum)
			if err != nil {
				return false, "", err
			}
			if resp.status != http.StatusOK && resp.status != http.StatusNotFound {
				return false, "", fmt.Errorf("summary of %s: status %d: %s", tenant, resp.status, resp.body)
			}
			// The adjustments travel apart from the invoices (billing's
			// topic, their own keys): query may show an invoice before
			// the adjustment it counts, so wait for both.
			adjusted := 0
			for cur := range w.adjusted {
				if _, ok := sum.Adjusted[cur]; ok {
					adjusted++
				}
			}
			return len(sum.Invoiced) == len(wantInvoiced) && sum.Usage.Count == int64(w.facts) && adjusted == len(w.adjusted),
				fmt.Sprintf("query has %s: %d/%d usage facts, %d/%d invoices, %d/%d adjusted currencies", tenant, sum.Usage.Count, w.facts,
					len(sum.Invoiced), len(wantInvoiced), adjusted, len(w.adjusted)), nil
		})
		if err != nil {
			return err
		}
		s := Summary{
			Tenant: tenant, UsageCount: sum.Usage.Count, WantUsageCount: int64(w.facts),
			Quantity: sum.Usage.QuantityByMeter, WantQuantity: w.quantity,
			Charged: sum.Charged, WantCharged: w.charged,
			Adjusted: sum.Adjusted, WantAdjusted: w.adjusted,
			Invoiced: sum.Invoiced, WantInvoiced: wantInvoiced,
		}
		r.compare(tenant+" summary usage quantity", s.Quantity, s.WantQuantity)
		r.compare(tenant+" summary charged", s.Charged, s.WantCharged)
		r.compare(tenant+" summary adjusted", s.Adjusted, s.WantAdjusted)
		r.compare(tenant+" summary invoiced", s.Invoiced, s.WantInvoiced)
		r.res.Summary = append(r.res.Summary, s)
	}
	return nil
}

func (r *run) compare(what string, got, want map[string]decimal.Decimal) {
	for _, k := range sortedKeys(want, got) {
		g, gok := got[k]
		w, wok := want[k]
		if gok != wok || !g.Equal(w) {
			r.mismatch("%s[%s] = %s, want %s", what, k, orNone(g, gok), orNone(w, wok))
		}
	}
}

func orNone(d decimal.Decimal, ok bool) string {
	if !ok {
		return "(none)"
	}
	return d.String()
}

func sortedKeys[V1, V2 any](a map[string]V1, b map[string]V2) []string {
	keys := map[string]bool{}
	for k := range a {
		keys[k] = true
	}
	for k := range b {
		keys[k] = true
	}
	return slices.Sorted(maps.Keys(keys))
}

// waitFor polls cond every 200 ms until it holds, reporting its status
// through Progress every 2 seconds while it does not.
func (r *run) waitFor(ctx context.Context, what string, cond func() (bool, string, error)) error {
	deadline := time.Now().Add(r.cfg.Wait)
	began, lastReport, lastStatus := time.Now(), time.Now(), ""
	for {
		ok, status, err := cond()
		if err != nil {
			return err
		}
		if ok {
			if time.Since(began) > 2*time.Second {
				r.cfg.Progress("%s: done after %s", what, time.Since(began).Round(100*time.Millisecond))
			}
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("waiting for %s: gave up after %v: %s", what, r.cfg.Wait, status)
		}
		if time.Since(lastReport) >= 2*time.Second && status != "" {
			if status != lastStatus {
				r.cfg.Progress("waiting %s: %s", time.Since(began).Round(time.Second), status)
			}
			lastReport, lastStatus = time.Now(), status
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("waiting for %s: %w (last: %s)", what, ctx.Err(), status)
		case <-time.After(200 * time.Millisecond):
		}
	}
}

type response struct {
	status int
	header http.Header
	body   string
}

// call sends a JSON request and decodes a 2xx JSON answer into out, a
// problem+json answer too when out is given (for its code). Transport
// errors are errors; statuses are for the caller to judge.
func (r *run) call(ctx context.Context, method, url string, body any, headers map[string]string, out any) (response, error) {
	var rd io.Reader
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			return response{}, err
		}
		rd = bytes.NewReader(b)
	}
	req, err := http.NewRequestWithContext(ctx, method, url, rd)
	if err != nil {
		return response{}, err
	}
	req.Header.Set("Content-Type", "application/json")
	if tenant, ok := tenantOf(req.URL.Path); ok {
		if v := r.cfg.Authorize(tenant); v != "" {
			req.Header.Set("Authorization", v)
		}
	}
	for k, v := range headers {
		req.Header.Set(k, v)
	}
	resp, err := r.cfg.Client.Do(req)
	if err != nil {
		return response{}, fmt.Errorf("%s %s: %w", method, url, err)
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(resp.Body)
	if err != nil {
		return response{}, fmt.Errorf("%s %s: read the answer: %w", method, url, err)
	}
	res := response{status: resp.StatusCode, header: resp.Header, body: strings.TrimSpace(string(raw))}
	if out != nil && len(raw) > 0 && (resp.StatusCode < 300 || strings.Contains(resp.Header.Get("Content-Type"), "problem+json")) {
		if err := json.Unmarshal(raw, out); err != nil {
			return res, fmt.Errorf("%s %s: decode %q: %w", method, url, raw, err)
		}
	}
	return res, nil
}

// DevAuthorize returns an Authorize that sends each tenant a tenant token
// signed by the environment's signer (auth.SignerFromEnv: the published
// development key unless AUTH_SIGNING_KEY names the issuer's key), made once
// per tenant, carrying the three tenant roles (ingest, viewer,
// billing-admin): a scenario sends usage, reads every figure, activates
// prices and closes. A signer the environment gets wrong panics with its
// reason at the first request.
func DevAuthorize() func(tenant string) string {
	var mu sync.Mutex
	tokens := map[string]string{}
	return func(tenant string) string {
		mu.Lock()
		defer mu.Unlock()
		if tokens[tenant] == "" {
			tok, err := auth.TokenFromEnv("dev-tenant", auth.RoleTenant, tenant)
			if err != nil {
				panic(fmt.Sprintf("scenario: token for %s: %v", tenant, err)) // the environment names a bad key
			}
			tokens[tenant] = "Bearer " + tok
		}
		return tokens[tenant]
	}
}

// tenantOf returns the tenant of a /v1/tenants/{tenant}/... path.
func tenantOf(path string) (string, bool) {
	rest, ok := strings.CutPrefix(path, "/v1/tenants/")
	if !ok {
		return "", false
	}
	tenant, _, _ := strings.Cut(rest, "/")
	return tenant, tenant != ""
}

// ErrMismatch is returned by Check when a run's figures disagree.
var ErrMismatch = errors.New("figures disagree with what was sent")

// Check returns nil when res has no mismatch, else ErrMismatch listing
// them.
func (res *Result) Check() error {
	if len(res.Mismatches) == 0 {
		return nil
	}
	return fmt.Errorf("%w:\n  %s", ErrMismatch, strings.Join(res.Mismatches, "\n  "))
}

// deref is the text of an optional string of an API type ("" when absent).
func deref[T any](p *T) T {
	var zero T
	if p == nil {
		return zero
	}
	return *p
}

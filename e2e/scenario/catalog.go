package scenario

import (
	"context"
	"fmt"
	"net/http"
	"net/url"
	"sort"
	"strings"
	"time"

	"github.com/shopspring/decimal"

	"github.com/usagebilling/billing/pkg/auth"
	"github.com/usagebilling/billing/pkg/money"
)

// CatalogTenant is the tenant of the catalog step: an AI API billed from
// raw events through the meter catalog.
const CatalogTenant = "aiapi"

// CatalogMeter is a meter the catalog step defines, and its prices for
// CatalogTenant (USD, unit pricing): a default and, for some, a price for
// one dimension value.
type CatalogMeter struct {
	Code, Aggregation, ValueProperty, EventType string
	Dimensions                                  []string
	Price                                       string            // the default unit price
	DimPrice                                    map[string]string // a dimension price's dimensions...
	DimUnitPrice                                string            // ...and unit price
}

// CatalogMeters are the AI API's meters: tokens summed and priced by model
// (gpt-4 dearer than the rest), monthly active users, peak seats, storage
// at the latest reading.
var CatalogMeters = []CatalogMeter{
	{Code: "llm_tokens", Aggregation: "sum", ValueProperty: "tokens", EventType: "llm.tokens", Dimensions: []string{"model", "region"},
		Price: "0.000002", DimPrice: map[string]string{"model": "gpt-4"}, DimUnitPrice: "0.00003"},
	{Code: "active_users", Aggregation: "unique_count", ValueProperty: "user_id", EventType: "user.active", Price: "2"},
	{Code: "peak_seats", Aggregation: "max", EventType: "seats.reading", Price: "10"},
	{Code: "storage_gb_latest", Aggregation: "latest", EventType: "storage.reading", Price: "0.05"},
}

// CatalogResult is what the catalog step saw beside what it computed: every
// invoice line, and the day-by-model table of the analytics API.
type CatalogResult struct {
	Tenant, Currency string
	Lines            []CatalogLine
	Usage            []UsageRow
	WantUsage        map[string]decimal.Decimal // tokens by model
	Total, WantTotal decimal.Decimal
	CloudEvents      int // facts sent as CloudEvents
}

// CatalogLine is one invoice line of the catalog step.
type CatalogLine struct {
	Meter, Aggregation, Dimensions string
	Quantity, WantQuantity         decimal.Decimal
	Count, WantCount               int64
	Amount, WantAmount             decimal.Decimal
	UnitPrice                      string
}

// UsageRow is one row of the analytics API's answer.
type UsageRow struct {
	From       time.Time         `json:"from"`
	To         time.Time         `json:"to"`
	Dimensions map[string]string `json:"dimensions"`
	Value      decimal.Decimal   `json:"value"`
}

type catalogFact struct {
	meter string
	id    string
	qty   decimal.Decimal
	at    time.Time
	props map[string]string
}

// catalog defines the meters (a catalog-admin's token), activates the AI
// API's prices, sends its facts (some as CloudEvents), closes its period and
// checks every line and the analytics table against its own arithmetic.
func (r *run) catalog(ctx context.Context) error {
	res := &CatalogResult{Tenant: CatalogTenant, Currency: "USD"}
	r.res.Catalog = res
	admin, err := auth.TokenFromEnv("scenario-catalog", auth.RoleCatalogAdmin, "")
	if err != nil {
		return err
	}
	for _, m := range CatalogMeters {
		body := map[string]any{"code": m.Code, "name": m.Code, "aggregation": m.Aggregation, "eventType": m.EventType}
		if m.ValueProperty != "" {
			body["valueProperty"] = m.ValueProperty
		}
		if len(m.Dimensions) > 0 {
			body["dimensions"] = m.Dimensions
		}
		resp, err := r.call(ctx, http.MethodPost, r.ep.Meter+"/v1/meters", body,
			map[string]string{"Authorization": "Bearer " + admin, "Idempotency-Key": "meter-" + m.Code}, nil)
		if err != nil {
			return err
		}
		if resp.status != http.StatusCreated && resp.status != http.StatusOK {
			return fmt.Errorf("define meter %s: status %d: %s", m.Code, resp.status, resp.body)
		}
	}
	effective, err := r.catalogPrices(ctx)
	if err != nil {
		return err
	}
	// the facts occur once every price is in effect (the earliest 30 ms before now)
	if err := r.untilInEffect(ctx, effective.Add(100*time.Millisecond)); err != nil {
		return err
	}
	facts := catalogFacts(time.Now().UTC().Truncate(time.Millisecond))
	if err := r.sendCatalogFacts(ctx, res, facts); err != nil {
		return err
	}
	if err := r.waitFor(ctx, "the charges of "+CatalogTenant, func() (bool, string, error) {
		cs, err := r.charges(ctx, CatalogTenant)
		return len(cs) >= len(facts), fmt.Sprintf("%d/%d charges", len(cs), len(facts)), err
	}); err != nil {
		return err
	}
	if err := r.checkCatalogInvoice(ctx, res, facts); err != nil {
		return err
	}
	return r.checkCatalogUsage(ctx, res, facts)
}

// catalogPrices activates every price of CatalogTenant (effective now) and
// returns when the last takes effect.
func (r *run) catalogPrices(ctx context.Context) (time.Time, error) {
	var last time.Time
	activate := func(meter, price string, dims map[string]string) error {
		body := map[string]any{"meterCode": meter, "currency": "USD", "unitPrice": price}
		key := "price-" + CatalogTenant + "-" + meter
		if len(dims) > 0 {
			body["dimensions"] = dims
			key += "-dims"
		}
		var got struct {
			EffectiveAt time.Time `json:"effectiveAt"`
		}
		resp, err := r.call(ctx, http.MethodPost, r.ep.Meter+"/v1/tenants/"+CatalogTenant+"/prices", body,
			map[string]string{"Idempotency-Key": key}, &got)
		if err != nil {
			return err
		}
		if resp.status != http.StatusCreated && resp.status != http.StatusOK {
			return fmt.Errorf("price %s %v of %s: status %d: %s", meter, dims, CatalogTenant, resp.status, resp.body)
		}
		if got.EffectiveAt.After(last) {
			last = got.EffectiveAt
		}
		return nil
	}
	for _, m := range CatalogMeters {
		if err := activate(m.Code, m.Price, nil); err != nil {
			return last, err
		}
		if m.DimPrice != nil {
			if err := activate(m.Code, m.DimUnitPrice, m.DimPrice); err != nil {
				return last, err
			}
		}
	}
	return last, nil
}

// catalogFacts are the AI API's facts, all at or a little before now:
// tokens across three models and two regions, 7 distinct users in 20
// activities, seat readings peaking at 12, storage readings whose latest
// (with a tie on occurredAt broken by the larger source event id) is 310.
func catalogFacts(now time.Time) []catalogFact {
	var fs []catalogFact
	models, regions := []string{"gpt-4", "gpt-3.5", "claude"}, []string{"eu", "us"}
	for i := range 30 {
		fs = append(fs, catalogFact{meter: "llm_tokens", id: fmt.Sprintf("tok-%02d", i), qty: decimal.NewFromInt(int64(500 + 137*i)),
			at: now.Add(-time.Duration(30-i) * time.Millisecond), props: map[string]string{"model": models[i%3], "region": regions[i%2]}})
	}
	for i := range 20 {
		fs = append(fs, catalogFact{meter: "active_users", id: fmt.Sprintf("usr-%02d", i), qty: decimal.NewFromInt(1),
			at: now.Add(-time.Duration(20-i) * time.Millisecond), props: map[string]string{"user_id": fmt.Sprintf("user-%d", i%7)}})
	}
	for i, q := range []int64{3, 5, 8, 12, 9, 4, 12, 7, 2, 6} {
		fs = append(fs, catalogFact{meter: "peak_seats", id: fmt.Sprintf("seat-%02d", i), qty: decimal.NewFromInt(q),
			at: now.Add(-time.Duration(10-i) * time.Millisecond)})
	}
	for i, q := range []string{"120", "180.5", "240", "305", "310"} {
		at := now.Add(-time.Duration(5-i) * time.Millisecond)
		if i == 4 {
			at = now.Add(-time.Millisecond) // ties with 305's; "sto-04" > "sto-03" wins
		}
		fs = append(fs, catalogFact{meter: "storage_gb_latest", id: fmt.Sprintf("sto-%02d", i), qty: decimal.RequireFromString(q), at: at})
	}
	return fs
}

// sendCatalogFacts sends the token facts of the gpt-4 model as a CloudEvents
// batch (data carries the tokens and the other properties, as a gateway
// would send them), the rest through usage:batch, until usage knows the
// meters and prices.
func (r *run) sendCatalogFacts(ctx context.Context, res *CatalogResult, facts []catalogFact) error {
	var batch []map[string]any
	var ces []map[string]any
	for _, f := range facts {
		if f.meter == "llm_tokens" && f.props["model"] == "gpt-4" {
			data := map[string]any{"tokens": f.qty.String(), "model": f.props["model"], "region": f.props["region"]}
			ces = append(ces, map[string]any{"specversion": "1.0", "id": f.id, "source": "scenario", "type": "llm.tokens",
				"subject": CatalogTenant, "time": f.at.Format(time.RFC3339Nano), "data": data})
			continue
		}
		b := map[string]any{"sourceSystem": "scenario", "sourceEventId": f.id, "meterCode": f.meter, "quantity": f.qty.String(),
			"occurredAt": f.at.Format(time.RFC3339Nano)}
		if len(f.props) > 0 {
			b["properties"] = f.props
		}
		batch = append(batch, b)
	}
	res.CloudEvents = len(ces)
	auth := r.cfg.Authorize(CatalogTenant)
	return r.waitFor(ctx, "usage to accept the AI API's facts", func() (bool, string, error) {
		var out struct {
			Results []struct {
				Status int    `json:"status"`
				Code   string `json:"code"`
			} `json:"results"`
		}
		resp, err := r.call(ctx, http.MethodPost, r.ep.Usage+"/v1/tenants/"+CatalogTenant+"/usage:batch", map[string]any{"events": batch}, nil, &out)
		if err != nil {
			return false, "", err
		}
		if resp.status != http.StatusOK || len(out.Results) != len(batch) {
			return false, "", fmt.Errorf("usage batch of %s: status %d: %s", CatalogTenant, resp.status, resp.body)
		}
		refused := 0
		for _, x := range out.Results {
			if x.Status != http.StatusCreated && x.Status != http.StatusOK {
				refused++
			}
		}
		ce, err := r.call(ctx, http.MethodPost, r.ep.Usage+"/v1/events", ces,
			map[string]string{"Content-Type": "application/cloudevents-batch+json", "Authorization": auth}, nil)
		if err != nil {
			return false, "", err
		}
		if refused == 0 && ce.status == http.StatusNoContent {
			return true, "", nil
		}
		return false, fmt.Sprintf("%d facts refused, CloudEvents batch: %d %s", refused, ce.status, clipBody(ce.body)), nil
	})
}

func clipBody(s string) string {
	if len(s) > 300 {
		return s[:300] + "..."
	}
	return s
}

// expectedLines computes the AI API's invoice lines from the facts: per
// meter its aggregation (here, not with the services' code), split for
// llm_tokens between the gpt-4 price and the default one.
func expectedLines(facts []catalogFact) map[string]*CatalogLine {
	out := map[string]*CatalogLine{}
	type acc struct {
		facts []catalogFact
	}
	groups := map[string]*acc{}
	for _, f := range facts {
		key := f.meter
		if f.meter == "llm_tokens" && f.props["model"] == "gpt-4" {
			key += " {model=gpt-4}"
		}
		if groups[key] == nil {
			groups[key] = &acc{}
		}
		groups[key].facts = append(groups[key].facts, f)
	}
	for key, g := range groups {
		m := catalogMeter(g.facts[0].meter)
		l := &CatalogLine{Meter: m.Code, Aggregation: m.Aggregation, WantCount: int64(len(g.facts)), UnitPrice: m.Price}
		if strings.Contains(key, "{") {
			l.Dimensions, l.UnitPrice = "model=gpt-4", m.DimUnitPrice
		}
		switch m.Aggregation {
		case "sum":
			for _, f := range g.facts {
				l.WantQuantity = l.WantQuantity.Add(f.qty)
			}
		case "max":
			for _, f := range g.facts {
				l.WantQuantity = decimal.Max(l.WantQuantity, f.qty)
			}
		case "latest":
			best := g.facts[0]
			for _, f := range g.facts {
				if f.at.After(best.at) || (f.at.Equal(best.at) && f.id > best.id) {
					best = f
				}
			}
			l.WantQuantity = best.qty
		case "unique_count":
			seen := map[string]bool{}
			for _, f := range g.facts {
				seen[f.props[m.ValueProperty]] = true
			}
			l.WantQuantity = decimal.NewFromInt(int64(len(seen)))
		}
		l.WantAmount = l.WantQuantity.Mul(decimal.RequireFromString(l.UnitPrice))
		out[key] = l
	}
	return out
}

func catalogMeter(code string) CatalogMeter {
	for _, m := range CatalogMeters {
		if m.Code == code {
			return m
		}
	}
	return CatalogMeter{Code: code}
}

// checkCatalogInvoice closes CatalogTenant's period, waits for its invoice
// and checks every line and the total against expectedLines.
func (r *run) checkCatalogInvoice(ctx context.Context, res *CatalogResult, facts []catalogFact) error {
	tenant := res.Tenant
	resp, err := r.call(ctx, http.MethodPost, r.ep.Billing+"/v1/tenants/"+tenant+"/periods/"+r.res.Period+"/close", nil,
		map[string]string{"Idempotency-Key": "close-" + tenant + "-" + r.res.Period}, nil)
	if err != nil {
		return err
	}
	if resp.status != http.StatusAccepted {
		return fmt.Errorf("close %s %s: status %d: %s", tenant, r.res.Period, resp.status, resp.body)
	}
	type lineDoc struct {
		Kind        string            `json:"kind"`
		MeterCode   string            `json:"meterCode"`
		Quantity    decimal.Decimal   `json:"quantity"`
		ChargeCount int64             `json:"chargeCount"`
		Amount      decimal.Decimal   `json:"amount"`
		Dimensions  map[string]string `json:"dimensions"`
	}
	type invoiceDoc struct {
		Status string           `json:"status"`
		Lines  []lineDoc        `json:"lines"`
		Total  *decimal.Decimal `json:"total"`
	}
	var inv invoiceDoc
	err = r.waitFor(ctx, "the invoice of "+tenant, func() (bool, string, error) {
		invs, err := listAll[invoiceDoc](ctx, r, r.ep.Invoice+"/v1/tenants/"+tenant+"/invoices?period="+r.res.Period, "invoices", "invoices of "+tenant)
		if err != nil || len(invs) == 0 {
			return false, "no invoice yet", err
		}
		inv = invs[0]
		return inv.Status == "issued", "invoice " + inv.Status, nil
	})
	if err != nil {
		return err
	}
	want := expectedLines(facts)
	sum := decimal.Zero
	for _, l := range inv.Lines {
		if l.Kind != "charge" {
			continue
		}
		key := l.MeterCode
		if len(l.Dimensions) > 0 {
			var parts []string
			for k, v := range l.Dimensions {
				parts = append(parts, k+"="+v)
			}
			sort.Strings(parts)
			key += " {" + strings.Join(parts, ",") + "}"
		}
		w := want[key]
		if w == nil {
			r.mismatch("%s: an invoice line %s the facts do not explain", tenant, key)
			continue
		}
		w.Quantity, w.Count, w.Amount = l.Quantity, l.ChargeCount, l.Amount
		delete(want, key)
		res.Lines = append(res.Lines, *w)
		if !w.Quantity.Equal(w.WantQuantity) || w.Count != w.WantCount || !w.Amount.Equal(w.WantAmount) {
			r.mismatch("%s line %s (%s): quantity %s count %d amount %s, want %s %d %s", tenant, key, w.Aggregation,
				w.Quantity, w.Count, w.Amount, w.WantQuantity, w.WantCount, w.WantAmount)
		}
		sum = sum.Add(w.WantAmount)
	}
	for key, w := range want {
		r.mismatch("%s: no invoice line %s (want quantity %s amount %s)", tenant, key, w.WantQuantity, w.WantAmount)
		res.Lines = append(res.Lines, *w)
		sum = sum.Add(w.WantAmount)
	}
	sort.Slice(res.Lines, func(i, j int) bool {
		return res.Lines[i].Meter+res.Lines[i].Dimensions < res.Lines[j].Meter+res.Lines[j].Dimensions
	})
	if res.WantTotal, err = money.Round(sum, res.Currency); err != nil {
		return err
	}
	if inv.Total != nil {
		res.Total = *inv.Total
	}
	if !res.Total.Equal(res.WantTotal) {
		r.mismatch("%s's invoice total %s, want %s", tenant, res.Total, res.WantTotal)
	}
	return nil
}

// checkCatalogUsage reads the analytics API: llm_tokens by day and model
// over the period so far, compared with the facts' sums by model.
func (r *run) checkCatalogUsage(ctx context.Context, res *CatalogResult, facts []catalogFact) error {
	res.WantUsage = map[string]decimal.Decimal{}
	for _, f := range facts {
		if f.meter == "llm_tokens" {
			res.WantUsage[f.props["model"]] = res.WantUsage[f.props["model"]].Add(f.qty)
		}
	}
	start, err := time.Parse("2006-01", r.res.Period)
	if err != nil {
		return err
	}
	q := url.Values{"from": {start.Format(time.RFC3339)}, "to": {start.AddDate(0, 1, 0).Format(time.RFC3339)},
		"windowSize": {"day"}, "groupBy": {"model"}, "timeZone": {"UTC"}}
	base := r.ep.Query + "/v1/tenants/" + res.Tenant + "/meters/llm_tokens/usage?" + q.Encode()
	return r.waitFor(ctx, "the usage analytics of "+res.Tenant, func() (bool, string, error) {
		rows, err := listAll[UsageRow](ctx, r, base, "rows", "usage of llm_tokens")
		if err != nil {
			return false, "", err
		}
		got := map[string]decimal.Decimal{}
		for _, row := range rows {
			got[row.Dimensions["model"]] = got[row.Dimensions["model"]].Add(row.Value)
		}
		res.Usage = rows
		for m, w := range res.WantUsage {
			if !got[m].Equal(w) {
				return false, fmt.Sprintf("model %s: %s of %s tokens", m, got[m], w), nil
			}
		}
		return len(got) == len(res.WantUsage), fmt.Sprintf("%d models", len(got)), nil
	})
}

package money

import (
	"context"
	"fmt"
	"strings"

	"github.com/shopspring/decimal"
)

// TaxRate is one of a tenant's tax rates (settings taxRates, DESIGN.md
// section 3a): a tax line on each invoice of the periods its settings
// apply to.
type TaxRate struct {
	Code, Name string
	Rate       decimal.Decimal
}

// TaxLine is a tax line of an issued invoice as the model expects it.
type TaxLine struct {
	TaxRate
	Amount decimal.Decimal
}

// taxLines are an issued invoice's tax lines: one per rate, in the
// settings' order, each the rate x the subtotal rounded half-even to the
// minor unit, itself rounded half-even.
func taxLines(rates []TaxRate, subtotal, rounded decimal.Decimal, currency string) []TaxLine {
	base := rounded
	if mutation == "tax-before-rounding" { // a deliberately wrong model: the tax of the unrounded subtotal
		base = subtotal
	}
	out := make([]TaxLine, 0, len(rates))
	for _, x := range rates {
		out = append(out, TaxLine{TaxRate: x, Amount: roundTotal(x.Rate.Mul(base), currency)})
	}
	return out
}

// taxCodes are the codes tenants give their rates, each with its name.
var taxCodes = []struct{ Code, Name string }{
	{"VAT", "Value added tax"}, {"GST", "Goods and services tax"}, {"STATE", "State sales tax"},
	{"CITY", "City tax"}, {"county.tax", "County tax"}, {"eu-oss_1", "EU one-stop shop VAT"}, {"PST", "Provincial sales tax"},
}

// taxRateValues: tenths, a typical VAT, fractions of a percent, all six
// decimal places.
var taxRateValues = []string{"0.1", "0.2", "0.075", "0.19", "0.0725", "0.123456", "0.08875", "0.25"}

// taxRates are 0-3 random rates for a settings request; one time in
// twenty-five the most a tenant may have (five), with a code and a name of
// the longest allowed.
func (r *runner) taxRates() []TaxRate {
	if r.rng.IntN(25) == 0 {
		rs := r.someTaxRates(5)
		rs[0].Code = strings.Repeat("X", 32)
		rs[1].Name = string([]rune(strings.Repeat("Taxe ajoutée ", 8))[:100]) // 100 characters, more bytes
		return rs
	}
	n := 0
	switch x := r.rng.IntN(20); {
	case x < 3:
	case x < 12:
		n = 1
	case x < 17:
		n = 2
	default:
		n = 3
	}
	return r.someTaxRates(n)
}

// someTaxRates are n rates of distinct codes; one time in twenty a rate is
// an edge of the range (0, or 0.999999).
func (r *runner) someTaxRates(n int) []TaxRate {
	out := make([]TaxRate, 0, n)
	for _, i := range r.rng.Perm(len(taxCodes))[:n] {
		rate := pickString(r.rng, taxRateValues)
		if r.rng.IntN(20) == 0 {
			rate = pickString(r.rng, []string{"0", "0.999999"})
		}
		out = append(out, TaxRate{Code: taxCodes[i].Code, Name: taxCodes[i].Name, Rate: dec(rate)})
	}
	return out
}

// taxRatesBody is rates as a settings request lists them.
func taxRatesBody(rates []TaxRate) []map[string]any {
	out := make([]map[string]any, 0, len(rates))
	for _, x := range rates {
		out = append(out, map[string]any{"code": x.Code, "name": x.Name, "rate": x.Rate.String()})
	}
	return out
}

// invalidTaxRates are tax rates billing must refuse, with its answer
// (billing's OpenAPI document): a code, name or rate that is no such thing
// (400 invalid_tax_rate), a rate of 1 or more, below 0 or of seven decimal
// places (422 tax_rate_out_of_range), a code given twice (422
// duplicate_tax_code), six rates (422 too_many_tax_rates). One problem each.
func (r *runner) invalidTaxRates() ([]map[string]any, int, string) {
	rates := taxRatesBody(r.someTaxRates(1 + r.rng.IntN(2)))
	bad := rates[r.rng.IntN(len(rates))]
	switch r.rng.IntN(9) {
	case 0:
		bad["code"] = strings.Repeat("T", 33)
	case 1:
		bad["code"] = pickString(r.rng, []string{"V AT", "VAT/EU", "TVA%"})
	case 2:
		bad["code"] = ""
	case 3:
		bad["name"] = ""
	case 4:
		bad["name"] = strings.Repeat("n", 101)
	case 5:
		bad["rate"] = pickString(r.rng, []string{"twenty", "0,2", ""})
	case 6:
		bad["rate"] = pickString(r.rng, []string{"1", "1.5", "-0.01", "0.1234567"})
		return rates, 422, "tax_rate_out_of_range"
	case 7:
		rates = append(rates, map[string]any{"code": rates[0]["code"], "name": "Again", "rate": "0.01"})
		return rates, 422, "duplicate_tax_code"
	default:
		return taxRatesBody(r.someTaxRates(6)), 422, "too_many_tax_rates"
	}
	return rates, 400, "invalid_tax_rate"
}

// taxes puts new tax rates for the tenant (PUT .../settings, which
// replaces every setting): mostly with its zone and grace as they are, one
// time in four with a new zone and grace too; now and then a refused set.
func (r *runner) taxes(ctx context.Context, t *Tenant) error {
	want := t.latestSetting()
	want.Taxes = r.taxRates()
	if r.rng.IntN(4) == 0 {
		if err := r.randomZone(&want); err != nil {
			return err
		}
	}
	body := settingsBody(want)
	if len(want.Taxes) == 0 && r.rng.IntN(2) == 0 {
		body["taxRates"] = []any{} // none, said rather than left out
	}
	if r.rng.IntN(100) < 15 {
		rates, status, code := r.invalidTaxRates()
		body["taxRates"] = rates
		return r.putSettings(ctx, t, "taxes", body, want, status, code)
	}
	return r.putSettings(ctx, t, "taxes", body, want, 200, "")
}

// taxRateDoc is a tax rate as billing answers it.
type taxRateDoc struct {
	Code string          `json:"code"`
	Name string          `json:"name"`
	Rate decimal.Decimal `json:"rate"`
}

// sameTaxRates: billing's answer lists the rates asked for, in order.
func sameTaxRates(got []taxRateDoc, want []TaxRate) bool {
	if len(got) != len(want) {
		return false
	}
	for i, g := range got {
		if g.Code != want[i].Code || g.Name != want[i].Name || !g.Rate.Equal(want[i].Rate) {
			return false
		}
	}
	return true
}

// compareTaxes compares an issued invoice's tax lines (by code: name, rate
// and amount; in the settings' order, after every other line but the
// credit lines), its taxTotal and its total with the model's.
func compareTaxes(g invoiceDoc, w *ExpInvoice) []string {
	var diffs []string
	want := map[string]TaxLine{}
	for _, x := range w.Taxes {
		want[x.Code] = x
	}
	rounded := w.Subtotal.Add(w.Rounding)
	seen := map[string]bool{}
	var order []string
	after := "" // the kind of the first line after a tax line
	for _, l := range g.Lines {
		if l.Kind != "tax" {
			if len(order) > 0 && after == "" && l.Kind != "credit_applied" {
				after = l.Kind
			}
			continue
		}
		order = append(order, l.TaxCode)
		x, ok := want[l.TaxCode]
		if !ok || seen[l.TaxCode] {
			diffs = append(diffs, fmt.Sprintf("tax line %s (%q at %v): %s, which the model does not expect", l.TaxCode, l.Name, orNil(l.TaxRate), l.Amount))
			continue
		}
		seen[l.TaxCode] = true
		if l.Name != x.Name || l.TaxRate == nil || !l.TaxRate.Equal(x.Rate) || !l.Amount.Equal(x.Amount) {
			diffs = append(diffs, fmt.Sprintf("tax line %s: %q at %v = %s, want %q at %s = %s (the rate x the rounded subtotal %s; subtotal %s)",
				l.TaxCode, l.Name, orNil(l.TaxRate), l.Amount, x.Name, x.Rate, x.Amount, rounded, w.Subtotal))
		}
	}
	var wantOrder []string
	for _, x := range w.Taxes {
		wantOrder = append(wantOrder, x.Code)
		if !seen[x.Code] {
			diffs = append(diffs, fmt.Sprintf("no tax line %s (want %q at %s = %s)", x.Code, x.Name, x.Rate, x.Amount))
		}
	}
	if len(diffs) == 0 && strings.Join(order, ",") != strings.Join(wantOrder, ",") {
		diffs = append(diffs, fmt.Sprintf("tax lines in the order %v, want the settings' %v", order, wantOrder))
	}
	if after != "" {
		diffs = append(diffs, "a "+after+" line after a tax line")
	}
	if g.TaxTotal == nil || !g.TaxTotal.Equal(w.TaxTotal) {
		diffs = append(diffs, fmt.Sprintf("taxTotal %v, want %s", orNil(g.TaxTotal), w.TaxTotal))
	}
	if g.Total == nil || !g.Total.Equal(w.Total) {
		diffs = append(diffs, fmt.Sprintf("total %v, want %s (the rounded subtotal %s + taxes %s)", orNil(g.Total), w.Total, rounded, w.TaxTotal))
	}
	return diffs
}

// orNil is an optional decimal of an answer, "none" when absent.
func orNil(d *decimal.Decimal) string {
	if d == nil {
		return "none"
	}
	return d.String()
}

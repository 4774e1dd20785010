package httpapi

import (
	"fmt"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/usagebilling/billing/pkg/httpx"
	"github.com/usagebilling/billing/services/invoice/internal/app"
	"github.com/usagebilling/billing/services/invoice/internal/document"
)

// The representations of one invoice, in the order a tie prefers them.
const (
	mediaJSON = "application/json"
	mediaPDF  = "application/pdf"
	mediaHTML = "text/html"
)

var invoiceMedia = []string{mediaJSON, mediaPDF, mediaHTML}

// documentOf is inv as its documents show it: every figure the very
// decimal its JSON answer writes (decimal.Decimal's String, which its
// MarshalJSON quotes), every field of a line its JSON has.
func documentOf(inv app.Invoice, seller document.Seller, now time.Time) document.Document {
	d := document.Document{
		Seller: seller, TenantID: inv.TenantID, InvoiceID: inv.InvoiceID.String(), Period: inv.Period,
		Currency: inv.Currency, Status: inv.Status, AsOf: now.UTC(),
		Lines:  make([]document.Line, len(inv.Lines)),
		Totals: []document.Field{{Name: "Subtotal", Value: inv.Subtotal.String()}},
	}
	if inv.Number != nil {
		d.Number = strconv.FormatInt(*inv.Number, 10)
	}
	if inv.IssuedAt != nil {
		d.IssuedAt = inv.IssuedAt.UTC().Format(time.RFC3339Nano)
		d.AsOf = inv.IssuedAt.UTC() // an issued invoice's document is the same whenever asked
	}
	if inv.Total != nil {
		if !inv.TaxTotal.IsZero() {
			d.Totals = append(d.Totals, document.Field{Name: "Taxes", Value: inv.TaxTotal.String()})
		}
		d.Totals = append(d.Totals, document.Field{Name: "Total", Value: inv.Total.String()})
		if inv.CreditsApplied != nil && !inv.CreditsApplied.IsZero() {
			d.Totals = append(d.Totals, document.Field{Name: "Credits applied", Value: inv.CreditsApplied.String()},
				document.Field{Name: "Amount due", Value: inv.AmountDue.String()})
		}
	}
	for i, l := range inv.Lines {
		d.Lines[i] = lineOf(l)
	}
	for _, c := range inv.Corrections {
		d.Corrections = append(d.Corrections, document.Correction{
			CorrectionID: c.CorrectionID.String(), OriginEventID: c.OriginEventID.String(),
			Amount: c.Amount.String(), IssuedAt: c.IssuedAt.UTC().Format(time.RFC3339Nano),
		})
	}
	return d
}

// lineOf is l with the details its JSON carries, those it has.
func lineOf(l app.Line) document.Line {
	out := document.Line{LineID: l.LineID, Kind: l.Kind, Amount: l.Amount.String()}
	if l.Quantity != nil {
		out.Quantity = l.Quantity.String()
	}
	add := func(name, value string) {
		if value != "" {
			out.Details = append(out.Details, document.Field{Name: name, Value: value})
		}
	}
	add("Meter", l.MeterCode)
	if l.PlanCode != "" {
		add("Plan", fmt.Sprintf("%s, version %d", l.PlanCode, l.PlanVersion))
	} else if l.PriceVersion != 0 {
		add("Price version", strconv.FormatInt(l.PriceVersion, 10))
	}
	if len(l.Dimensions) > 0 {
		names := make([]string, 0, len(l.Dimensions))
		for name := range l.Dimensions {
			names = append(names, name)
		}
		slices.Sort(names)
		pairs := make([]string, len(names))
		for i, name := range names {
			pairs[i] = name + "=" + l.Dimensions[name]
		}
		add("Dimensions", strings.Join(pairs, ", "))
	}
	if l.ChargeCount != 0 {
		add("Charges", strconv.FormatInt(l.ChargeCount, 10))
	}
	if l.GrantID != nil {
		add("Credit grant", l.GrantID.String())
	}
	if l.TaxCode != "" {
		add("Tax", l.TaxCode+" ("+l.Name+")")
		add("Rate", l.TaxRate.String())
	}
	if l.OriginEventID != nil {
		add("Origin event", l.OriginEventID.String())
	}
	return out
}

// writeDocument answers inv as a PDF or an HTML page (media).
func (a *API) writeDocument(w http.ResponseWriter, r *http.Request, inv app.Invoice, media string) {
	d := documentOf(inv, a.seller, a.now())
	render := document.HTML
	if media == mediaPDF {
		render = document.PDF
	}
	body, err := render(d)
	if err != nil {
		httpx.WriteError(w, r, a.log, err)
		return
	}
	h := w.Header()
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set("Cache-Control", "private, no-cache")
	if media == mediaPDF {
		h.Set("Content-Type", mediaPDF)
		h.Set("Content-Disposition", fmt.Sprintf(`inline; filename="invoice-%s.pdf"`, inv.InvoiceID))
	} else {
		h.Set("Content-Type", mediaHTML+"; charset=utf-8")
		h.Set("Content-Security-Policy", document.ContentSecurityPolicy)
		h.Set("Referrer-Policy", "no-referrer")
	}
	h.Set("Content-Length", strconv.Itoa(len(body)))
	w.WriteHeader(http.StatusOK)
	_, _ = w.Write(body)
}

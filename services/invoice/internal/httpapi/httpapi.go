// Package httpapi is the invoice service's HTTP API (pkg/api/invoiceapi/openapi.yaml):
// reading a tenant's invoices, page by page, with their aggregated lines and
// correction notes; one invoice also as a PDF or an HTML document
// (internal/document), by content negotiation.
package httpapi

import (
	"errors"
	"log/slog"
	"net/http"
	"strings"
	"time"

	"github.com/go-chi/chi/v5"
	"github.com/google/uuid"
	"github.com/shopspring/decimal"

	"github.com/usagebilling/billing/pkg/api/invoiceapi"
	"github.com/usagebilling/billing/pkg/auth"
	"github.com/usagebilling/billing/pkg/events"
	"github.com/usagebilling/billing/pkg/httpx"
	"github.com/usagebilling/billing/pkg/page"
	"github.com/usagebilling/billing/services/invoice/internal/app"
	"github.com/usagebilling/billing/services/invoice/internal/document"
)

// API serves the invoice endpoints.
type API struct {
	svc    *app.App
	seller document.Seller // who the documents name as issuing the invoices
	log    *slog.Logger
	now    func() time.Time // the "as of" of an open invoice's document
}

// New returns the API reading invoices and granting credits through the
// App, its documents naming seller.
func New(svc *app.App, seller document.Seller, log *slog.Logger) *API {
	return &API{svc: svc, seller: seller, log: log, now: time.Now}
}

// Routes mounts the endpoints on r.
func (a *API) Routes(r chi.Router) {
	r.Method(http.MethodGet, "/v1/tenants/{tenantId}/invoices", auth.Allow(a.list, auth.RoleViewer, auth.RoleBillingAdmin))
	r.Method(http.MethodGet, "/v1/tenants/{tenantId}/invoices/{invoiceId}", auth.Allow(a.get, auth.RoleViewer, auth.RoleBillingAdmin))
	r.Method(http.MethodGet, "/openapi.json", invoiceapi.Handler())
}

type invoiceJSON struct {
	InvoiceID uuid.UUID        `json:"invoiceId"`
	Number    *int64           `json:"number,omitempty"` // absent until issued
	TenantID  string           `json:"tenantId"`
	Period    string           `json:"period"`
	Currency  string           `json:"currency"`
	Status    string           `json:"status"`
	Lines     []lineJSON       `json:"lines"`
	Subtotal  decimal.Decimal  `json:"subtotal"`
	TaxTotal  *decimal.Decimal `json:"taxTotal,omitempty"`
	Total     *decimal.Decimal `json:"total"`
	// CreditsApplied and AmountDue: issued only.
	CreditsApplied *decimal.Decimal `json:"creditsApplied,omitempty"`
	AmountDue      *decimal.Decimal `json:"amountDue,omitempty"`
	IssuedAt       *time.Time       `json:"issuedAt"`
	Corrections    []correctionJSON `json:"corrections"`
}

// lineJSON is a line; the charge fields are absent on adjustment and
// rounding lines, originEventId on charge and unpriced lines, dimensions
// on a line without them, priceVersion on an unpriced line.
type lineJSON struct {
	LineID        string            `json:"lineId"`
	Kind          string            `json:"kind"`
	MeterCode     string            `json:"meterCode,omitempty"`
	PriceVersion  int64             `json:"priceVersion,omitempty"`
	Quantity      *decimal.Decimal  `json:"quantity,omitempty"`
	ChargeCount   int64             `json:"chargeCount,omitempty"`
	Amount        decimal.Decimal   `json:"amount"`
	OriginEventID *uuid.UUID        `json:"originEventId,omitempty"`
	Dimensions    map[string]string `json:"dimensions,omitempty"`
	PlanCode      string            `json:"planCode,omitempty"`
	PlanVersion   int64             `json:"planVersion,omitempty"`
	FeeCode       string            `json:"feeCode,omitempty"`
	Name          string            `json:"name,omitempty"`
	Days          int               `json:"days,omitempty"`
	PeriodDays    int               `json:"periodDays,omitempty"`
	TaxCode       string            `json:"taxCode,omitempty"`
	TaxRate       *decimal.Decimal  `json:"taxRate,omitempty"`
	GrantID       *uuid.UUID        `json:"grantId,omitempty"`
}

type correctionJSON struct {
	CorrectionID  uuid.UUID       `json:"correctionId"`
	OriginEventID uuid.UUID       `json:"originEventId"`
	Amount        decimal.Decimal `json:"amount"`
	IssuedAt      time.Time       `json:"issuedAt"`
}

func toJSON(inv app.Invoice) invoiceJSON {
	out := invoiceJSON{
		InvoiceID: inv.InvoiceID, Number: inv.Number, TenantID: inv.TenantID, Period: inv.Period, Currency: inv.Currency,
		Status: inv.Status, Subtotal: inv.Subtotal, Total: inv.Total, IssuedAt: inv.IssuedAt,
		CreditsApplied: inv.CreditsApplied, AmountDue: inv.AmountDue,
		Lines: make([]lineJSON, len(inv.Lines)), Corrections: make([]correctionJSON, len(inv.Corrections)),
	}
	if inv.Total != nil { // issued
		taxTotal := inv.TaxTotal
		out.TaxTotal = &taxTotal
	}
	for i, l := range inv.Lines {
		out.Lines[i] = lineJSON(l)
	}
	for i, c := range inv.Corrections {
		out.Corrections[i] = correctionJSON(c)
	}
	return out
}

// codeTooManyLines: a read's invoices hold more lines and correction notes
// than app.Config.MaxReadLines (422).
const codeTooManyLines = "too_many_lines"

// list: GET /v1/tenants/{tenantId}/invoices?period=YYYY-MM&limit=&cursor=.
// Without period (or with an empty one) it lists every period's invoices.
// Pages are keyset pages in (period, currency) order (pkg/page).
func (a *API) list(w http.ResponseWriter, r *http.Request) {
	tenantID, p := httpx.TenantID(chi.URLParam(r, "tenantId"))
	if p != nil {
		httpx.WriteProblem(w, p)
		return
	}
	period := r.URL.Query().Get("period")
	if period != "" {
		if _, err := events.ParsePeriod(period); err != nil {
			httpx.WriteProblem(w, httpx.Problemf(http.StatusBadRequest, "invalid_period", "period %q must be a month in the form YYYY-MM", period))
			return
		}
	}
	req, p := page.Parse(r.URL.Query())
	if p != nil {
		httpx.WriteProblem(w, p)
		return
	}
	var after *app.Position
	if !req.First() {
		var pos app.Position
		if p := req.After(&pos); p != nil {
			httpx.WriteProblem(w, p)
			return
		}
		if _, err := events.ParsePeriod(pos.Period); err != nil || pos.Currency == "" {
			httpx.WriteProblem(w, httpx.NewProblem(http.StatusBadRequest, "invalid_cursor", "cursor must be a next value this API returned"))
			return
		}
		after = &pos
	}
	invs, err := a.svc.Invoices(r.Context(), tenantID, period, after, req.Fetch())
	if errors.Is(err, app.ErrTooManyLines) {
		httpx.WriteProblem(w, httpx.NewProblem(http.StatusUnprocessableEntity, codeTooManyLines,
			"the invoices of this page hold more lines and correction notes than one answer carries; ask for fewer with limit"))
		return
	}
	if err != nil {
		httpx.WriteError(w, r, a.log, err)
		return
	}
	invs, next := page.Cut(req, invs, func(inv app.Invoice) any { return app.PositionOf(inv) })
	out := struct {
		Invoices []invoiceJSON `json:"invoices"`
		Next     *string       `json:"next,omitempty"`
	}{Invoices: make([]invoiceJSON, len(invs)), Next: next}
	for i, inv := range invs {
		out.Invoices[i] = toJSON(inv)
	}
	httpx.WriteJSON(w, http.StatusOK, out)
}

// get: GET /v1/tenants/{tenantId}/invoices/{invoiceId}. An id that is not a
// UUID is 400 invalid_invoice_id; an unknown id, or another tenant's, is 404.
// The Accept header chooses the representation (negotiate): the JSON (also
// without Accept), a PDF or an HTML page, each built from the same read;
// an Accept that admits none of them is 406 not_acceptable.
func (a *API) get(w http.ResponseWriter, r *http.Request) {
	w.Header().Add("Vary", "Accept")
	tenantID, p := httpx.TenantID(chi.URLParam(r, "tenantId"))
	if p != nil {
		httpx.WriteProblem(w, p)
		return
	}
	id, ok := httpx.ParseUUID(chi.URLParam(r, "invoiceId"))
	if !ok {
		httpx.WriteProblem(w, httpx.NewProblem(http.StatusBadRequest, "invalid_invoice_id",
			"invoice id must be a UUID in its canonical form (xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx), not the nil UUID"))
		return
	}
	media, ok := negotiate(r.Header.Values("Accept"), invoiceMedia)
	if !ok {
		httpx.WriteProblem(w, httpx.Problemf(http.StatusNotAcceptable, "not_acceptable",
			"an invoice is served as %s; the Accept header admits none of them", strings.Join(invoiceMedia, ", ")))
		return
	}
	inv, err := a.svc.Invoice(r.Context(), tenantID, id)
	if errors.Is(err, app.ErrNotFound) {
		httpx.WriteProblem(w, httpx.Problemf(http.StatusNotFound, "not_found", "tenant %s has no invoice %s", tenantID, id))
		return
	}
	if errors.Is(err, app.ErrTooManyLines) {
		httpx.WriteProblem(w, httpx.Problemf(http.StatusUnprocessableEntity, codeTooManyLines,
			"invoice %s holds more lines and correction notes than one answer carries; billing lists its charges page by page", id))
		return
	}
	if err != nil {
		httpx.WriteError(w, r, a.log, err)
		return
	}
	if media != mediaJSON {
		a.writeDocument(w, r, inv, media)
		return
	}
	httpx.WriteJSON(w, http.StatusOK, toJSON(inv))
}

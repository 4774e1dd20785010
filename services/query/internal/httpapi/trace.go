package httpapi

import (
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/go-chi/chi/v5"
	"github.com/google/uuid"
	"github.com/shopspring/decimal"

	"github.com/usagebilling/billing/pkg/events"
	"github.com/usagebilling/billing/pkg/httpx"
	"github.com/usagebilling/billing/pkg/page"
	"github.com/usagebilling/billing/services/query/internal/app"
)

// A tenant traces its own invoice (roles viewer and billing-admin of the
// tenant): a line's charges each with its usage fact (chargeFacts), the
// facts billed late into a period (lateUsage), and the reconciliation of
// a period (Operator.tenantReconciliation).

type chargeFactJSON struct {
	ChargeID     uuid.UUID         `json:"chargeId"`
	EventID      uuid.UUID         `json:"eventId"`
	UsageEventID uuid.UUID         `json:"usageEventId"`
	MeterCode    string            `json:"meterCode"`
	Currency     string            `json:"currency"`
	Quantity     decimal.Decimal   `json:"quantity"`
	UnitPrice    decimal.Decimal   `json:"unitPrice"`
	PriceVersion int64             `json:"priceVersion"`
	Amount       decimal.Decimal   `json:"amount"`
	Period       string            `json:"period"`
	Late         bool              `json:"late"`
	Unpriced     bool              `json:"unpriced"`
	PlanCode     string            `json:"planCode,omitempty"`
	Dimensions   map[string]string `json:"dimensions,omitempty"`
	OccurredAt   time.Time         `json:"occurredAt"`
	Fact         *factJSON         `json:"fact"`
}

type factJSON struct {
	UsageID       uuid.UUID         `json:"usageId"`
	EventID       uuid.UUID         `json:"eventId"`
	SourceSystem  string            `json:"sourceSystem"`
	SourceEventID string            `json:"sourceEventId"`
	MeterCode     string            `json:"meterCode"`
	Quantity      decimal.Decimal   `json:"quantity"`
	OccurredAt    time.Time         `json:"occurredAt"`
	Properties    map[string]string `json:"properties"`
}

func chargeFactOf(c app.ChargeFact) chargeFactJSON {
	ch := c.Charge
	out := chargeFactJSON{ChargeID: ch.ChargeID, EventID: c.EventID, UsageEventID: c.UsageEventID, MeterCode: ch.MeterCode,
		Currency: ch.Currency, Quantity: ch.Quantity, UnitPrice: ch.UnitPrice, PriceVersion: ch.PriceVersion,
		Amount: ch.Amount, Period: ch.Period, Late: ch.Late, Unpriced: ch.Unpriced, PlanCode: ch.PlanCode,
		Dimensions: ch.Dimensions, OccurredAt: ch.OccurredAt.UTC()}
	if f := c.Fact; f != nil {
		props := f.Properties
		if props == nil {
			props = map[string]string{}
		}
		out.Fact = &factJSON{UsageID: f.UsageID, EventID: c.UsageEventID, SourceSystem: f.SourceSystem,
			SourceEventID: f.SourceEventID, MeterCode: f.MeterCode, Quantity: f.Quantity,
			OccurredAt: f.OccurredAt.UTC(), Properties: props}
	}
	return out
}

// tracePage reads the tenant id, the page request and its position.
func tracePage(r *http.Request) (string, page.Request, *app.TracePosition, *httpx.Problem) {
	tenantID, p := httpx.TenantID(chi.URLParam(r, "tenantId"))
	if p != nil {
		return "", page.Request{}, nil, p
	}
	req, p := page.Parse(r.URL.Query())
	if p != nil {
		return "", page.Request{}, nil, p
	}
	if req.First() {
		return tenantID, req, nil, nil
	}
	var after app.TracePosition
	if p := req.After(&after); p != nil {
		return "", page.Request{}, nil, p
	}
	return tenantID, req, &after, nil
}

// period checks a period: YYYY-MM, else 400 invalid_period.
func period(s string) (string, *httpx.Problem) {
	if _, err := events.ParsePeriod(s); err != nil {
		return "", httpx.Problemf(http.StatusBadRequest, "invalid_period", "period must be YYYY-MM, not %q", clip(s))
	}
	return s, nil
}

// clip bounds a value echoed in a problem.
func clip(s string) string {
	if len(s) > 64 {
		return s[:64] + "..."
	}
	return s
}

// chargeFacts: GET /v1/tenants/{tenantId}/periods/{period}/charge-facts
// ?lineId=&meterCode=&currency=&limit=&cursor= — the period's charges (a
// line's, with lineId as the invoice names it), each with the usage fact it
// rates, in usage event order.
func (a *API) chargeFacts(w http.ResponseWriter, r *http.Request) {
	tenantID, req, after, p := tracePage(r)
	if p != nil {
		httpx.WriteProblem(w, p)
		return
	}
	q := app.ChargeQuery{TenantID: tenantID}
	if q.Period, p = period(chi.URLParam(r, "period")); p != nil {
		httpx.WriteProblem(w, p)
		return
	}
	v := r.URL.Query()
	q.MeterCode, q.Currency = v.Get("meterCode"), v.Get("currency")
	if id := v.Get("lineId"); id != "" {
		line, p := parseLineID(id)
		if p != nil {
			httpx.WriteProblem(w, p)
			return
		}
		if q.MeterCode != "" && q.MeterCode != line.MeterCode {
			httpx.WriteProblem(w, httpx.NewProblem(http.StatusBadRequest, "invalid_line_id", "lineId names another meter than meterCode"))
			return
		}
		q.Line = &line
	}
	rows, err := a.reader.ChargeFacts(r.Context(), q, req.Fetch(), after)
	if err != nil {
		httpx.WriteError(w, r, a.log, err)
		return
	}
	rows, next := page.Cut(req, rows, func(c app.ChargeFact) any { return c.Position() })
	out := make([]chargeFactJSON, len(rows))
	for i, c := range rows {
		out[i] = chargeFactOf(c)
	}
	httpx.WriteJSON(w, http.StatusOK, struct {
		Charges []chargeFactJSON `json:"charges"`
		Next    *string          `json:"next,omitempty"`
	}{out, next})
}

// parseLineID reads an invoice's charge or unpriced line id (invoice's
// domain.LineID): charge/<meterCode>/<priceVersion>[/<key>] or
// unpriced/<meterCode>[/<key>], key being the price's dimensions (and its
// plan as @plan) in query form. Problem: invalid_line_id (400).
func parseLineID(id string) (app.Line, *httpx.Problem) {
	bad := func(why string) (app.Line, *httpx.Problem) {
		return app.Line{}, httpx.Problemf(http.StatusBadRequest, "invalid_line_id",
			"lineId must be an invoice's charge/<meterCode>/<priceVersion>[/<dimensions>] or unpriced/<meterCode>[/<dimensions>] line id: %s", why)
	}
	if len(id) > 1024 {
		return bad("too long")
	}
	var l app.Line
	kind, rest, _ := strings.Cut(id, "/")
	var key string
	switch kind {
	case "charge":
		parts := strings.SplitN(rest, "/", 3)
		if len(parts) < 2 {
			return bad("no price version")
		}
		v, err := strconv.ParseInt(parts[1], 10, 64)
		if err != nil || v < 1 {
			return bad("the price version is no positive integer")
		}
		l.MeterCode, l.PriceVersion = parts[0], v
		if len(parts) == 3 {
			key = parts[2]
		}
	case "unpriced":
		l.Unpriced = true
		l.MeterCode, key, _ = strings.Cut(rest, "/")
	default:
		return bad("not a charge or unpriced line")
	}
	if l.MeterCode == "" {
		return bad("no meter code")
	}
	if key != "" {
		vs, err := url.ParseQuery(key)
		if err != nil {
			return bad("the dimensions are not name=value pairs")
		}
		for name, values := range vs {
			if len(values) != 1 || name == "" {
				return bad("a dimension named twice or without a name")
			}
			if name == "@plan" {
				l.PlanCode = values[0]
				continue
			}
			if l.Dimensions == nil {
				l.Dimensions = map[string]string{}
			}
			l.Dimensions[name] = values[0]
		}
	}
	return l, nil
}

type lateUsageJSON struct {
	chargeFactJSON
	OccurrencePeriod string `json:"occurrencePeriod"`
	BilledPeriod     string `json:"billedPeriod"`
}

// lateUsage: GET /v1/tenants/{tenantId}/late-usage?period=&limit=&cursor=
// — the facts that arrived after the period they occurred in had closed,
// billed in period: each with both periods, in usage event order.
func (a *API) lateUsage(w http.ResponseWriter, r *http.Request) {
	tenantID, req, after, p := tracePage(r)
	if p != nil {
		httpx.WriteProblem(w, p)
		return
	}
	billed, p := period(r.URL.Query().Get("period"))
	if p != nil {
		httpx.WriteProblem(w, p)
		return
	}
	rows, err := a.reader.LateUsage(r.Context(), tenantID, billed, req.Fetch(), after)
	if err != nil {
		httpx.WriteError(w, r, a.log, err)
		return
	}
	rows, next := page.Cut(req, rows, func(c app.ChargeFact) any { return c.Position() })
	out := make([]lateUsageJSON, len(rows))
	for i, c := range rows {
		out[i] = lateUsageJSON{chargeFactJSON: chargeFactOf(c), OccurrencePeriod: c.OccurrencePeriod, BilledPeriod: c.Charge.Period}
	}
	httpx.WriteJSON(w, http.StatusOK, struct {
		TenantID string          `json:"tenantId"`
		Period   string          `json:"period"`
		Charges  []lateUsageJSON `json:"charges"`
		Next     *string         `json:"next,omitempty"`
	}{tenantID, billed, out, next})
}

// MaxTenantReconciliations is how many tenant reconciliations one query
// instance runs at once; each tenant runs one at a time. A reconciliation
// reads a whole period from four services (minutes at a million facts), so
// a tenant's viewer must not be able to start them faster than they end.
const MaxTenantReconciliations = 4

// reconcileSlots are the tenant reconciliations running.
type reconcileSlots struct {
	mu      sync.Mutex
	running map[string]bool
	max     int
}

func newReconcileSlots(max int) *reconcileSlots {
	return &reconcileSlots{running: map[string]bool{}, max: max}
}

// take reserves the tenant's slot: false when the tenant runs one already or
// every slot is taken.
func (s *reconcileSlots) take(tenant string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.running[tenant] || len(s.running) >= s.max {
		return false
	}
	s.running[tenant] = true
	return true
}

func (s *reconcileSlots) give(tenant string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.running, tenant)
}

// busy answers 429 reconciliation_busy, to be asked again in a few seconds.
func busy(w http.ResponseWriter) {
	w.Header().Set("Retry-After", "5")
	httpx.WriteProblem(w, httpx.NewProblem(http.StatusTooManyRequests, "reconciliation_busy",
		"a reconciliation of this tenant, or too many of others, is running; ask again when it is done"))
}

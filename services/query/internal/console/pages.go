package console

import (
	"cmp"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"time"
	"unicode/utf8"

	"github.com/go-chi/chi/v5"
	"github.com/google/uuid"
	"github.com/shopspring/decimal"

	"github.com/usagebilling/billing/pkg/auth"
	"github.com/usagebilling/billing/pkg/catalog"
	"github.com/usagebilling/billing/pkg/events"
	"github.com/usagebilling/billing/pkg/httpx"
	"github.com/usagebilling/billing/services/query/internal/app"
	"github.com/usagebilling/billing/services/query/internal/domain"
	"github.com/usagebilling/billing/services/query/internal/httpapi"
	"github.com/usagebilling/billing/services/query/internal/operator"
)

// PageSize is how many rows a list page shows.
const PageSize = 50

type recoveryRow struct {
	Service string
	operator.ServiceRecovery
}

// recovery: GET /console, every service's recovery counts.
func (c *Console) recovery(w http.ResponseWriter, r *http.Request) {
	all := c.op.Recovery(r.Context())
	rows := make([]recoveryRow, 0, len(all))
	for name, rec := range all {
		rows = append(rows, recoveryRow{Service: name, ServiceRecovery: rec})
	}
	slices.SortFunc(rows, func(a, b recoveryRow) int { return cmp.Compare(a.Service, b.Service) })
	c.render(w, r, http.StatusOK, "recovery", "Recovery", rows)
}

type quarantineView struct {
	Services []string
	Filter   url.Values // service, reason, tenantId, state as asked
	Items    []operator.QuarantineItem
	First    string // the first page's URL
	Next     string // the next page's URL; empty on the last
}

// quarantine: GET /console/quarantine?service=&reason=&tenantId=&state=&after=
// — the quarantine view, PageSize items at a time.
func (c *Console) quarantine(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	f := operator.QuarantineFilter{Service: q.Get("service"), Reason: q.Get("reason"), TenantID: q.Get("tenantId"),
		IncludeRedriven: q.Get("state") == "all", Limit: PageSize + 1}
	after, err := cursor(q.Get("after"))
	if err != nil {
		c.invalid(w, r, "after must be a page position this view gave")
		return
	}
	f.After = after
	items, err := c.op.Quarantine(r.Context(), f)
	if err != nil {
		c.fail(w, r, "list quarantine", err)
		return
	}
	filter := filterOf(q, "service", "reason", "tenantId", "state")
	v := quarantineView{Services: c.op.Services(), Filter: filter, Items: items, First: "/console/quarantine?" + filter.Encode()}
	if len(items) > PageSize {
		v.Items = items[:PageSize]
		next := filterOf(q, "service", "reason", "tenantId", "state")
		next.Set("after", strconv.FormatInt(v.Items[PageSize-1].Seq, 10))
		v.Next = "/console/quarantine?" + next.Encode()
	}
	c.render(w, r, http.StatusOK, "quarantine", "Quarantine", v)
}

// cursor parses a page position: empty is the start.
func cursor(s string) (int64, error) {
	if s == "" {
		return 0, nil
	}
	n, err := strconv.ParseInt(s, 10, 64)
	if err == nil && n < 0 {
		err = strconv.ErrRange
	}
	return n, err
}

// filterOf copies the named non-empty parameters of q.
func filterOf(q url.Values, names ...string) url.Values {
	out := url.Values{}
	for _, n := range names {
		if v := q.Get(n); v != "" {
			out.Set(n, v)
		}
	}
	return out
}

// submit: POST /console/redrives and /console/dead-letters/release
// (service, eventId, reason): the operator API's command, through the same
// operator.Submit, with a correlation id made for it; then the redrive page.
func (c *Console) submit(action string) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		service, reason := r.PostFormValue("service"), r.PostFormValue("reason")
		eventID, ok := httpx.ParseUUID(r.PostFormValue("eventId"))
		switch {
		case service == "" || reason == "":
			c.invalid(w, r, "A service and a reason are required.")
			return
		case httpx.CheckText("service", service) != nil || httpx.CheckText("reason", reason) != nil ||
			httpx.FreeText("reason", reason) != nil:
			c.invalid(w, r, "The service and the reason must be text: valid UTF-8, no NUL or control character.")
			return
		case !ok:
			c.invalid(w, r, "The event id must be a UUID in its canonical form (not the nil UUID).")
			return
		case utf8.RuneCountInString(reason) > httpapi.MaxReason:
			c.invalid(w, r, "The reason is longer than %d characters.", httpapi.MaxReason)
			return
		}
		claims, _ := auth.FromContext(r.Context())
		if httpx.FreeText("actor", claims.Actor()) != nil {
			c.invalid(w, r, "The signed-in subject holds a control character; it cannot be recorded as the actor.")
			return
		}
		rd, err := c.op.Submit(r.Context(), operator.Request{Service: service, EventID: eventID, Action: action,
			Reason: reason, Actor: claims.Actor(), CorrelationID: "console-" + uuid.NewString()})
		if err != nil {
			c.fail(w, r, "submit "+action, err)
			return
		}
		http.Redirect(w, r, "/console/redrives/"+rd.ID.String(), http.StatusSeeOther)
	}
}

type redriveView struct{ operator.Redrive }

// Pending: no service has answered yet.
func (v redriveView) Pending() bool { return v.State == operator.StateRequested }

// redrive: GET /console/redrives/{redriveId}, the redrive and its audit; the
// page reloads itself each second until the service has answered.
func (c *Console) redrive(w http.ResponseWriter, r *http.Request) {
	id, ok := httpx.ParseUUID(chi.URLParam(r, "redriveId"))
	if !ok {
		c.render(w, r, http.StatusNotFound, "error", "Not found", errorView{Message: "No redrive with that id."})
		return
	}
	rd, err := c.op.Redrive(r.Context(), id)
	if err != nil {
		c.fail(w, r, "read redrive", err)
		return
	}
	c.render(w, r, http.StatusOK, "redrive", "Redrive", redriveView{rd})
}

type deadLettersView struct {
	Services []string
	Service  string
	Items    []operator.DeadLetter
	Next     string
}

// deadLetters: GET /console/dead-letters?service=&afterService=&afterId=.
func (c *Console) deadLetters(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	after := operator.DeadLetterKey{Service: q.Get("afterService")}
	var err error
	if after.ID, err = cursor(q.Get("afterId")); err != nil {
		c.invalid(w, r, "afterId must be a page position this view gave")
		return
	}
	ds, err := c.op.DeadLetters(r.Context(), q.Get("service"), after, PageSize+1)
	if err != nil {
		c.fail(w, r, "list dead letters", err)
		return
	}
	v := deadLettersView{Services: c.op.Services(), Service: q.Get("service"), Items: ds}
	if len(ds) > PageSize {
		v.Items = ds[:PageSize]
		last := v.Items[PageSize-1]
		next := filterOf(q, "service")
		next.Set("afterService", last.Service)
		next.Set("afterId", strconv.FormatInt(last.ID, 10))
		v.Next = "/console/dead-letters?" + next.Encode()
	}
	c.render(w, r, http.StatusOK, "dead-letters", "Dead letters", v)
}

type reconciliationView struct {
	TenantID, Period string
	Report           *domain.Report // nil until asked
}

// reconciliation: GET /console/reconciliation?tenantId=&period= — the form,
// and with a tenant the report of the period (default: this month, UTC).
func (c *Console) reconciliation(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	v := reconciliationView{TenantID: q.Get("tenantId"), Period: q.Get("period")}
	if v.Period == "" {
		v.Period = events.Period(time.Now())
	}
	if v.TenantID == "" {
		c.render(w, r, http.StatusOK, "reconciliation", "Reconciliation", v)
		return
	}
	if _, p := httpx.TenantID(v.TenantID); p != nil {
		c.invalid(w, r, "%s", p.Detail)
		return
	}
	if _, err := events.ParsePeriod(v.Period); err != nil {
		c.invalid(w, r, "The period must be YYYY-MM.")
		return
	}
	httpx.ExtendDeadline(w, r, operator.ReconcileTimeout)
	rep, err := c.op.Reconcile(r.Context(), v.TenantID, v.Period)
	if err != nil {
		c.fail(w, r, "reconcile", err)
		return
	}
	v.Report = &rep
	c.render(w, r, http.StatusOK, "reconciliation", "Reconciliation", v)
}

type tenantsView struct {
	TenantID      string
	Summary       *domain.Summary // nil until asked
	Money         []moneyRow      // by currency
	Subscriptions accountList[subscription]
	CreditGrants  accountList[creditGrant]
	AccountRows   int
}

type moneyRow struct {
	Currency                    string
	Charged, Adjusted, Invoiced decimal.Decimal
}

// money lays a summary's amounts out by currency.
func money(s domain.Summary) []moneyRow {
	var currencies []string
	for _, m := range []map[string]decimal.Decimal{s.Charged, s.Adjusted, s.Invoiced} {
		for cur := range m {
			if !slices.Contains(currencies, cur) {
				currencies = append(currencies, cur)
			}
		}
	}
	slices.Sort(currencies)
	rows := make([]moneyRow, len(currencies))
	for i, cur := range currencies {
		rows[i] = moneyRow{Currency: cur, Charged: s.Charged[cur], Adjusted: s.Adjusted[cur], Invoiced: s.Invoiced[cur]}
	}
	return rows
}

// tenants: GET /console/tenants?tenantId= — a tenant's summary, as GET
// /v1/tenants/{tenantId}/summary answers it, and the first AccountRows of
// its subscriptions (the billing service's) and of its credit grants (the
// invoice service's), one call to each. A table that cannot be read says
// why in its place; the rest of the page is shown.
func (c *Console) tenants(w http.ResponseWriter, r *http.Request) {
	v := tenantsView{TenantID: r.URL.Query().Get("tenantId"), AccountRows: AccountRows}
	if v.TenantID == "" {
		c.render(w, r, http.StatusOK, "tenants", "Tenants", v)
		return
	}
	if _, p := httpx.TenantID(v.TenantID); p != nil {
		c.invalid(w, r, "%s", p.Detail)
		return
	}
	s, err := c.reader.Summary(r.Context(), v.TenantID)
	if err != nil {
		c.fail(w, r, "read summary", err)
		return
	}
	v.Summary, v.Money = &s, money(s)
	v.Subscriptions = c.subscriptionsOf(r.Context(), v.TenantID)
	v.CreditGrants = c.creditGrantsOf(r.Context(), v.TenantID)
	c.render(w, r, http.StatusOK, "tenants", "Tenants", v)
}

type catalogView struct {
	Meters []app.CatalogMeter
	Next   string
}

// catalog: GET /console/catalog — the meter catalog query holds, a page of
// PageSize by code (after: the last code of the page before).
func (c *Console) catalogPage(w http.ResponseWriter, r *http.Request) {
	after := r.URL.Query().Get("after")
	if after != "" && !catalog.ValidKey(after) {
		c.invalid(w, r, "after must be a meter code this page linked to.")
		return
	}
	ms, err := c.reader.Meters(r.Context(), after, PageSize+1)
	if err != nil {
		c.fail(w, r, "list meters", err)
		return
	}
	v := catalogView{Meters: ms}
	if len(ms) > PageSize {
		v.Meters = ms[:PageSize]
		v.Next = "/console/catalog?" + url.Values{"after": {ms[PageSize-1].Code}}.Encode()
	}
	c.render(w, r, http.StatusOK, "catalog", "Meter catalog", v)
}

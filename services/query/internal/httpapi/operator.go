package httpapi

import (
	"errors"
	"log/slog"
	"net/http"
	"slices"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/go-chi/chi/v5"
	"github.com/google/uuid"

	"github.com/usagebilling/billing/pkg/auth"
	"github.com/usagebilling/billing/pkg/events"
	"github.com/usagebilling/billing/pkg/httpx"
	"github.com/usagebilling/billing/pkg/ops"
	"github.com/usagebilling/billing/pkg/page"
	"github.com/usagebilling/billing/services/query/internal/operator"
)

// Operator serves the operator API (pkg/api/queryapi/openapi.yaml). auth.Middleware
// admits only operator credentials to /v1/operator/.
type Operator struct {
	op    *operator.Operator
	log   *slog.Logger
	slots *reconcileSlots // the tenants' reconciliations running
}

// NewOperator returns the operator API over op.
func NewOperator(op *operator.Operator, log *slog.Logger) *Operator {
	return &Operator{op: op, log: log, slots: newReconcileSlots(MaxTenantReconciliations)}
}

// Routes mounts the operator endpoints on r.
func (a *Operator) Routes(r chi.Router) {
	r.Method(http.MethodGet, "/v1/operator/recovery", auth.Allow(a.recovery, auth.RoleOperator))
	r.Method(http.MethodGet, "/v1/operator/quarantine", auth.Allow(a.quarantine, auth.RoleOperator))
	r.Method(http.MethodPost, "/v1/operator/redrives", auth.Allow(a.submit(events.ActionRedrive), auth.RoleOperator))
	r.Method(http.MethodGet, "/v1/operator/redrives/{redriveId}", auth.Allow(a.redrive, auth.RoleOperator))
	r.Method(http.MethodGet, "/v1/operator/dead-letters", auth.Allow(a.deadLetters, auth.RoleOperator))
	r.Method(http.MethodPost, "/v1/operator/dead-letters/release", auth.Allow(a.submit(events.ActionRedriveDeadLetter), auth.RoleOperator))
	r.Method(http.MethodGet, "/v1/operator/reconciliation", auth.Allow(a.reconciliation, auth.RoleOperator))
	// The same reconciliation, of the tenant's own period, for the tenant.
	r.Method(http.MethodGet, "/v1/tenants/{tenantId}/periods/{period}/reconciliation",
		auth.Allow(a.tenantReconciliation, auth.RoleViewer, auth.RoleBillingAdmin))
}

type recoveryJSON struct {
	ops.Recovery
	Available bool   `json:"available"`
	Error     string `json:"error,omitempty"`
}

// recovery: GET /v1/operator/recovery. A service that cannot be reached is
// listed with available false and the error, not left out.
func (a *Operator) recovery(w http.ResponseWriter, r *http.Request) {
	out := map[string]recoveryJSON{}
	for name, rec := range a.op.Recovery(r.Context()) {
		j := recoveryJSON{Recovery: rec.Recovery, Available: rec.Err == nil}
		if rec.Err != nil {
			j.Error = rec.Err.Error()
		}
		out[name] = j
	}
	httpx.WriteJSON(w, http.StatusOK, map[string]any{"services": out})
}

type quarantineItemJSON struct {
	Service       string    `json:"service"`
	EventID       *string   `json:"eventId"` // null for bytes that are no envelope
	EventType     string    `json:"eventType"`
	TenantID      string    `json:"tenantId"`
	Reason        string    `json:"reason"`
	QuarantinedAt time.Time `json:"quarantinedAt"`
	State         string    `json:"state"` // quarantined | redriven
	Topic         string    `json:"topic"`
	Partition     int32     `json:"partition"`
	Offset        int64     `json:"offset"`
}

// quarantineCursor is the position a page of the quarantine view ends at.
type quarantineCursor struct {
	Seq int64 `json:"s"`
}

// listJSON is a page of a list: next is absent on the last page.
type listJSON[T any] struct {
	Items []T     `json:"items"`
	Next  *string `json:"next,omitempty"`
}

// quarantine: GET /v1/operator/quarantine?service=&reason=&tenantId=
// [&state=all][&limit=][&cursor=]: the messages still quarantined (all:
// also those redriven), oldest first, a page at a time (pkg/page). A
// service that is none of auth.Services is 400 unknown_service, a tenant id
// that is none (httpx.TenantID) 400 invalid_tenant_id.
func (a *Operator) quarantine(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	f := operator.QuarantineFilter{Service: q.Get("service"), Reason: q.Get("reason"), TenantID: q.Get("tenantId")}
	if f.Service != "" && !slices.Contains(auth.Services, f.Service) {
		httpx.WriteProblem(w, httpx.Problemf(http.StatusBadRequest, "unknown_service",
			"service must be one of %s", strings.Join(auth.Services, ", ")))
		return
	}
	if f.TenantID != "" {
		if _, p := httpx.TenantID(f.TenantID); p != nil {
			httpx.WriteProblem(w, p)
			return
		}
	}
	switch q.Get("state") {
	case "", "quarantined":
	case "all":
		f.IncludeRedriven = true
	default:
		httpx.WriteProblem(w, httpx.NewProblem(http.StatusBadRequest, "invalid_state", "state must be quarantined or all"))
		return
	}
	req, p := page.Parse(q)
	if p != nil {
		httpx.WriteProblem(w, p)
		return
	}
	var after quarantineCursor
	if p := req.After(&after); p != nil {
		httpx.WriteProblem(w, p)
		return
	}
	f.After, f.Limit = after.Seq, req.Fetch()
	items, err := a.op.Quarantine(r.Context(), f)
	if err != nil {
		a.fail(w, r, "list quarantine", err)
		return
	}
	items, next := page.Cut(req, items, func(it operator.QuarantineItem) any { return quarantineCursor{Seq: it.Seq} })
	out := make([]quarantineItemJSON, len(items))
	for i, it := range items {
		out[i] = quarantineItemJSON{Service: it.Service, EventType: it.EventType, TenantID: it.TenantID,
			Reason: it.Reason, QuarantinedAt: it.QuarantinedAt, State: "quarantined", Topic: it.Topic,
			Partition: it.Partition, Offset: it.Offset}
		if it.EventID != "" {
			out[i].EventID = &it.EventID
		}
		if it.Redriven {
			out[i].State = "redriven"
		}
	}
	httpx.WriteJSON(w, http.StatusOK, listJSON[quarantineItemJSON]{Items: out, Next: next})
}

type submitJSON struct {
	Service string `json:"service"`
	EventID string `json:"eventId"`
	Reason  string `json:"reason"`
}

// MaxReason is the longest reason an operator may give, in characters.
const MaxReason = 500

// submit: POST /v1/operator/redrives and POST
// /v1/operator/dead-letters/release, {service, eventId, reason} with
// X-Correlation-Id -> 202 {redriveId, state}, or 404 event_not_found when
// the service holds no such event (operator.Submit). Each call is a new
// audited request; asking twice is safe (the second finds a duplicate).
func (a *Operator) submit(action string) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		corr, p := httpx.CorrelationID(r, true)
		if p != nil {
			httpx.WriteProblem(w, p)
			return
		}
		var body submitJSON
		if p := httpx.DecodeJSON(w, r, &body, 0); p != nil {
			httpx.WriteProblem(w, p)
			return
		}
		if p := httpx.Required("service", body.Service, "eventId", body.EventID, "reason", body.Reason); p != nil {
			httpx.WriteProblem(w, p)
			return
		}
		eventID, p := httpx.EventID("eventId", body.EventID)
		if p != nil {
			httpx.WriteProblem(w, p)
			return
		}
		if utf8.RuneCountInString(body.Reason) > MaxReason {
			httpx.WriteProblem(w, httpx.Problemf(http.StatusBadRequest, "invalid_field", "reason is longer than %d characters", MaxReason))
			return
		}
		if p := httpx.FreeText("reason", body.Reason); p != nil {
			httpx.WriteProblem(w, p)
			return
		}
		actor, p := auth.ActorOf(r)
		if p != nil {
			httpx.WriteProblem(w, p)
			return
		}
		rd, err := a.op.Submit(r.Context(), operator.Request{Service: body.Service, EventID: eventID, Action: action,
			Reason: body.Reason, Actor: actor, CorrelationID: corr})
		if err != nil {
			a.fail(w, r, "submit "+action, err)
			return
		}
		w.Header().Set("Location", "/v1/operator/redrives/"+rd.ID.String())
		httpx.WriteJSON(w, http.StatusAccepted, map[string]string{"redriveId": rd.ID.String(), "state": rd.State})
	}
}

type auditJSON struct {
	State         string    `json:"state"`
	Actor         string    `json:"actor"`
	CorrelationID string    `json:"correlationId"`
	Reason        string    `json:"reason"`
	Outcome       *string   `json:"outcome,omitempty"`
	At            time.Time `json:"at"`
}

// redrive: GET /v1/operator/redrives/{redriveId}.
func (a *Operator) redrive(w http.ResponseWriter, r *http.Request) {
	id, ok := httpx.ParseUUID(chi.URLParam(r, "redriveId"))
	if !ok {
		httpx.WriteProblem(w, httpx.NewProblem(http.StatusNotFound, "redrive_not_found", "no redrive with that id"))
		return
	}
	rd, err := a.op.Redrive(r.Context(), id)
	if err != nil {
		a.fail(w, r, "read redrive", err)
		return
	}
	audit := make([]auditJSON, len(rd.Audit))
	for i, e := range rd.Audit {
		audit[i] = auditJSON{State: e.State, Actor: e.Actor, CorrelationID: e.CorrelationID, Reason: e.Reason, At: e.At}
		if e.Outcome != "" {
			audit[i].Outcome = &e.Outcome
		}
	}
	var outcome *string
	if rd.Outcome != "" {
		outcome = &rd.Outcome
	}
	httpx.WriteJSON(w, http.StatusOK, map[string]any{
		"redriveId": rd.ID, "service": rd.Service, "eventId": rd.EventID, "action": rd.Action,
		"state": rd.State, "outcome": outcome, "audit": audit,
	})
}

type deadLetterJSON struct {
	Service   string    `json:"service"`
	EventID   string    `json:"eventId"`
	EventType string    `json:"eventType"`
	Topic     string    `json:"topic"`
	Attempts  int       `json:"attempts"`
	LastError string    `json:"lastError"`
	CreatedAt time.Time `json:"createdAt"`
	DeadAt    time.Time `json:"deadAt"`
}

// deadLetterCursor is the position a page of dead letters ends at: a
// service and the id in its outbox.
type deadLetterCursor struct {
	Service string `json:"s"`
	ID      int64  `json:"id"`
}

// deadLetters: GET /v1/operator/dead-letters[?service=][&limit=][&cursor=]:
// the outbox dead letters of one service, or of every service by service
// name, a page at a time (pkg/page).
func (a *Operator) deadLetters(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	service := q.Get("service")
	req, p := page.Parse(q)
	if p != nil {
		httpx.WriteProblem(w, p)
		return
	}
	var after deadLetterCursor
	if p := req.After(&after); p != nil {
		httpx.WriteProblem(w, p)
		return
	}
	if service != "" && !req.First() && after.Service != service {
		// A cursor of another service's list, or of every service's.
		httpx.WriteProblem(w, httpx.NewProblem(http.StatusBadRequest, "invalid_cursor",
			"cursor must be a next value this list returned"))
		return
	}
	ds, err := a.op.DeadLetters(r.Context(), service, operator.DeadLetterKey(after), int(req.Fetch()))
	if err != nil {
		a.fail(w, r, "list dead letters", err)
		return
	}
	ds, next := page.Cut(req, ds, func(d operator.DeadLetter) any { return deadLetterCursor(d.Key()) })
	out := make([]deadLetterJSON, len(ds))
	for i, d := range ds {
		out[i] = deadLetterJSON{Service: d.Service, EventID: d.EventID, EventType: d.EventType, Topic: d.Topic,
			Attempts: d.Attempts, LastError: d.LastError, CreatedAt: d.CreatedAt, DeadAt: d.DeadAt}
	}
	httpx.WriteJSON(w, http.StatusOK, listJSON[deadLetterJSON]{Items: out, Next: next})
}

type mismatchJSON struct {
	Kind          string    `json:"kind"`
	OriginEventID uuid.UUID `json:"originEventId"`
	Detail        string    `json:"detail"`
}

// reconciliation: GET /v1/operator/reconciliation?tenantId=&period=.
func (a *Operator) reconciliation(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	a.reconcile(w, r, q.Get("tenantId"), q.Get("period"))
}

// tenantReconciliation: GET /v1/tenants/{tenantId}/periods/{period}/reconciliation,
// the operator's reconciliation of the tenant's own period (its token
// reaches no other tenant's path: auth.Allow), one at a time per tenant and
// at most MaxTenantReconciliations at once (429 reconciliation_busy).
func (a *Operator) tenantReconciliation(w http.ResponseWriter, r *http.Request) {
	tenant := chi.URLParam(r, "tenantId")
	if !a.slots.take(tenant) {
		busy(w)
		return
	}
	defer a.slots.give(tenant)
	a.reconcile(w, r, tenant, chi.URLParam(r, "period"))
}

// reconcile answers the reconciliation of one tenant's period:
// {tenantId, period, counts, mismatches, mismatchCount}.
func (a *Operator) reconcile(w http.ResponseWriter, r *http.Request, tenant, period string) {
	httpx.ExtendDeadline(w, r, operator.ReconcileTimeout)
	tenantID, p := httpx.TenantID(tenant)
	if p != nil {
		httpx.WriteProblem(w, p)
		return
	}
	if _, err := events.ParsePeriod(period); err != nil {
		httpx.WriteProblem(w, httpx.NewProblem(http.StatusBadRequest, "invalid_period", "period must be YYYY-MM"))
		return
	}
	rep, err := a.op.Reconcile(r.Context(), tenantID, period)
	if err != nil {
		a.fail(w, r, "reconcile", err)
		return
	}
	ms := make([]mismatchJSON, len(rep.Mismatches))
	for i, m := range rep.Mismatches {
		ms[i] = mismatchJSON{Kind: m.Kind, OriginEventID: m.OriginEventID, Detail: m.Detail}
	}
	httpx.WriteJSON(w, http.StatusOK, map[string]any{
		"tenantId": rep.TenantID, "period": rep.Period,
		"counts": map[string]int{"usageFacts": rep.Counts.UsageFacts, "charges": rep.Counts.Charges,
			"invoiceLines": rep.Counts.InvoiceLines, "queryUsage": rep.Counts.QueryUsage},
		"mismatches": ms, "mismatchCount": rep.MismatchCount,
	})
}

// fail maps an operator error to a problem.
func (a *Operator) fail(w http.ResponseWriter, r *http.Request, what string, err error) {
	var p *httpx.Problem
	switch {
	case errors.Is(err, operator.ErrUnknownService):
		p = httpx.NewProblem(http.StatusBadRequest, "unknown_service", err.Error())
	case errors.Is(err, operator.ErrNotFound):
		p = httpx.NewProblem(http.StatusNotFound, "redrive_not_found", "no redrive with that id")
	case errors.Is(err, operator.ErrEventNotFound):
		p = httpx.NewProblem(http.StatusNotFound, "event_not_found", err.Error())
	case errors.Is(err, operator.ErrUpstream):
		p = httpx.NewProblem(http.StatusBadGateway, "service_unavailable", err.Error())
	default:
		p = httpx.StoreError(err)
	}
	if p.Status >= 500 {
		a.log.ErrorContext(r.Context(), what, "err", err, "status", p.Status)
	}
	httpx.WriteProblem(w, p)
}

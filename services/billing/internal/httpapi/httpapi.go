// Package httpapi is billing's HTTP API: it checks requests, calls the app
// commands and maps domain errors to problem responses.
package httpapi

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"regexp"
	"strconv"
	"time"

	"github.com/go-chi/chi/v5"

	"github.com/usagebilling/billing/pkg/api/billingapi"
	"github.com/usagebilling/billing/pkg/auth"
	"github.com/usagebilling/billing/pkg/httpx"
	"github.com/usagebilling/billing/pkg/idempotency"
	"github.com/usagebilling/billing/pkg/page"
	"github.com/usagebilling/billing/services/billing/internal/app"
	"github.com/usagebilling/billing/services/billing/internal/domain"
)

// maxBody bounds request bodies.
const maxBody = 16 << 10

// API serves billing's HTTP endpoints.
type API struct {
	svc *app.Service
	log *slog.Logger
}

// New returns the API over svc.
func New(svc *app.Service, log *slog.Logger) *API {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &API{svc: svc, log: log}
}

// Routes mounts the endpoints on r.
func (a *API) Routes(r chi.Router) {
	r.Method(http.MethodPost, "/v1/tenants/{tenantId}/adjustments", auth.Allow(a.postAdjustment, auth.RoleBillingAdmin))
	r.Method(http.MethodPost, "/v1/tenants/{tenantId}/periods/{period}/close", auth.Allow(a.closePeriod, auth.RoleBillingAdmin))
	r.Method(http.MethodGet, "/v1/tenants/{tenantId}/charges", auth.Allow(a.listCharges, auth.RoleViewer, auth.RoleBillingAdmin))
	r.Method(http.MethodGet, "/v1/tenants/{tenantId}/periods/{period}", auth.Allow(a.getPeriod, auth.RoleViewer, auth.RoleBillingAdmin))
	r.Method(http.MethodGet, "/openapi.json", billingapi.Handler())
}

// getPeriod: GET /v1/tenants/{tenantId}/periods/{period} -> {period, status,
// closesAt, estimate: {currency: amount}}, the running cost of the period so
// far (app.Estimate). A malformed period is 400 invalid_period; a period
// with nothing in it is open with an empty estimate.
func (a *API) getPeriod(w http.ResponseWriter, r *http.Request) {
	tenant, p := httpx.TenantID(chi.URLParam(r, "tenantId"))
	if p != nil {
		httpx.WriteProblem(w, p)
		return
	}
	period, err := domain.ParsePeriod(chi.URLParam(r, "period"))
	if err != nil {
		a.writeError(w, r, err)
		return
	}
	est, err := a.svc.PeriodEstimate(r.Context(), tenant, period)
	if err != nil {
		a.writeError(w, r, err)
		return
	}
	httpx.WriteJSON(w, http.StatusOK, est)
}

// adjustmentBody is the request of POST .../adjustments. Amount is kept raw
// so a JSON number is refused as invalid_amount, like any other non-decimal
// text, rather than as a generic type error.
type adjustmentBody struct {
	CorrectionOf string          `json:"correctionOf"`
	Amount       json.RawMessage `json:"amount"`
	Currency     string          `json:"currency"`
	Reason       string          `json:"reason"`
}

func (a *API) postAdjustment(w http.ResponseWriter, r *http.Request) {
	tenant, p := httpx.TenantID(chi.URLParam(r, "tenantId"))
	if p != nil {
		httpx.WriteProblem(w, p)
		return
	}
	key, p := idempotencyKey(r)
	if p != nil {
		httpx.WriteProblem(w, p)
		return
	}
	body, p := readBody(w, r)
	if p != nil {
		httpx.WriteProblem(w, p)
		return
	}
	var in adjustmentBody
	if p := httpx.DecodeJSON(w, requestWith(r, body), &in, maxBody); p != nil {
		httpx.WriteProblem(w, p)
		return
	}
	amount, p := decimalText("amount", in.Amount)
	if p != nil {
		httpx.WriteProblem(w, p)
		return
	}
	adj, err := domain.ParseAdjustment(domain.AdjustmentRequest{
		CorrectionOf: in.CorrectionOf, Amount: amount, Currency: in.Currency, Reason: in.Reason,
	})
	if err != nil {
		a.writeError(w, r, err)
		return
	}
	actor, p := actorOf(r)
	if p != nil {
		httpx.WriteProblem(w, p)
		return
	}
	reply, err := a.svc.PostAdjustment(r.Context(), app.Request{
		TenantID: tenant, IdempotencyKey: key, CorrelationID: correlationID(r), Actor: actor,
		RequestHash: idempotency.RequestHash(r.Method, r.URL.Path, body),
	}, adj)
	if err != nil {
		a.writeError(w, r, err)
		return
	}
	writeReply(w, reply)
}

func (a *API) closePeriod(w http.ResponseWriter, r *http.Request) {
	tenant, p := httpx.TenantID(chi.URLParam(r, "tenantId"))
	if p != nil {
		httpx.WriteProblem(w, p)
		return
	}
	key, p := idempotencyKey(r)
	if p != nil {
		httpx.WriteProblem(w, p)
		return
	}
	period, err := domain.ClosablePeriod(chi.URLParam(r, "period"), a.svcNow())
	if err != nil {
		a.writeError(w, r, err)
		return
	}
	actor, p := actorOf(r)
	if p != nil {
		httpx.WriteProblem(w, p)
		return
	}
	// The close takes no body; the request is its method and path.
	reply, err := a.svc.ClosePeriod(r.Context(), app.Request{
		TenantID: tenant, IdempotencyKey: key, CorrelationID: correlationID(r), Actor: actor,
		RequestHash: idempotency.RequestHash(r.Method, r.URL.Path, nil),
	}, period)
	if err != nil {
		a.writeError(w, r, err)
		return
	}
	writeReply(w, reply)
}

// listCharges: GET /v1/tenants/{t}/charges?period=[&meterCode=[&priceVersion=]][&limit=&cursor=]:
// one page of a period's charges in line order (meter, currency, price
// version, charge id). With meterCode and priceVersion, the charges behind
// one invoice line.
func (a *API) listCharges(w http.ResponseWriter, r *http.Request) {
	tenant, p := httpx.TenantID(chi.URLParam(r, "tenantId"))
	if p != nil {
		httpx.WriteProblem(w, p)
		return
	}
	q := r.URL.Query()
	period, err := domain.ParsePeriod(q.Get("period"))
	if err != nil {
		a.writeError(w, r, err)
		return
	}
	f := app.ChargeFilter{Period: period, MeterCode: q.Get("meterCode")}
	if v := q.Get("priceVersion"); v != "" {
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil || n < 1 {
			httpx.WriteProblem(w, httpx.NewProblem(http.StatusBadRequest, "invalid_price_version", "priceVersion must be a positive integer"))
			return
		}
		if f.MeterCode == "" {
			httpx.WriteProblem(w, httpx.NewProblem(http.StatusBadRequest, "invalid_price_version", "priceVersion needs meterCode"))
			return
		}
		f.PriceVersion = n
	}
	req, p := page.Parse(q)
	if p != nil {
		httpx.WriteProblem(w, p)
		return
	}
	var after app.ChargePosition
	if p := req.After(&after); p != nil {
		httpx.WriteProblem(w, p)
		return
	}
	if !req.First() && f.MeterCode != "" && after.MeterCode != f.MeterCode {
		// A cursor of another meter's list (or of the whole period's) would
		// silently start over: refuse it like any cursor not of this list.
		httpx.WriteProblem(w, httpx.NewProblem(http.StatusBadRequest, "invalid_cursor", "cursor must be a next value this list returned"))
		return
	}
	charges, err := a.svc.ListCharges(r.Context(), tenant, f, after, req.Fetch())
	if err != nil {
		a.writeError(w, r, err)
		return
	}
	charges, next := page.Cut(req, charges, func(c app.Charge) any { return c.Position() })
	if charges == nil {
		charges = []app.Charge{}
	}
	httpx.WriteJSON(w, http.StatusOK, struct {
		Charges []app.Charge `json:"charges"`
		Next    *string      `json:"next,omitempty"`
	}{charges, next})
}

func (a *API) svcNow() time.Time { return a.svc.Now() }

// writeError maps an error to its problem: domain rules to 4xx, a reused
// idempotency key to 422, the rest to 503 (database unreachable) or 500.
func (a *API) writeError(w http.ResponseWriter, r *http.Request, err error) {
	var de *domain.Error
	switch {
	case errors.As(err, &de):
		status := http.StatusBadRequest
		switch de.Kind {
		case domain.NotFound:
			status = http.StatusNotFound
		case domain.Unprocessable:
			status = http.StatusUnprocessableEntity
		}
		httpx.WriteProblem(w, httpx.NewProblem(status, de.Code, de.Detail))
	case errors.Is(err, app.ErrKeyReused):
		httpx.WriteProblem(w, httpx.NewProblem(http.StatusUnprocessableEntity, "idempotency_key_reused",
			"this Idempotency-Key was used with a different request"))
	case errors.Is(err, context.Canceled) && r.Context().Err() != nil:
		// The client went away; nothing useful to answer.
	default:
		p := httpx.StoreError(err)
		a.log.ErrorContext(r.Context(), "request failed", "method", r.Method, "path", r.URL.Path,
			"status", p.Status, "err", err)
		httpx.WriteProblem(w, p)
	}
}

func writeReply(w http.ResponseWriter, reply app.Reply) {
	w.Header().Set("Content-Type", "application/json")
	if reply.Replayed {
		w.Header().Set("Idempotent-Replayed", "true")
	}
	w.WriteHeader(reply.Status)
	_, _ = w.Write(reply.Body)
}

func idempotencyKey(r *http.Request) (string, *httpx.Problem) {
	key := r.Header.Get("Idempotency-Key")
	if key == "" {
		return "", httpx.NewProblem(http.StatusBadRequest, "missing_idempotency_key", "send an Idempotency-Key header")
	}
	if !idempotency.ValidKey(key) {
		return "", httpx.NewProblem(http.StatusBadRequest, "invalid_idempotency_key",
			"Idempotency-Key must be 1-255 printable ASCII characters")
	}
	return key, nil
}

// readBody reads the whole body (bounded) so it can be both decoded and
// hashed for the idempotency check.
func readBody(w http.ResponseWriter, r *http.Request) ([]byte, *httpx.Problem) {
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, maxBody))
	if err != nil {
		var maxErr *http.MaxBytesError
		if errors.As(err, &maxErr) {
			return nil, httpx.Problemf(http.StatusRequestEntityTooLarge, "body_too_large", "body exceeds %d bytes", maxBody)
		}
		return nil, httpx.NewProblem(http.StatusBadRequest, "malformed_json", "could not read the body")
	}
	return body, nil
}

func requestWith(r *http.Request, body []byte) *http.Request {
	r2 := r.Clone(r.Context())
	r2.Body = io.NopCloser(bytes.NewReader(body))
	return r2
}

// decimalText returns the text of a decimal sent as a JSON string; absent or
// null gives "" (reported as missing by the domain), anything else is
// invalid_<field>.
func decimalText(field string, raw json.RawMessage) (string, *httpx.Problem) {
	if len(raw) == 0 || string(raw) == "null" {
		return "", nil
	}
	var s string
	if raw[0] != '"' || json.Unmarshal(raw, &s) != nil {
		return "", httpx.Problemf(http.StatusBadRequest, "invalid_"+field,
			"%s must be a decimal string such as \"-12.50\", not a JSON %s", field, jsonKind(raw))
	}
	return s, nil
}

func jsonKind(raw json.RawMessage) string {
	switch raw[0] {
	case '{':
		return "object"
	case '[':
		return "array"
	case 't', 'f':
		return "boolean"
	default:
		return "number"
	}
}

// actorOf is who sent a money-changing command: the subject of the verified
// bearer token (auth.Middleware put its claims in the request's context).
// Without one nothing is written: 401.
func actorOf(r *http.Request) (string, *httpx.Problem) {
	c, ok := auth.FromContext(r.Context())
	if !ok || c.Actor() == "" {
		return "", httpx.NewProblem(http.StatusUnauthorized, "unauthorized", "a money-changing command needs a bearer token naming its actor")
	}
	return c.Actor(), nil
}

var printable = regexp.MustCompile(`^[!-~]{1,128}$`)

// correlationID is the request's X-Correlation-Id when it is fit to travel
// in an envelope; otherwise none.
func correlationID(r *http.Request) string {
	if c := r.Header.Get("X-Correlation-Id"); printable.MatchString(c) {
		return c
	}
	return ""
}

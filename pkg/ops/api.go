package ops

import (
	"context"
	"log/slog"
	"net/http"
	"strconv"

	"github.com/go-chi/chi/v5"
	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/usagebilling/billing/pkg/auth"
	"github.com/usagebilling/billing/pkg/events"
	"github.com/usagebilling/billing/pkg/httpx"
	"github.com/usagebilling/billing/pkg/inbox"
	"github.com/usagebilling/billing/pkg/outbox"
	"github.com/usagebilling/billing/pkg/page"
	"github.com/usagebilling/billing/pkg/recon"
)

// API serves a service's internal, read-only operator endpoints:
//
//	GET /internal/v1/recovery
//	GET /internal/v1/quarantine?reason=&tenantId=&eventId=&state=all&after=&limit=
//	GET /internal/v1/dead-letters?after=&limit=
//	GET /internal/v1/reconciliation/{set}?tenantId=&period=2026-11&after=&limit=
//
// They are meant for Query (a service token) and operators; auth.Middleware
// guards every /internal/ path.
type API struct {
	pool *pgxpool.Pool
	sets recon.Sets
	log  *slog.Logger
}

// NewAPI returns the internal API on pool serving the service's
// reconciliation sets (nil when it holds no money flow).
func NewAPI(pool *pgxpool.Pool, sets recon.Sets, log *slog.Logger) *API {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &API{pool: pool, sets: sets, log: log}
}

// Routes mounts the endpoints on r.
func (a *API) Routes(r chi.Router) {
	r.Method(http.MethodGet, "/internal/v1/recovery", auth.Allow(a.recovery, auth.RoleService))
	r.Method(http.MethodGet, "/internal/v1/quarantine", auth.Allow(a.quarantine, auth.RoleService))
	r.Method(http.MethodGet, "/internal/v1/dead-letters", auth.Allow(a.deadLetters, auth.RoleService))
	r.Method(http.MethodGet, "/internal/v1/reconciliation/{set}", auth.Allow(a.reconciliation, auth.RoleService))
}

// ReadRecovery reads the recovery counts of the database pool reaches.
func ReadRecovery(ctx context.Context, pool *pgxpool.Pool) (Recovery, error) {
	ob, err := outbox.ReadStats(ctx, pool)
	if err != nil {
		return Recovery{}, err
	}
	in, err := inbox.ReadStats(ctx, pool)
	if err != nil {
		return Recovery{}, err
	}
	return Recovery{
		OutboxPending: ob.Pending, OutboxOldestAgeSeconds: ob.OldestPendingAge.Seconds(), DeadLetters: ob.DeadLetters,
		Deferred: in.Deferred, DeferredOldestAgeSeconds: in.OldestDeferredAge.Seconds(), Quarantined: in.Quarantined,
	}, nil
}

func (a *API) recovery(w http.ResponseWriter, r *http.Request) {
	rec, err := ReadRecovery(r.Context(), a.pool)
	if err != nil {
		a.storeError(w, r, "read recovery", err)
		return
	}
	httpx.WriteJSON(w, http.StatusOK, rec)
}

// ListQuarantine reads a page of the quarantined messages of the database
// pool reaches.
func ListQuarantine(ctx context.Context, pool *pgxpool.Pool, f inbox.QuarantineFilter) (QuarantinePage, error) {
	f.Limit = limitOf(f.Limit)
	ms, err := inbox.ListQuarantine(ctx, pool, inbox.QuarantineFilter{
		Reason: f.Reason, TenantID: f.TenantID, EventID: f.EventID, All: f.All, After: f.After, Limit: f.Limit + 1,
	})
	if err != nil {
		return QuarantinePage{}, err
	}
	page := QuarantinePage{Items: make([]QuarantineItem, 0, len(ms))}
	for i, m := range ms {
		if i == f.Limit {
			next := strconv.FormatInt(ms[i-1].ID, 10)
			page.Next = &next
			break
		}
		item := QuarantineItem{
			ID: m.ID, EventType: m.EventType, TenantID: m.TenantID, Reason: m.Reason, Detail: m.Detail, RawSHA256: m.RawSHA256,
			Topic: m.Topic, Partition: m.Partition, Offset: m.Offset, FirstSeen: m.FirstSeen, LastSeen: m.LastSeen,
			Attempts: m.Attempts, State: m.State, RedrivenAt: m.RedrivenAt,
		}
		if m.EventID != uuid.Nil {
			item.EventID = m.EventID.String()
		}
		page.Items = append(page.Items, item)
	}
	return page, nil
}

func (a *API) quarantine(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	f := inbox.QuarantineFilter{Reason: q.Get("reason"), TenantID: q.Get("tenantId"), All: q.Get("state") == "all"}
	switch q.Get("state") {
	case "", "quarantined", "all":
	default:
		httpx.WriteProblem(w, httpx.NewProblem(http.StatusBadRequest, "invalid_state", "state must be quarantined or all"))
		return
	}
	var p *httpx.Problem
	if f.TenantID != "" {
		if _, p = httpx.TenantID(f.TenantID); p != nil {
			httpx.WriteProblem(w, p)
			return
		}
	}
	if f.After, p = cursor(q.Get("after")); p != nil {
		httpx.WriteProblem(w, p)
		return
	}
	if f.Limit, p = page.Limit(q.Get("limit"), 0, MaxLimit); p != nil {
		httpx.WriteProblem(w, p)
		return
	}
	if s := q.Get("eventId"); s != "" {
		id, p := httpx.EventID("eventId", s)
		if p != nil {
			httpx.WriteProblem(w, p)
			return
		}
		f.EventID = id
	}
	page, err := ListQuarantine(r.Context(), a.pool, f)
	if err != nil {
		a.storeError(w, r, "list quarantine", err)
		return
	}
	httpx.WriteJSON(w, http.StatusOK, page)
}

// ListDeadLetters reads a page of the outbox dead letters of the database
// pool reaches.
func ListDeadLetters(ctx context.Context, pool *pgxpool.Pool, after int64, limit int) (DeadLetterPage, error) {
	limit = limitOf(limit)
	ds, err := outbox.ListDeadLetters(ctx, pool, after, limit+1)
	if err != nil {
		return DeadLetterPage{}, err
	}
	page := DeadLetterPage{Items: make([]DeadLetter, 0, len(ds))}
	for i, d := range ds {
		if i == limit {
			next := strconv.FormatInt(ds[i-1].ID, 10)
			page.Next = &next
			break
		}
		page.Items = append(page.Items, DeadLetter{
			ID: d.ID, EventID: d.EventID.String(), EventType: d.EventType, Topic: d.Topic, Attempts: d.Attempts,
			LastError: d.LastError, CreatedAt: d.CreatedAt, DeadAt: d.DeadAt,
		})
	}
	return page, nil
}

func (a *API) deadLetters(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	after, p := cursor(q.Get("after"))
	if p != nil {
		httpx.WriteProblem(w, p)
		return
	}
	limit, p := page.Limit(q.Get("limit"), 0, MaxLimit)
	if p != nil {
		httpx.WriteProblem(w, p)
		return
	}
	page, err := ListDeadLetters(r.Context(), a.pool, after, limit)
	if err != nil {
		a.storeError(w, r, "list dead letters", err)
		return
	}
	httpx.WriteJSON(w, http.StatusOK, page)
}

// ReconciliationPage is a page of a reconciliation set; Next is the
// position to ask after for the next page (absent on the last).
type ReconciliationPage struct {
	Items []recon.Row `json:"items"`
	Next  *string     `json:"next,omitempty"`
}

func (a *API) reconciliation(w http.ResponseWriter, r *http.Request) {
	read, ok := a.sets[chi.URLParam(r, "set")]
	if !ok {
		httpx.WriteProblem(w, httpx.NewProblem(http.StatusNotFound, "unknown_set", "no reconciliation set of that name here"))
		return
	}
	q := r.URL.Query()
	tenantID, p := httpx.TenantID(q.Get("tenantId"))
	if p != nil {
		httpx.WriteProblem(w, p)
		return
	}
	period := q.Get("period")
	if _, err := events.ParsePeriod(period); err != nil {
		httpx.WriteProblem(w, httpx.NewProblem(http.StatusBadRequest, "invalid_period", "period must be YYYY-MM"))
		return
	}
	limit, p := page.Limit(q.Get("limit"), recon.PageSize, recon.MaxPageSize)
	if p != nil {
		httpx.WriteProblem(w, p)
		return
	}
	var after recon.Position
	if s := q.Get("after"); s != "" {
		if err := recon.DecodePosition(s, &after); err != nil {
			httpx.WriteProblem(w, httpx.NewProblem(http.StatusBadRequest, "invalid_cursor", "after must be a next value this API returned"))
			return
		}
	}
	rows, err := read(r.Context(), recon.Query{TenantID: tenantID, Period: period, After: after, Limit: limit + 1})
	if err != nil {
		a.storeError(w, r, "read reconciliation set", err)
		return
	}
	page := ReconciliationPage{Items: rows}
	if len(rows) > limit {
		next := recon.EncodePosition(rows[limit-1].Pos())
		page.Items, page.Next = rows[:limit], &next
	}
	if page.Items == nil {
		page.Items = []recon.Row{}
	}
	httpx.WriteJSON(w, http.StatusOK, page)
}

func (a *API) storeError(w http.ResponseWriter, r *http.Request, what string, err error) {
	p := httpx.StoreError(err)
	a.log.ErrorContext(r.Context(), what, "err", err, "status", p.Status)
	httpx.WriteProblem(w, p)
}

// MaxLimit is the largest page the list endpoints return.
const MaxLimit = 500

func limitOf(n int) int {
	switch {
	case n <= 0:
		return 100
	case n > MaxLimit:
		return MaxLimit
	}
	return n
}

func cursor(s string) (int64, *httpx.Problem) {
	if s == "" {
		return 0, nil
	}
	n, err := strconv.ParseInt(s, 10, 64)
	if err != nil || n < 0 {
		return 0, httpx.NewProblem(http.StatusBadRequest, "invalid_cursor", "the cursor is not one this API returned")
	}
	return n, nil
}

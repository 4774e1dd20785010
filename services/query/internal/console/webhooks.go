package console

import (
	"encoding/json"
	"net/http"
	"slices"
	"strconv"
	"time"
	"unicode/utf8"

	"github.com/go-chi/chi/v5"
	"github.com/google/uuid"

	"github.com/usagebilling/billing/pkg/auth"
	"github.com/usagebilling/billing/pkg/httpx"
	"github.com/usagebilling/billing/services/query/internal/httpapi"
	"github.com/usagebilling/billing/services/query/internal/operator"
)

// intentStatuses are the statuses the intents can be listed by.
var intentStatuses = []string{"pending", "leased", "accepted", "failed", "expired"}

// intent is what the page shows of a webhook intent, as the invoice
// service lists it.
type intent struct {
	IntentID        string     `json:"intentId"`
	URL             string     `json:"url"`
	TenantID        string     `json:"tenantId"`
	EventType       string     `json:"eventType"`
	Status          string     `json:"status"`
	Attempts        int32      `json:"attempts"`
	CreatedAt       time.Time  `json:"createdAt"`
	ExpiresAt       time.Time  `json:"expiresAt"`
	LastAttemptAt   *time.Time `json:"lastAttemptAt"`
	LastStatusCode  *int32     `json:"lastStatusCode"`
	LastError       string     `json:"lastError"`
	OperatorRetries int32      `json:"operatorRetries"`
}

// Retryable: an operator may retry a failed or expired intent.
func (i intent) Retryable() bool { return i.Status == "failed" || i.Status == "expired" }

type webhooksView struct {
	Statuses []string
	Status   string
	TenantID string
	Stats    operator.IntentStats
	Items    []intent
	Next     string
}

// webhooks: GET /console/webhooks?status=&tenantId=&cursor= — the intents'
// counts by status and a page of intents, oldest first.
func (c *Console) webhooks(w http.ResponseWriter, r *http.Request) {
	in := r.URL.Query()
	v := webhooksView{Statuses: intentStatuses, Status: in.Get("status"), TenantID: in.Get("tenantId")}
	q := filterOf(in, "status", "tenantId", "cursor")
	if v.Status != "" && !slices.Contains(intentStatuses, v.Status) {
		c.invalid(w, r, "The status must be one of pending, leased, accepted, failed, expired.")
		return
	}
	if _, p := httpx.TenantID(v.TenantID); v.TenantID != "" && p != nil {
		c.invalid(w, r, "%s", p.Detail)
		return
	}
	q.Set("limit", strconv.Itoa(PageSize))
	stats, err := c.hooks.Stats(r.Context())
	if err != nil {
		c.fail(w, r, "read webhook intent stats", err)
		return
	}
	page, err := c.hooks.List(r.Context(), q)
	if err != nil {
		c.fail(w, r, "list webhook intents", err)
		return
	}
	v.Stats, v.Items = stats, make([]intent, len(page.Items))
	for i, raw := range page.Items {
		if err := json.Unmarshal(raw, &v.Items[i]); err != nil {
			c.fail(w, r, "decode a webhook intent", err)
			return
		}
	}
	if page.Next != nil {
		next := filterOf(in, "status", "tenantId")
		next.Set("cursor", *page.Next)
		v.Next = "/console/webhooks?" + next.Encode()
	}
	c.render(w, r, http.StatusOK, "webhooks", "Webhook intents", v)
}

// retryIntent: POST /console/webhooks/{intentId}/retry (reason) — the
// operator API's audited retry, through operator.Webhooks.Retry with a
// correlation id made for it; then the retry's audit on the redrive page.
func (c *Console) retryIntent(w http.ResponseWriter, r *http.Request) {
	id, ok := httpx.ParseUUID(chi.URLParam(r, "intentId"))
	reason := r.PostFormValue("reason")
	switch {
	case !ok:
		c.invalid(w, r, "The intent id must be a UUID.")
		return
	case reason == "":
		c.invalid(w, r, "A reason is required.")
		return
	case httpx.CheckText("reason", reason) != nil || httpx.FreeText("reason", reason) != nil:
		c.invalid(w, r, "The reason must be text: valid UTF-8, no NUL or control character.")
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
	res, err := c.hooks.Retry(r.Context(), operator.RetryRequest{IntentID: id, Reason: reason, Actor: claims.Actor(),
		CorrelationID: "console-" + uuid.NewString()})
	if err != nil {
		c.fail(w, r, "retry webhook intent", err)
		return
	}
	http.Redirect(w, r, "/console/redrives/"+res.RedriveID.String(), http.StatusSeeOther)
}

package operator

import (
	"context"
	"encoding/json"
	"net/http"
	"net/url"
	"strconv"

	"github.com/usagebilling/billing/pkg/auth"
)

// The services that own a tenant's subscriptions and its credit grants.
const (
	SubscriptionService = "billing"
	CreditService       = "invoice"
)

// Accounts is the operator's read-only view of a tenant's subscriptions
// (the billing service's) and credit grants (the invoice service's),
// through their GET /internal/v1/tenants/{tenantId}/subscriptions and
// .../credit-grants, which answer as the tenant's own routes do.
type Accounts struct {
	billing serviceClient
	invoice serviceClient
}

// NewAccounts returns the view, calling the services at their urls
// (SERVICE_URLS) with service tokens signed by keys.
func NewAccounts(urls map[string]string, keys auth.Keys) *Accounts {
	return &Accounts{
		billing: newServiceClient(SubscriptionService, urls[SubscriptionService], keys),
		invoice: newServiceClient(CreditService, urls[CreditService], keys),
	}
}

// SubscriptionPage is the first page of a tenant's subscriptions, in
// start order, as the billing service lists them (passed on as they are);
// Next is set when there are more.
type SubscriptionPage struct {
	Subscriptions []json.RawMessage `json:"subscriptions"`
	Next          *string           `json:"next,omitempty"`
}

// CreditGrantPage is the first page of a tenant's credit grants, in
// creation order, as the invoice service lists them (passed on as they
// are); Next is set when there are more.
type CreditGrantPage struct {
	Grants []json.RawMessage `json:"grants"`
	Next   *string           `json:"next,omitempty"`
}

// Subscriptions reads the first limit of the tenant's subscriptions.
func (a *Accounts) Subscriptions(ctx context.Context, tenantID string, limit int) (SubscriptionPage, error) {
	var out SubscriptionPage
	return out, a.billing.call(ctx, http.MethodGet, "/internal/v1/tenants/"+url.PathEscape(tenantID)+"/subscriptions",
		url.Values{"limit": {strconv.Itoa(limit)}}, nil, &out)
}

// CreditGrants reads the first limit of the tenant's credit grants, each
// with its balance and status now.
func (a *Accounts) CreditGrants(ctx context.Context, tenantID string, limit int) (CreditGrantPage, error) {
	var out CreditGrantPage
	return out, a.invoice.call(ctx, http.MethodGet, "/internal/v1/tenants/"+url.PathEscape(tenantID)+"/credit-grants",
		url.Values{"limit": {strconv.Itoa(limit)}}, nil, &out)
}

package console

import (
	"context"
	"encoding/json"
	"errors"
	"time"

	"github.com/usagebilling/billing/services/query/internal/operator"
)

// AccountRows is the most subscriptions, and the most credit grants, the
// tenants page shows: the first page of each, one call each per view.
const AccountRows = 100

// subscription is what the tenants page shows of a subscription, as the
// billing service lists it.
type subscription struct {
	SubscriptionID string     `json:"subscriptionId"`
	PlanCode       string     `json:"planCode"`
	StartsAt       time.Time  `json:"startsAt"`
	EndsAt         *time.Time `json:"endsAt"`
}

// creditGrant is what the tenants page shows of a credit grant, as the
// invoice service lists it.
type creditGrant struct {
	GrantID     string     `json:"grantId"`
	Currency    string     `json:"currency"`
	Amount      string     `json:"amount"` // a decimal string, shown as the service wrote it
	Balance     string     `json:"balance"`
	Status      string     `json:"status"`
	Priority    int        `json:"priority"`
	EffectiveAt time.Time  `json:"effectiveAt"`
	ExpiresAt   *time.Time `json:"expiresAt"`
}

// accountList is one of the page's two tables: its rows, whether the
// owning service holds more than it shows, or why it could not be read.
type accountList[T any] struct {
	Rows  []T
	More  bool
	Error string // empty: read
}

// subscriptionsOf reads the tenant's first AccountRows subscriptions from
// the billing service.
func (c *Console) subscriptionsOf(ctx context.Context, tenantID string) accountList[subscription] {
	page, err := c.accounts.Subscriptions(ctx, tenantID, AccountRows)
	if err != nil {
		return accountList[subscription]{Error: c.unread(ctx, "subscriptions", err)}
	}
	return decodeRows[subscription](ctx, c, "subscriptions", page.Subscriptions, page.Next != nil)
}

// creditGrantsOf reads the tenant's first AccountRows credit grants from
// the invoice service.
func (c *Console) creditGrantsOf(ctx context.Context, tenantID string) accountList[creditGrant] {
	page, err := c.accounts.CreditGrants(ctx, tenantID, AccountRows)
	if err != nil {
		return accountList[creditGrant]{Error: c.unread(ctx, "credit grants", err)}
	}
	return decodeRows[creditGrant](ctx, c, "credit grants", page.Grants, page.Next != nil)
}

func decodeRows[T any](ctx context.Context, c *Console, what string, raw []json.RawMessage, more bool) accountList[T] {
	l := accountList[T]{Rows: make([]T, len(raw)), More: more}
	for i, r := range raw {
		if err := json.Unmarshal(r, &l.Rows[i]); err != nil {
			return accountList[T]{Error: c.unread(ctx, what, err)}
		}
	}
	return l
}

// unread is the note the page shows in place of a table it could not read:
// the owning service's answer when it refused or could not be reached,
// else a pointer to the log.
func (c *Console) unread(ctx context.Context, what string, err error) string {
	if up, ok := operator.IsUpstreamProblem(err); ok {
		return up.Error()
	}
	if errors.Is(err, operator.ErrUpstream) {
		return err.Error()
	}
	c.log.ErrorContext(ctx, "console: read "+what, "err", err)
	return "Internal error: reading the " + what + " failed (see the service log)."
}

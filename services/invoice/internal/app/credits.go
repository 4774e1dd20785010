package app

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/shopspring/decimal"

	"github.com/usagebilling/billing/pkg/envelope"
	"github.com/usagebilling/billing/pkg/rule"
	"github.com/usagebilling/billing/services/invoice/internal/db"
	"github.com/usagebilling/billing/services/invoice/internal/domain"
)

// CreditGrant is a tenant's credit grant as the API shows it: what it gave,
// what it has left (Balance) and its Status at the moment it was read.
type CreditGrant struct {
	GrantID     uuid.UUID       `json:"grantId"`
	TenantID    string          `json:"tenantId"`
	Currency    string          `json:"currency"`
	Amount      decimal.Decimal `json:"amount"`
	Balance     decimal.Decimal `json:"balance"`
	Status      string          `json:"status"`
	EffectiveAt time.Time       `json:"effectiveAt"`
	ExpiresAt   *time.Time      `json:"expiresAt,omitempty"`
	Priority    int             `json:"priority"`
	Reason      string          `json:"reason"`
	Actor       string          `json:"actor"`
	CreatedAt   time.Time       `json:"createdAt"`
}

func grantOf(r db.CreditGrant, now time.Time) CreditGrant {
	g := CreditGrant{GrantID: r.GrantID, TenantID: r.TenantID, Currency: r.Currency, Amount: r.Amount, Balance: r.Balance,
		EffectiveAt: r.EffectiveAt.UTC(), Priority: int(r.Priority), Reason: r.Reason, Actor: r.Actor, CreatedAt: r.CreatedAt.UTC()}
	if r.ExpiresAt != nil {
		t := r.ExpiresAt.UTC()
		g.ExpiresAt = &t
	}
	g.Status = domain.GrantStatus(g.Balance, g.EffectiveAt, g.ExpiresAt, now)
	return g
}

// GrantCredit is the command to give a tenant a credit grant, recorded
// with its actor (the token's subject).
type GrantCredit struct {
	TenantID, Actor string
	Grant           domain.Grant
}

// ErrNoActor refuses a command without its actor.
var ErrNoActor = errors.New("a command needs its actor")

// InTx runs fn in a transaction of invoice's database, committed when fn
// returns nil: the transaction a command runs in, with its Idempotency-Key
// claimed and its reply saved by the caller (httpapi).
func (a *App) InTx(ctx context.Context, fn func(pgx.Tx) error) error {
	return pgx.BeginFunc(ctx, a.pool, fn)
}

// GrantCredit records a credit grant in tx, refused past Config.MaxGrants
// grants of the tenant with something left that have not expired (422
// limit_exceeded). On an error the caller must not commit.
func (a *App) GrantCredit(ctx context.Context, tx pgx.Tx, cmd GrantCredit) (CreditGrant, error) {
	if cmd.Actor == "" {
		return CreditGrant{}, ErrNoActor
	}
	q := db.New(tx)
	if err := q.LockTenantGrants(ctx, cmd.TenantID); err != nil {
		return CreditGrant{}, fmt.Errorf("lock the grants of %s: %w", cmd.TenantID, err)
	}
	now := a.now().UTC().Truncate(time.Microsecond)
	live, err := q.CountLiveGrants(ctx, db.CountLiveGrantsParams{TenantID: cmd.TenantID, At: now})
	if err != nil {
		return CreditGrant{}, fmt.Errorf("count the grants of %s: %w", cmd.TenantID, err)
	}
	if live >= int64(a.maxGrants) {
		return CreditGrant{}, rule.Errorf(rule.Unprocessable, "limit_exceeded",
			"tenant %s has %d credit grants with a balance that have not expired, the most it may have (INVOICE_MAX_CREDIT_GRANTS)",
			cmd.TenantID, a.maxGrants)
	}
	id, err := uuid.NewV7()
	if err != nil {
		return CreditGrant{}, fmt.Errorf("new grant id: %w", err)
	}
	g := cmd.Grant
	row := db.InsertCreditGrantParams{GrantID: id, TenantID: cmd.TenantID, Currency: g.Currency, Amount: g.Amount,
		EffectiveAt: g.EffectiveAt, ExpiresAt: g.ExpiresAt, Priority: int32(g.Priority), Reason: g.Reason,
		Actor: cmd.Actor, CreatedAt: now}
	if err := q.InsertCreditGrant(ctx, row); err != nil {
		return CreditGrant{}, fmt.Errorf("insert credit grant: %w", err)
	}
	return grantOf(db.CreditGrant{GrantID: id, TenantID: cmd.TenantID, Currency: g.Currency, Amount: g.Amount,
		Balance: g.Amount, EffectiveAt: g.EffectiveAt, ExpiresAt: g.ExpiresAt, Priority: row.Priority, Reason: g.Reason,
		Actor: cmd.Actor, CreatedAt: now}, now), nil
}

// GrantPosition is a grant's place in its tenant's list.
type GrantPosition struct {
	CreatedAt time.Time `json:"c"`
	GrantID   uuid.UUID `json:"i"`
}

// CreditGrants reads a page of a tenant's grants in creation order after
// a position (zero: from the first), with their balances and statuses now.
func (a *App) CreditGrants(ctx context.Context, tenantID string, after GrantPosition, limit int32) ([]CreditGrant, error) {
	rows, err := db.New(a.pool).ListCreditGrants(ctx, db.ListCreditGrantsParams{
		TenantID: tenantID, AfterCreatedAt: after.CreatedAt, AfterID: after.GrantID, MaxRows: limit,
	})
	if err != nil {
		return nil, fmt.Errorf("list credit grants of %s: %w", tenantID, err)
	}
	now := a.now()
	out := make([]CreditGrant, len(rows))
	for i, r := range rows {
		out[i] = grantOf(r, now)
	}
	return out, nil
}

// maxDrawable bounds the grants one invoice's draw reads: at most
// Config.MaxGrants are live at once.
const maxDrawable = 1000

// drawCredits draws what an issued invoice of total takes from the
// tenant's grants of its currency in effect at the period's end (locked, in
// draw order), writes one credit_applied line per grant drawn and returns
// what they came to (zero or negative). It runs in the close's transaction:
// a redelivered close is a duplicate and draws nothing again, and a crash
// before the commit undoes the draw with the rest.
func drawCredits(ctx context.Context, q *db.Queries, e *envelope.Envelope, invoiceID uuid.UUID, currency string,
	periodEnd time.Time, total decimal.Decimal) (decimal.Decimal, error) {
	if !total.IsPositive() {
		return decimal.Zero, nil
	}
	rows, err := q.DrawableGrants(ctx, db.DrawableGrantsParams{TenantID: e.TenantID, Currency: currency, At: periodEnd, MaxRows: maxDrawable})
	if err != nil {
		return decimal.Decimal{}, fmt.Errorf("read the credit grants of %s: %w", e.TenantID, err)
	}
	balances := make([]domain.Balance, len(rows))
	for i, r := range rows {
		balances[i] = domain.Balance{GrantID: r.GrantID, Balance: r.Balance}
	}
	draws := domain.DrawCredits(total, balances)
	if len(draws) == 0 {
		return decimal.Zero, nil
	}
	take := db.DrawGrantsParams{}
	lines := db.InsertCreditLinesParams{InvoiceID: invoiceID, OriginEventID: e.EventID}
	applied := decimal.Zero
	for _, d := range draws {
		take.GrantIds, take.Amounts = append(take.GrantIds, d.GrantID), append(take.Amounts, d.Amount)
		lines.GrantIds, lines.Amounts = append(lines.GrantIds, d.GrantID), append(lines.Amounts, d.Amount.Neg())
		applied = applied.Sub(d.Amount)
	}
	if err := q.DrawGrants(ctx, take); err != nil {
		return decimal.Decimal{}, fmt.Errorf("draw credit grants for %s: %w", invoiceID, err)
	}
	if err := q.InsertCreditLines(ctx, lines); err != nil {
		return decimal.Decimal{}, fmt.Errorf("write credit lines of %s: %w", invoiceID, err)
	}
	return applied, nil
}

package app

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/shopspring/decimal"

	"github.com/usagebilling/billing/pkg/catalog"
	"github.com/usagebilling/billing/pkg/pricing"
	"github.com/usagebilling/billing/pkg/rule"
	"github.com/usagebilling/billing/services/billing/internal/db"
	"github.com/usagebilling/billing/services/billing/internal/domain"
)

// Estimate is the running cost of a tenant's period so far: per currency,
// each of its (meter, price version, price dimensions) lines priced by that
// version's pricing over the line's quantity by its meter's aggregation
// (what the invoice line will say; unpriced lines cost nothing), plus the
// adjustments the close will count and the fixed-fee and true-up lines of
// the subscriptions as they stand (the whole period, prorated). Exact: the
// invoice rounds its total once, at issue.
type Estimate struct {
	Period string `json:"period"`
	// Status is open (not ended), grace (ended in the tenant's zone, not
	// closed yet: its usage is still rated into it), closing or closed.
	Status string `json:"status"`
	// ClosesAt is when the period closes by itself (its end in the tenant's
	// zone plus its grace period, decision 0014) while it is open or in
	// grace; null once its close has begun.
	ClosesAt *time.Time                 `json:"closesAt"`
	Estimate map[string]decimal.Decimal `json:"estimate"`
	// CloseRequestedAt is when a close was requested that waits for usage
	// (decision 0014): the period reads closing, its usage is still rated
	// into it, and WaitingFor says what the close waits for.
	CloseRequestedAt *time.Time `json:"closeRequestedAt,omitempty"`
	WaitingFor       string     `json:"waitingFor,omitempty"`
}

// MaxPeriodLines is how many lines (meter, currency, price version and
// price dimensions) a period read prices: a period with more is refused
// 422 too_many_lines, so the read's work and memory do not grow with the
// tenant's price versions and dimensions.
var MaxPeriodLines = 10000

// CodeTooManyLines: a period has more than MaxPeriodLines lines.
const CodeTooManyLines = "too_many_lines"

// PeriodEstimate reads the period's status, lines and adjustments, in one
// snapshot, and prices the lines. The lines are summed from their parts
// (partLines: a few rows a line, whatever the period's charges number);
// more than MaxPeriodLines lines are refused.
func (a *App) PeriodEstimate(ctx context.Context, tenantID, period string) (Estimate, error) {
	out := Estimate{Period: period, Estimate: map[string]decimal.Decimal{}}
	tx, err := a.pool.Begin(ctx)
	if err != nil {
		return Estimate{}, fmt.Errorf("begin: %w", err)
	}
	defer func() { _ = tx.Rollback(context.WithoutCancel(ctx)) }()
	if _, err := tx.Exec(ctx, "SET TRANSACTION ISOLATION LEVEL REPEATABLE READ READ ONLY"); err != nil {
		return Estimate{}, fmt.Errorf("snapshot: %w", err)
	}
	q := db.New(tx)
	stored, err := q.PeriodStatus(ctx, db.PeriodStatusParams{TenantID: tenantID, Period: period})
	if err != nil {
		return Estimate{}, fmt.Errorf("read period status: %w", err)
	}
	cals, err := calendars(ctx, tx, tenantID)
	if err != nil {
		return Estimate{}, err
	}
	cal := cals[tenantID]
	out.Status = cal.Status(period, stored, a.now())
	if out.Status == domain.StatusOpen || out.Status == domain.StatusGrace {
		at := cal.ClosesAt(period)
		out.ClosesAt = &at
	}
	if stored == domain.StatusOpen {
		req, err := q.CloseRequest(ctx, db.CloseRequestParams{TenantID: tenantID, Period: period})
		switch {
		case errors.Is(err, pgx.ErrNoRows):
		case err != nil:
			return Estimate{}, fmt.Errorf("read close request: %w", err)
		default:
			at := req.CloseRequestedAt.UTC()
			out.Status, out.ClosesAt, out.CloseRequestedAt = domain.StatusClosing, nil, &at
			_, why, err := a.usageCaughtUp(ctx, tx, tenantID, cal.End(period), at)
			if err != nil {
				return Estimate{}, err
			}
			if why == "" {
				why = "the close scheduler's next pass"
			}
			out.WaitingFor = why
		}
	}
	lines, err := partLines(ctx, q, tenantID, period, MaxPeriodLines)
	if errors.Is(err, errTooManyLines) {
		return Estimate{}, &rule.Error{Kind: rule.Unprocessable, Code: CodeTooManyLines,
			Detail: fmt.Sprintf("period %s has more than %d lines (meter, currency, price version and dimensions) "+
				"for one read; billing's charges list reads them page by page", period, MaxPeriodLines)}
	}
	if err != nil {
		return Estimate{}, err
	}
	for _, l := range lines {
		amount, err := LineAmount(l)
		if err != nil {
			return Estimate{}, err
		}
		out.Estimate[l.Currency] = out.Estimate[l.Currency].Add(amount)
	}
	adjs, err := q.PeriodAdjustments(ctx, db.PeriodAdjustmentsParams{TenantID: tenantID, Period: period})
	if err != nil {
		return Estimate{}, fmt.Errorf("read period adjustments: %w", err)
	}
	for _, adj := range adjs {
		out.Estimate[adj.Currency] = out.Estimate[adj.Currency].Add(adj.Amount)
	}
	fees, err := periodFees(ctx, q, tenantID, period, cal, lines)
	if err != nil {
		return Estimate{}, err
	}
	for cur, ls := range fees {
		for _, l := range ls {
			out.Estimate[cur] = out.Estimate[cur].Add(l.Amount)
		}
	}
	return out, nil
}

// LineAmount is a line's amount: nothing on an unpriced line; under unit
// pricing of a sum or count meter the sum of its charges' own amounts (each
// exact, so the same as the version's pricing over the line's quantity);
// else the version's pricing over the line's quantity, its meter's
// aggregation over its charges.
func LineAmount(l Line) (decimal.Decimal, error) {
	if l.Unpriced {
		return decimal.Zero, nil
	}
	if l.Model == pricing.Unit && catalog.PricedPerCharge(l.Aggregation) {
		return l.Amount, nil
	}
	p, err := linePricing(l)
	if err != nil {
		return decimal.Decimal{}, err
	}
	return p.Amount(l.Quantity), nil
}

// linePricing is the pricing of a priced line's version.
func linePricing(l Line) (pricing.Pricing, error) {
	p, err := evidencePricing(l.Model, l.UnitPrice, l.Tiers, l.PackageSize, l.PackagePrice)
	if err != nil {
		return pricing.Pricing{}, err
	}
	if err := p.Validate(); err != nil {
		return pricing.Pricing{}, fmt.Errorf("pricing of %s %s v%d: %w", l.MeterCode, l.Currency, l.PriceVersion, err)
	}
	return p, nil
}

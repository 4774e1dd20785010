package app

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/shopspring/decimal"

	"github.com/usagebilling/billing/pkg/pricing"
	"github.com/usagebilling/billing/services/billing/internal/db"
	"github.com/usagebilling/billing/services/billing/internal/domain"
)

// Estimate is the running cost of a tenant's period so far: per currency,
// each of its (meter, price version) lines priced by that version's pricing
// over the quantity it rated in the period (what the invoice line will
// say), plus the adjustments the close will count. Exact: the invoice rounds
// its total once, at issue.
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

// PeriodEstimate reads the period's status, lines and adjustments, in one
// snapshot, and prices the lines. Bounded by meters x versions x currencies,
// whatever the number of charges.
func (s *Service) PeriodEstimate(ctx context.Context, tenantID, period string) (Estimate, error) {
	out := Estimate{Period: period, Estimate: map[string]decimal.Decimal{}}
	tx, err := s.pool.Begin(ctx)
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
	out.Status = cal.Status(period, stored, s.now())
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
			_, why, err := s.usageCaughtUp(ctx, tx, tenantID, cal.End(period), at)
			if err != nil {
				return Estimate{}, err
			}
			if why == "" {
				why = "the close scheduler's next pass"
			}
			out.WaitingFor = why
		}
	}
	lines, err := q.PeriodLines(ctx, db.PeriodLinesParams{TenantID: tenantID, Period: period})
	if err != nil {
		return Estimate{}, fmt.Errorf("read period lines: %w", err)
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
	for _, a := range adjs {
		out.Estimate[a.Currency] = out.Estimate[a.Currency].Add(a.Amount)
	}
	return out, nil
}

// LineAmount is a line's amount: the sum of its charges' amounts under unit
// pricing (each exact, so the same as quantity x unit price), its version's
// pricing over its quantity under the others.
func LineAmount(l db.PeriodLinesRow) (decimal.Decimal, error) {
	if l.Model == pricing.Unit {
		return l.Amount, nil
	}
	p, err := evidencePricing(l.Model, l.UnitPrice, l.Tiers, l.PackageSize, l.PackagePrice)
	if err != nil {
		return decimal.Decimal{}, err
	}
	if err := p.Validate(); err != nil {
		return decimal.Decimal{}, fmt.Errorf("pricing of %s %s v%d: %w", l.MeterCode, l.Currency, l.PriceVersion, err)
	}
	return p.Amount(l.Quantity), nil
}

// MarshalJSON shows a charge as the charges API does (pkg/api/billingapi/openapi.yaml):
// unitPrice and amount under unit pricing only; under the other models a
// charge has none of its own (its version prices the line as a whole).
func (c Charge) MarshalJSON() ([]byte, error) {
	type plain Charge
	if c.Model == "" || c.Model == pricing.Unit {
		return json.Marshal(plain(c))
	}
	return json.Marshal(struct {
		plain
		UnitPrice *decimal.Decimal `json:"unitPrice,omitempty"`
		Amount    *decimal.Decimal `json:"amount,omitempty"`
	}{plain: plain(c)})
}

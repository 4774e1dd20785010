package app

import (
	"context"
	"fmt"

	"github.com/shopspring/decimal"

	"github.com/usagebilling/billing/pkg/catalog"
	"github.com/usagebilling/billing/pkg/pricing"
	"github.com/usagebilling/billing/services/billing/internal/db"
	"github.com/usagebilling/billing/services/billing/internal/domain"
)

// checkCredit refuses a credit that would take its period's charges below
// zero in its currency (credit_exceeds_charges), before or after the close
// (decision 0010). The caller holds the period's shared lock; this takes the
// credit lock of the period and currency (always after it), so concurrent
// credits are decided one at a time, and then reads the period's lines
// (partLines: summed from their parts, a few rows a line) and adjustments
// in statements of their own, whose snapshots see every credit committed
// before the lock was granted. It runs in the HTTP request that
// posts the adjustment, never in an inbox handler. Rating never waits for a credit:
// a charge rated meanwhile can only leave more to credit, since the charges
// are counted at their floor (chargedFloor). A debit is not checked.
func (a *App) checkCredit(ctx context.Context, q *db.Queries, tenantID, period string, adj domain.Adjustment) error {
	if !domain.CreditNeedsCheck(adj.Amount) {
		return nil
	}
	if err := q.LockPeriodCredits(ctx, db.LockPeriodCreditsParams{TenantID: tenantID, Period: period, Currency: adj.Currency}); err != nil {
		return fmt.Errorf("lock credits of %s %s: %w", period, adj.Currency, err)
	}
	lines, err := partLines(ctx, q, tenantID, period, -1)
	if err != nil {
		return fmt.Errorf("read lines of %s: %w", period, err)
	}
	charged, err := chargedFloor(lines, adj.Currency)
	if err != nil {
		return err
	}
	adjusted, err := q.PeriodAdjusted(ctx, db.PeriodAdjustedParams{TenantID: tenantID, Period: period, Currency: adj.Currency})
	if err != nil {
		return fmt.Errorf("read adjustments of %s %s: %w", period, adj.Currency, err)
	}
	return domain.CheckCredit(adj.Amount, adj.Currency, domain.Balance{Charged: charged, Adjusted: adjusted})
}

// quantum is the smallest quantity step: quantities have at most
// pricing.MaxScale decimal places.
var quantum = decimal.New(1, -pricing.MaxScale)

// chargedFloor is the least the period's charges of currency can ever come
// to: each line priced by its version over its quantity (what its invoice
// line will say, LineAmount), at the lowest that pricing gives for that
// quantity or more. A line's quantity only grows under sum, count, max and
// unique_count; under latest it can fall to any quantity, so such a line's
// floor is nothing (no pricing charges less than for no quantity). Unit, graduated and
// package amounts never fall as a line's quantity grows, so that is the
// line's amount today; a volume line falls when its quantity passes into a
// cheaper tier (101 units at 0.50 are less than 100 at 1.00), so its floor
// is the least of today's amount and the amount just past each tier bound
// ahead (the bound plus one quantum: a bound is the last quantity of its
// tier). A credit checked against the floor stays covered whatever usage is
// rated into the period after it.
func chargedFloor(lines []Line, currency string) (decimal.Decimal, error) {
	total := decimal.Zero
	for _, l := range lines {
		if l.Currency != currency {
			continue
		}
		if l.Aggregation == catalog.Latest {
			continue // its quantity can fall to nothing
		}
		amount, err := LineAmount(l)
		if err != nil {
			return decimal.Decimal{}, err
		}
		if !l.Unpriced && l.Model == pricing.Volume {
			p, err := linePricing(l)
			if err != nil {
				return decimal.Decimal{}, err
			}
			for _, t := range p.Tiers {
				if t.UpTo != nil && t.UpTo.GreaterThanOrEqual(l.Quantity) {
					amount = decimal.Min(amount, p.Amount(t.UpTo.Add(quantum)))
				}
			}
		}
		total = total.Add(amount)
	}
	return total, nil
}

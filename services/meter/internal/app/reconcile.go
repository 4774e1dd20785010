package app

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"slices"

	"github.com/usagebilling/billing/pkg/events"
	"github.com/usagebilling/billing/pkg/pricing"
	"github.com/usagebilling/billing/pkg/recon"
	"github.com/usagebilling/billing/services/meter/internal/db"
)

// Reconciliation returns the reconciliation set meter serves: the tenant's
// price versions, the pricing each invoice line is held to.
func (a *App) Reconciliation() recon.Sets {
	return recon.Sets{recon.SetPrices: recon.Set(a.reconciliationPrices)}
}

func (a *App) reconciliationPrices(ctx context.Context, q recon.Query) ([]recon.Price, error) {
	rows, err := db.New(a.pool).ReconciliationPrices(ctx, db.ReconciliationPricesParams{TenantID: q.TenantID,
		After: q.After.Key, MaxRows: int32(q.Limit)})
	if err != nil {
		return nil, fmt.Errorf("read prices of %s: %w", q.TenantID, err)
	}
	out := make([]recon.Price, len(rows))
	for i, r := range rows {
		p := pricing.Pricing{Model: r.Model, UnitPrice: ptrDecimal(r.UnitPrice), PackageSize: ptrDecimal(r.PackageSize),
			PackagePrice: ptrDecimal(r.PackagePrice)}
		if len(r.Tiers) > 0 {
			if err := json.Unmarshal(r.Tiers, &p.Tiers); err != nil {
				return nil, fmt.Errorf("decode tiers of price %s: %w", r.PriceID, err)
			}
		}
		out[i] = recon.Price{PriceID: r.PriceID, MeterCode: r.MeterCode, Currency: r.Currency, Version: r.Version, Pricing: p}
	}
	// And the plan versions (any tenant may be subscribed to any), merged
	// into the one price id order.
	plans, err := db.New(a.pool).ReconciliationPlans(ctx, db.ReconciliationPlansParams{After: q.After.Key, MaxRows: int32(q.Limit)})
	if err != nil {
		return nil, fmt.Errorf("read plan versions: %w", err)
	}
	for _, r := range plans {
		var cs []events.PlanCharge
		if err := json.Unmarshal(r.Charges, &cs); err != nil {
			return nil, fmt.Errorf("decode charges of plan %s v%d: %w", r.Code, r.Version, err)
		}
		var fees []events.PlanFee
		if err := json.Unmarshal(r.FixedFees, &fees); err != nil {
			return nil, fmt.Errorf("decode fixed fees of plan %s v%d: %w", r.Code, r.Version, err)
		}
		p := recon.Price{PriceID: r.PlanID, PlanCode: r.Code, Currency: r.Currency, Version: r.Version}
		for _, c := range cs {
			p.Charges = append(p.Charges, recon.PlanCharge{MeterCode: c.MeterCode, Dimensions: c.Dimensions, Pricing: c.Pricing})
		}
		for _, f := range fees {
			p.FixedFees = append(p.FixedFees, recon.PlanFee{Code: f.Code, Amount: f.Amount})
		}
		if r.MinimumSpend.Valid {
			m := r.MinimumSpend.Decimal
			p.MinimumSpend = &m
		}
		out = append(out, p)
	}
	slices.SortFunc(out, func(a, b recon.Price) int { return bytes.Compare(a.PriceID[:], b.PriceID[:]) })
	return out[:min(len(out), q.Limit)], nil
}

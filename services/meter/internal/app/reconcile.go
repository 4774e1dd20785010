package app

import (
	"context"
	"encoding/json"
	"fmt"

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
	return out, nil
}

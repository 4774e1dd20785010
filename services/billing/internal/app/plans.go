package app

import (
	"context"
	"encoding/json"
	"fmt"

	"github.com/jackc/pgx/v5"
	"github.com/shopspring/decimal"

	"github.com/usagebilling/billing/pkg/envelope"
	"github.com/usagebilling/billing/pkg/events"
	"github.com/usagebilling/billing/pkg/inbox"
	"github.com/usagebilling/billing/pkg/pricing"
	"github.com/usagebilling/billing/services/billing/internal/db"
)

// OnPlanPublished replicates a plan version as plan evidence (its fees,
// minimum spend and each charge as an entry of the version's price sheet)
// and records that billing holds the version's place in the plans'
// schedule shard (events.PlanShard), raising what billing knows of that
// shard as a PriceActivated does of a tenant's (decision 0021). A replay
// changes nothing.
func (a *App) OnPlanPublished(ctx context.Context, tx pgx.Tx, d *envelope.Decoded, p events.PlanPublished) (inbox.Outcome, error) {
	e := d.Envelope
	if e.AggregateType != events.AggregatePlan || e.AggregateID != p.Code || e.AggregateVersion != p.Version ||
		e.TenantID != events.CatalogTenant {
		return inbox.Outcome{}, inbox.Permanent(inbox.ReasonAggregateMismatch, fmt.Errorf(
			"PlanPublished of %s v%d is on aggregate %s/%s/%s v%d", p.Code, p.Version,
			e.TenantID, e.AggregateType, e.AggregateID, e.AggregateVersion))
	}
	keys, err := proveSchedule(ctx, tx, events.PlanShard, p.ScheduleSeq, p.KnownThrough, true)
	if err != nil {
		return inbox.Outcome{}, err
	}
	fees, err := json.Marshal(p.FixedFees)
	if err != nil {
		return inbox.Outcome{}, fmt.Errorf("encode fixed fees: %w", err)
	}
	if p.FixedFees == nil {
		fees = []byte("[]")
	}
	q := db.New(tx)
	ev := db.InsertPlanEvidenceParams{
		Code: p.Code, Version: p.Version, Name: p.Name, Currency: p.Currency, FixedFees: fees,
		EffectiveAt: p.EffectiveAt, PlanID: p.PlanID, EventID: e.EventID,
	}
	if p.MinimumSpend != nil {
		ev.MinimumSpend = decimal.NullDecimal{Decimal: *p.MinimumSpend, Valid: true}
	}
	n, err := q.InsertPlanEvidence(ctx, ev)
	if err != nil {
		return inbox.Outcome{}, fmt.Errorf("insert plan evidence: %w", err)
	}
	if n == 0 {
		return inbox.Outcome{Provides: keys}, nil // a replay of the version
	}
	cs := db.InsertPlanChargesParams{Code: p.Code, Version: p.Version}
	for _, c := range p.Charges {
		dims, err := dimensionsJSON(c.Dimensions)
		if err != nil {
			return inbox.Outcome{}, err
		}
		var tiers, size, price string
		if len(c.Tiers) > 0 {
			b, err := json.Marshal(c.Tiers)
			if err != nil {
				return inbox.Outcome{}, fmt.Errorf("encode tiers: %w", err)
			}
			tiers = string(b)
		}
		if c.PackageSize != nil {
			size, price = c.PackageSize.String(), c.PackagePrice.String()
		}
		unit := decimal.Zero
		if c.Model == pricing.Unit && c.UnitPrice != nil {
			unit = *c.UnitPrice
		}
		cs.MeterCodes = append(cs.MeterCodes, c.MeterCode)
		cs.Dimensions = append(cs.Dimensions, string(dims))
		cs.DimensionsKeys = append(cs.DimensionsKeys, dimensionsKey(c.Dimensions))
		cs.DimensionCounts = append(cs.DimensionCounts, int16(len(c.Dimensions)))
		cs.Models = append(cs.Models, c.Model)
		cs.UnitPrices = append(cs.UnitPrices, unit)
		cs.Tiers = append(cs.Tiers, tiers)
		cs.PackageSizes = append(cs.PackageSizes, size)
		cs.PackagePrices = append(cs.PackagePrices, price)
	}
	if len(cs.MeterCodes) > 0 {
		if err := q.InsertPlanCharges(ctx, cs); err != nil {
			return inbox.Outcome{}, fmt.Errorf("insert plan charges: %w", err)
		}
	}
	return inbox.Outcome{Provides: keys}, nil
}

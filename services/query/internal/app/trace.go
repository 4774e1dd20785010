package app

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/usagebilling/billing/pkg/events"
	"github.com/usagebilling/billing/services/query/internal/db"
)

// A tenant traces its invoice from query's projections: each charge of a
// line (ChargeRated) with the usage fact it rates (UsageAccepted, its
// properties and source identity), and the late charges of a period with
// the period their facts occurred in.

// ChargeFact is a projected charge and the fact it rates.
type ChargeFact struct {
	EventID      uuid.UUID // the ChargeRated
	UsageEventID uuid.UUID // the UsageAccepted it rates
	Charge       events.ChargeRated
	// Fact is the projected UsageAccepted; nil while it is not projected
	// (the events of two topics arrive in any order).
	Fact *events.UsageAccepted
	// OccurrencePeriod is, in the late-usage report, the tenant's period
	// the fact occurred in (LateUsage).
	OccurrencePeriod string
}

// TracePosition is where a page of charges ends: the order is (usage event
// id, charge event id).
type TracePosition struct {
	UsageEventID uuid.UUID `json:"u"`
	EventID      uuid.UUID `json:"e"`
}

// Position is the charge's TracePosition.
func (c ChargeFact) Position() TracePosition {
	return TracePosition{UsageEventID: c.UsageEventID, EventID: c.EventID}
}

// Line names an invoice line (invoice's domain.LineID): the charges of a
// meter at a price version, plan and price dimensions, or its unpriced
// charges.
type Line struct {
	MeterCode    string
	Unpriced     bool
	PriceVersion int64
	PlanCode     string
	Dimensions   map[string]string
}

// ChargeQuery selects the charges of a tenant's period: all of them, or a
// meter's, a currency's, one line's.
type ChargeQuery struct {
	TenantID, Period string
	MeterCode        string // "": every meter
	Currency         string // "": every currency
	Line             *Line  // nil: every line (of MeterCode, if given)
}

// ChargeFacts reads a page of the charges q selects, each with its fact, in
// (usage event id, event id) order after the position (nil: the first).
func (a *App) ChargeFacts(ctx context.Context, q ChargeQuery, limit int32, after *TracePosition) ([]ChargeFact, error) {
	p := db.ChargeFactsParams{TenantID: q.TenantID, Period: q.Period, MeterCode: q.MeterCode, Currency: q.Currency,
		Dimensions: []byte("{}"), RowLimit: limit}
	if l := q.Line; l != nil {
		p.ByLine, p.MeterCode, p.Unpriced, p.PriceVersion, p.PlanCode = true, l.MeterCode, l.Unpriced, l.PriceVersion, l.PlanCode
		if len(l.Dimensions) > 0 {
			dims, err := json.Marshal(l.Dimensions)
			if err != nil {
				return nil, fmt.Errorf("charges of a line: %w", err)
			}
			p.Dimensions = dims
		}
	}
	if after != nil {
		p.AfterKey, p.AfterID = after.UsageEventID, after.EventID
	}
	rows, err := db.New(a.pool).ChargeFacts(ctx, p)
	if err != nil {
		return nil, fmt.Errorf("read the charges of %s %s: %w", q.TenantID, q.Period, err)
	}
	out := make([]ChargeFact, len(rows))
	for i, row := range rows {
		if out[i], err = chargeFact(row.EventID, row.UsageEventID, row.Charge, row.Fact); err != nil {
			return nil, err
		}
	}
	return out, nil
}

// LateUsage reads a page of the late charges billed in the tenant's period,
// each with its fact and the period the fact occurred in: the earliest of
// the tenant's closed periods before it that ended after the fact occurred
// (BillingPeriodClosed.periodEnd, in the tenant's zone then), else, for a
// close query has not seen or one from before closes said their end, the
// month of its occurredAt in the tenant's latest zone (UTC if none).
func (a *App) LateUsage(ctx context.Context, tenantID, period string, limit int32, after *TracePosition) ([]ChargeFact, error) {
	p := db.LateChargesParams{TenantID: tenantID, Period: period, RowLimit: limit}
	if after != nil {
		p.AfterKey, p.AfterID = after.UsageEventID, after.EventID
	}
	q := db.New(a.pool)
	rows, err := q.LateCharges(ctx, p)
	if err != nil {
		return nil, fmt.Errorf("read the late charges of %s %s: %w", tenantID, period, err)
	}
	out := make([]ChargeFact, len(rows))
	var zone *time.Location
	for i, row := range rows {
		if out[i], err = chargeFact(row.EventID, row.UsageEventID, row.Charge, row.Fact); err != nil {
			return nil, err
		}
		out[i].OccurrencePeriod = row.OccurrencePeriod
		if row.OccurrencePeriod != "" {
			continue
		}
		if zone == nil {
			if zone, err = a.tenantZone(ctx, q, tenantID); err != nil {
				return nil, err
			}
		}
		out[i].OccurrencePeriod = out[i].Charge.OccurredAt.In(zone).Format("2006-01")
	}
	return out, nil
}

// tenantZone is the zone of the tenant's latest period seen ending, else UTC.
func (a *App) tenantZone(ctx context.Context, q *db.Queries, tenantID string) (*time.Location, error) {
	name, err := q.GetTenantZone(ctx, tenantID)
	switch {
	case errors.Is(err, pgx.ErrNoRows):
		return time.UTC, nil
	case err != nil:
		return nil, fmt.Errorf("read the zone of %s: %w", tenantID, err)
	}
	loc, err := time.LoadLocation(name)
	if err != nil {
		return time.UTC, nil // a zone this build does not know: the month in UTC
	}
	return loc, nil
}

func chargeFact(eventID, usageEventID uuid.UUID, charge, fact []byte) (ChargeFact, error) {
	c := ChargeFact{EventID: eventID, UsageEventID: usageEventID}
	if err := json.Unmarshal(charge, &c.Charge); err != nil {
		return ChargeFact{}, fmt.Errorf("decode projected charge %s: %w", eventID, err)
	}
	if fact != nil {
		c.Fact = new(events.UsageAccepted)
		if err := json.Unmarshal(fact, c.Fact); err != nil {
			return ChargeFact{}, fmt.Errorf("decode projected fact %s: %w", usageEventID, err)
		}
	}
	return c, nil
}

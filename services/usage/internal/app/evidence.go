package app

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5"

	"github.com/usagebilling/billing/pkg/envelope"
	"github.com/usagebilling/billing/pkg/events"
	"github.com/usagebilling/billing/pkg/inbox"
	"github.com/usagebilling/billing/services/usage/internal/db"
	"github.com/usagebilling/billing/services/usage/internal/domain"
)

// IgnoreWatermark absorbs a PriceScheduleWatermark: usage does not rate, so
// it needs no schedule watermark (billing does), but the event shares the
// meter's topic.
func (a *App) IgnoreWatermark(context.Context, pgx.Tx, *envelope.Decoded, events.PriceScheduleWatermark) (inbox.Outcome, error) {
	return inbox.Outcome{}, nil
}

// IgnorePlan absorbs a PlanPublished: a plan prices facts in billing, which
// holds the subscriptions; usage accepts a fact without knowing its
// tenant's plan, but the event shares the meter's topic.
func (a *App) IgnorePlan(context.Context, pgx.Tx, *envelope.Decoded, events.PlanPublished) (inbox.Outcome, error) {
	return inbox.Outcome{}, nil
}

// ApplyPriceActivated records a price version as evidence, inside the
// inbox's transaction. The inbox applies a series' versions in order
// (a version waits for its predecessor), so the evidence has no gaps; a
// redelivered event is a unique violation on its origin event id or
// version, which the inbox counts as a duplicate.
func (a *App) ApplyPriceActivated(ctx context.Context, tx pgx.Tx, d *envelope.Decoded, p events.PriceActivated) (inbox.Outcome, error) {
	e := d.Envelope
	if e.AggregateType != events.AggregatePrice || e.AggregateID != events.PriceSeriesID(p.MeterCode, p.Currency) ||
		e.AggregateVersion != p.Version {
		return inbox.Outcome{}, inbox.Permanent(inbox.ReasonPriceAggregateMismatch, fmt.Errorf(
			"envelope %s/%s@%d does not name price series %s version %d", e.AggregateType, e.AggregateID,
			e.AggregateVersion, events.PriceSeriesID(p.MeterCode, p.Currency), p.Version))
	}
	if err := domain.CheckMeterCode(p.MeterCode); err != nil {
		return inbox.Outcome{}, inbox.Permanent(inbox.ReasonInvalidMeterCode, err)
	}
	err := db.New(tx).InsertPriceEvidence(ctx, db.InsertPriceEvidenceParams{
		TenantID: e.TenantID, MeterCode: p.MeterCode, Currency: p.Currency, Version: p.Version,
		PriceID: p.PriceID, UnitPrice: p.UnitPrice, EffectiveAt: p.EffectiveAt, EventID: e.EventID,
	})
	if err != nil {
		return inbox.Outcome{}, fmt.Errorf("record price evidence: %w", err)
	}
	return inbox.Outcome{}, nil
}

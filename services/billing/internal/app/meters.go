package app

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5"

	"github.com/usagebilling/billing/pkg/envelope"
	"github.com/usagebilling/billing/pkg/events"
	"github.com/usagebilling/billing/pkg/inbox"
	"github.com/usagebilling/billing/services/billing/internal/db"
)

// OnMeterDefined replicates a catalog meter's definition: its aggregation,
// the property a unique_count meter counts and its dimensions. A meter never
// changes once defined (its one event is meter/<code> version 1), so a
// replay changes nothing. Applying it provides the meter's aggregate key
// (MeterKey), which wakes the usage of the meter waiting for it.
func (a *App) OnMeterDefined(ctx context.Context, tx pgx.Tx, d *envelope.Decoded, p events.MeterDefined) (inbox.Outcome, error) {
	e := d.Envelope
	if e.TenantID != events.CatalogTenant || e.AggregateType != events.AggregateMeter || e.AggregateID != p.Code ||
		e.AggregateVersion != 1 {
		return inbox.Outcome{}, inbox.Permanent(inbox.ReasonAggregateMismatch, fmt.Errorf(
			"MeterDefined of %s is on aggregate %s/%s/%s v%d", p.Code, e.TenantID, e.AggregateType, e.AggregateID, e.AggregateVersion))
	}
	dims := p.Dimensions
	if dims == nil {
		dims = []string{}
	}
	if _, err := db.New(tx).InsertMeter(ctx, db.InsertMeterParams{
		Code: p.Code, Aggregation: p.Aggregation, ValueProperty: p.ValueProperty, Dimensions: dims,
		EventID: e.EventID, DefinedAt: p.DefinedAt,
	}); err != nil {
		return inbox.Outcome{}, fmt.Errorf("insert meter %s: %w", p.Code, err)
	}
	return inbox.Outcome{}, nil
}

package app

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5"

	"github.com/usagebilling/billing/pkg/catalog"
	"github.com/usagebilling/billing/pkg/envelope"
	"github.com/usagebilling/billing/pkg/events"
	"github.com/usagebilling/billing/pkg/inbox"
	"github.com/usagebilling/billing/services/usage/internal/db"
	"github.com/usagebilling/billing/services/usage/internal/domain"
)

// ApplyMeterDefined records a catalog meter, inside the inbox's
// transaction. A meter never changes once defined: the same definition
// again is a no-op, another definition of its code (or its event type
// claimed by another code) is a contract breach, quarantined.
func (a *App) ApplyMeterDefined(ctx context.Context, tx pgx.Tx, d *envelope.Decoded, p events.MeterDefined) (inbox.Outcome, error) {
	e := d.Envelope
	if e.AggregateType != events.AggregateMeter || e.AggregateID != p.Code || e.TenantID != events.CatalogTenant {
		return inbox.Outcome{}, inbox.Permanent(inbox.ReasonAggregateMismatch, fmt.Errorf(
			"envelope %s/%s of tenant %s does not name meter %s of the catalog (%s)", e.AggregateType, e.AggregateID,
			e.TenantID, p.Code, events.CatalogTenant))
	}
	m := p.Meter().Normalized()
	if err := m.Validate(); err != nil {
		return inbox.Outcome{}, inbox.Permanent("", fmt.Errorf("meter %s: %w", m.Code, err))
	}
	q := db.New(tx)
	dims := m.Dimensions
	if dims == nil {
		dims = []string{}
	}
	n, err := q.InsertMeter(ctx, db.InsertMeterParams{
		Code: m.Code, Aggregation: m.Aggregation, ValueProperty: m.ValueProperty, Dimensions: dims,
		EventType: m.EventType, EventID: e.EventID,
	})
	if err != nil {
		return inbox.Outcome{}, fmt.Errorf("record meter %s: %w", m.Code, err)
	}
	if n == 1 {
		return inbox.Outcome{}, nil
	}
	rows, err := q.MeterByCodeOrEventType(ctx, db.MeterByCodeOrEventTypeParams{Code: m.Code, EventType: m.EventType})
	if err != nil {
		return inbox.Outcome{}, fmt.Errorf("read meter %s: %w", m.Code, err)
	}
	for _, r := range rows {
		held := meterOf(r.Code, r.Aggregation, r.ValueProperty, r.Dimensions, r.EventType)
		if held.Code != m.Code {
			continue
		}
		if domain.SameMeter(held, m) {
			return inbox.Outcome{}, nil // the same definition, again
		}
		return inbox.Outcome{}, inbox.Permanent("", fmt.Errorf(
			"meter %s is defined as %+v and MeterDefined %s redefines it as %+v: a meter never changes", m.Code, held, e.EventID, m))
	}
	if len(rows) > 0 {
		return inbox.Outcome{}, inbox.Permanent("", fmt.Errorf(
			"MeterDefined %s gives meter %s event type %q, which feeds meter %s: an event type feeds one meter", e.EventID, m.Code, m.EventType, rows[0].Code))
	}
	return inbox.Outcome{}, fmt.Errorf("meter %s was neither recorded nor found", m.Code)
}

func meterOf(code, aggregation, valueProperty string, dimensions []string, eventType string) catalog.Meter {
	if len(dimensions) == 0 {
		dimensions = nil
	}
	return catalog.Meter{Code: code, Aggregation: aggregation, ValueProperty: valueProperty, Dimensions: dimensions, EventType: eventType}
}

// catalogByCode reads the catalog meters of codes.
func catalogByCode(ctx context.Context, q *db.Queries, codes []string) (domain.Catalog, error) {
	rows, err := q.MetersByCode(ctx, codes)
	if err != nil {
		return domain.Catalog{}, fmt.Errorf("read meters: %w", err)
	}
	ms := make([]catalog.Meter, len(rows))
	for i, r := range rows {
		ms[i] = meterOf(r.Code, r.Aggregation, r.ValueProperty, r.Dimensions, r.EventType)
	}
	return domain.NewCatalog(ms), nil
}

// catalogByEventType reads the meters CloudEvents types feed.
func catalogByEventType(ctx context.Context, q *db.Queries, types []string) (domain.Catalog, error) {
	rows, err := q.MetersByEventType(ctx, types)
	if err != nil {
		return domain.Catalog{}, fmt.Errorf("read meters: %w", err)
	}
	ms := make([]catalog.Meter, len(rows))
	for i, r := range rows {
		ms[i] = meterOf(r.Code, r.Aggregation, r.ValueProperty, r.Dimensions, r.EventType)
	}
	return domain.NewCatalog(ms), nil
}

package app

import (
	"context"
	"fmt"
	"time"

	"github.com/usagebilling/billing/pkg/catalog"
	"github.com/usagebilling/billing/services/query/internal/db"
)

// CatalogMeter is a meter of the catalog as query holds it (replicated
// from MeterDefined; the name stays with the meter service).
type CatalogMeter struct {
	catalog.Meter
	DefinedAt time.Time
}

// Meters returns at most limit meters of query's copy of the catalog, by
// code after after ("" from the first).
func (a *App) Meters(ctx context.Context, after string, limit int) ([]CatalogMeter, error) {
	rows, err := db.New(a.pool).ListMeterDefinitions(ctx, db.ListMeterDefinitionsParams{After: after, Lim: int32(limit)})
	if err != nil {
		return nil, fmt.Errorf("list meters: %w", err)
	}
	out := make([]CatalogMeter, len(rows))
	for i, m := range rows {
		out[i] = CatalogMeter{Meter: meterOf(m.Code, m.Aggregation, m.ValueProperty, m.Dimensions, m.EventType), DefinedAt: m.DefinedAt}
	}
	return out, nil
}

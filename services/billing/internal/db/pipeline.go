package db

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5"
)

// RateUsagesLocked takes the shared locks of the periods of arg
// (LockPeriodsShared, in key order) and rates every fact (RateUsages) in one
// round trip: two statements, so RateUsages's snapshot is taken once every
// lock is held and sees the statuses closes committed before. Written by
// hand beside the generated code, from its statements.
func RateUsagesLocked(ctx context.Context, tx pgx.Tx, arg RateUsagesParams) ([]RateUsagesRow, error) {
	b := &pgx.Batch{}
	b.Queue(lockPeriodsShared, arg.TenantIds, arg.Periods)
	b.Queue(rateUsages, arg.TenantIds, arg.MeterCodes, arg.Currencies, arg.Periods,
		arg.ChargeIds, arg.EventIds, arg.UsageEventIds, arg.UsageIds, arg.Quantities, arg.OccurredAts,
		arg.Lates, arg.Properties, arg.SourceSystems, arg.SourceEventIds, arg.Shards)
	br := tx.SendBatch(ctx, b)
	if _, err := br.Exec(); err != nil {
		_ = br.Close()
		return nil, fmt.Errorf("lock periods: %w", err)
	}
	rows, err := br.Query()
	if err != nil {
		_ = br.Close()
		return nil, err
	}
	items := make([]RateUsagesRow, 0, len(arg.TenantIds))
	for rows.Next() {
		var i RateUsagesRow
		if err := rows.Scan(&i.Defined, &i.Aggregation, &i.Value, &i.Known, &i.TenantKnown, &i.Priced, &i.PriceVersion,
			&i.UnitPrice, &i.PriceUnitPrice, &i.Model, &i.Dimensions, &i.DimensionsKey, &i.PlanCode, &i.Status); err != nil {
			rows.Close()
			_ = br.Close()
			return nil, err
		}
		items = append(items, i)
	}
	rows.Close()
	err = rows.Err()
	if cerr := br.Close(); err == nil {
		err = cerr
	}
	return items, err
}

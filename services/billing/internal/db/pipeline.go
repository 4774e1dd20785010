package db

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5"
)

// RateUsagesLocked takes the shared locks of the periods of arg
// (LockPeriodsShared, in key order), rates every fact (RateUsages) and
// folds the parts of the lines of those periods that have more than foldAt
// (FoldParts) in one round trip: three statements, so RateUsages's snapshot
// is taken once every lock is held and sees the statuses closes committed
// before, and FoldParts's sees the parts RateUsages wrote. Written by hand
// beside the generated code, from its statements.
func RateUsagesLocked(ctx context.Context, tx pgx.Tx, arg RateUsagesParams, foldAt int32) ([]RateUsagesRow, error) {
	b := &pgx.Batch{}
	b.Queue(lockPeriodsShared, arg.TenantIds, arg.Periods)
	b.Queue(rateUsages, arg.TenantIds, arg.MeterCodes, arg.Currencies, arg.Periods,
		arg.ChargeIds, arg.EventIds, arg.UsageEventIds, arg.UsageIds, arg.Quantities, arg.OccurredAts,
		arg.Lates, arg.Properties, arg.SourceSystems, arg.SourceEventIds, arg.Shards)
	b.Queue(foldParts, arg.TenantIds, arg.Periods, foldAt)
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
	if err := rows.Err(); err != nil {
		_ = br.Close()
		return nil, err
	}
	var removed int64
	if err := br.QueryRow().Scan(&removed); err != nil {
		_ = br.Close()
		return nil, fmt.Errorf("fold parts: %w", err)
	}
	return items, br.Close()
}

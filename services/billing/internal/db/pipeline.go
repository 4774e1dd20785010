package db

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5"
)

// RateUsageLocked takes the period's shared lock (LockPeriodShared) and rates
// (RateUsage) in one round trip: two statements, so RateUsage's snapshot is
// taken once the lock is held and sees the status a close committed before.
// Written by hand beside the generated code, from its statements.
func RateUsageLocked(ctx context.Context, tx pgx.Tx, arg RateUsageParams) (RateUsageRow, error) {
	b := &pgx.Batch{}
	b.Queue(lockPeriodShared, arg.TenantID, arg.Period)
	b.Queue(rateUsage, arg.TenantID, arg.MeterCode, arg.Currency, arg.PriceVersion, arg.Period, arg.ChargeID,
		arg.EventID, arg.UsageEventID, arg.UsageID, arg.Quantity, arg.Late, arg.OccurredAt)
	br := tx.SendBatch(ctx, b)
	if _, err := br.Exec(); err != nil {
		_ = br.Close()
		return RateUsageRow{}, fmt.Errorf("lock period: %w", err)
	}
	var i RateUsageRow
	err := br.QueryRow().Scan(&i.UnitPrice, &i.Status)
	if cerr := br.Close(); err == nil {
		err = cerr
	}
	return i, err
}

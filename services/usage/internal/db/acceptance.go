package db

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
)

// LockAcceptance takes the acceptance lock shared (LockAcceptanceShared) and
// reads the cut's through (AcceptanceCut) in one round trip: two statements,
// so the read's snapshot is taken once the lock is held and sees the cut a
// publisher committed before. Written by hand beside the generated code,
// from its statements.
func LockAcceptance(ctx context.Context, tx pgx.Tx) (time.Time, error) {
	b := &pgx.Batch{}
	b.Queue(lockAcceptanceShared)
	b.Queue(acceptanceCut)
	br := tx.SendBatch(ctx, b)
	if _, err := br.Exec(); err != nil {
		_ = br.Close()
		return time.Time{}, fmt.Errorf("lock acceptance: %w", err)
	}
	var i AcceptanceCutRow
	err := br.QueryRow().Scan(&i.Through, &i.OutboxThrough, &i.Published)
	if cerr := br.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return time.Time{}, fmt.Errorf("read acceptance cut: %w", err)
	}
	return i.Through, nil
}

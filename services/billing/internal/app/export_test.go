package app

import (
	"context"

	"github.com/jackc/pgx/v5"

	"github.com/usagebilling/billing/services/billing/internal/db"
)

// SetAfterChunk runs f at the end of each chunk's transaction of a close's
// tally (an error rolls that chunk back and fails the close).
func (a *App) SetAfterChunk(f func(chunk int64) error) { a.afterChunk = f }

// SetAfterReadChunk runs f with the charges of each chunk a read of a
// period's lines walked (the estimate, a credit's check).
func (a *App) SetAfterReadChunk(f func(charges int64)) { a.afterReadChunk = f }

// WalkLines reads a period's lines as the estimate does (walkLines), in one
// snapshot.
func (a *App) WalkLines(ctx context.Context, tenantID, period string) ([]Line, error) {
	tx, err := a.pool.BeginTx(ctx, pgx.TxOptions{IsoLevel: pgx.RepeatableRead, AccessMode: pgx.ReadOnly})
	if err != nil {
		return nil, err
	}
	defer func() { _ = tx.Rollback(ctx) }()
	return a.walkLines(ctx, db.New(tx), tenantID, period, -1)
}

// TallyLines reads a closing or closed period's lines from its running
// tally (close_line), as the close prices its fees from them.
func (a *App) TallyLines(ctx context.Context, tenantID, period string) ([]Line, error) {
	q := db.New(a.pool)
	t, err := loadCloseTally(ctx, q, tenantID, period)
	if err != nil {
		return nil, err
	}
	lines := t.lines()
	return lines, priceLines(ctx, q, tenantID, lines)
}

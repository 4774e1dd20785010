package app

import (
	"context"

	"github.com/usagebilling/billing/services/billing/internal/db"
)

// SetAfterChunk runs f at the end of each chunk's transaction of a close's
// tally (an error rolls that chunk back and fails the close).
func (a *App) SetAfterChunk(f func(chunk int64) error) { a.afterChunk = f }

// PartLines reads a period's lines as the estimate does (partLines).
func (a *App) PartLines(ctx context.Context, tenantID, period string) ([]Line, error) {
	return partLines(ctx, db.New(a.pool), tenantID, period, -1)
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

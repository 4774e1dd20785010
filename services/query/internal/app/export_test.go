package app

import (
	"github.com/usagebilling/billing/pkg/catalog"
	"github.com/usagebilling/billing/services/query/internal/domain"
)

// SetAfterFoldChunk runs f at the end of each chunk's transaction of a fold
// (an error rolls that chunk back and fails the round).
func (a *App) SetAfterFoldChunk(f func(tenantID string, deltas int64) error) { a.afterFoldChunk = f }

// SetAfterReadChunk runs f with the deltas of each chunk of pending deltas a
// summary read.
func (a *App) SetAfterReadChunk(f func(deltas int64)) { a.afterReadChunk = f }

// WindowStatement is the statement Usage reads q's windows with, from the
// fact rows (facts) or the hourly rollups, and its leading arguments; the
// chunk's window starts, their ranges' ends, the cursor and the limit follow
// (usagePlan.read).
func WindowStatement(m catalog.Meter, q domain.UsageQuery, facts bool) (string, []any) {
	p := newUsagePlan(m, q, !facts)
	return p.sql, p.args
}

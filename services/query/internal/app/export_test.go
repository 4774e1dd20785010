package app

// SetAfterFoldChunk runs f at the end of each chunk's transaction of a fold
// (an error rolls that chunk back and fails the round).
func (a *App) SetAfterFoldChunk(f func(tenantID string, deltas int64) error) { a.afterFoldChunk = f }

// SetAfterReadChunk runs f with the deltas of each chunk of pending deltas a
// summary read.
func (a *App) SetAfterReadChunk(f func(deltas int64)) { a.afterReadChunk = f }

package app

// SetAfterLock sets what a close runs between locking its period's invoices
// and tallying them, so a test can commit a charge in between.
func (a *App) SetAfterLock(f func()) { a.afterLock = f }

// SetAfterChunk sets what a close runs after each chunk of its tally, with
// the charges the chunk read.
func (a *App) SetAfterChunk(f func(charges int64)) { a.afterChunk = f }

// SetAfterValueChunk sets a hook run after each chunk of a close's count of
// distinct values with the values it read.
func (a *App) SetAfterValueChunk(f func(values int64)) { a.afterValueChunk = f }

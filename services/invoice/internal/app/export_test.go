package app

// SetAfterLock sets what a close runs between locking its period's invoices
// and tallying them, so a test can commit a charge in between.
func (a *App) SetAfterLock(f func()) { a.afterLock = f }

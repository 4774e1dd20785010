package app

import "time"

// SetClock replaces the App's clock: the service's configured clock
// (service.Config.Clock, decision 0015), or a test's.
func (a *App) SetClock(now func() time.Time) { a.now = now }

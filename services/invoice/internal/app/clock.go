package app

import "time"

// SetClock replaces the consumer's clock (the time it issues invoices and
// correction notes at): the service's configured clock
// (service.Config.Clock, decision 0015), or a test's.
func (c *Consumer) SetClock(now func() time.Time) { c.now = now }

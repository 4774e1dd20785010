package scenario

import (
	"sync"
	"time"

	"github.com/usagebilling/billing/pkg/clock"
)

// Clock is the services' "now" as a story drives it: read, and moved
// forward for every service at once.
type Clock interface {
	Now() time.Time
	Advance(to time.Time) error
}

// OffsetClock drives the services' test clock (decision 0015): started with
// CLOCK_OFFSET_FILE naming Path, they read the wall clock plus the offset
// held there, re-read at every reading, and so does Now. Advance rewrites
// the offset (atomically); the next reading of every service is past it.
type OffsetClock struct {
	Path string
	mu   sync.Mutex
	off  time.Duration
}

// NewOffsetClock starts the file at offset 0 (the wall clock).
func NewOffsetClock(path string) (*OffsetClock, error) {
	return &OffsetClock{Path: path}, clock.SetOffset(path, 0)
}

// Now is the wall clock plus the offset, as the services read it.
func (c *OffsetClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return time.Now().Add(c.off)
}

// Advance moves every service's clock to `to`, or leaves it if it is
// already later: the services' clocks never go back.
func (c *OffsetClock) Advance(to time.Time) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	d := to.Sub(time.Now().Add(c.off))
	if d <= 0 {
		return nil
	}
	if err := clock.SetOffset(c.Path, c.off+d); err != nil {
		return err
	}
	c.off += d
	return nil
}

package money

import (
	"sync"
	"time"

	"github.com/usagebilling/billing/pkg/clock"
)

// FileClock drives the services' test clock (decision 0015): they read the
// wall clock plus the offset in the file their CLOCK_OFFSET_FILE names, and
// so does the model. Advance rewrites the offset; the next reading of every
// service is past it.
type FileClock struct {
	Path string
	mu   sync.Mutex
	off  time.Duration
}

// NewFileClock starts the file at offset 0 (the wall clock).
func NewFileClock(path string) (*FileClock, error) {
	return &FileClock{Path: path}, clock.SetOffset(path, 0)
}

// Now is the wall clock plus the offset, as the services read it.
func (c *FileClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return time.Now().Add(c.off)
}

// Advance moves every service's clock (and the model's) to to, or leaves it
// if it is already later.
func (c *FileClock) Advance(to time.Time) error {
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

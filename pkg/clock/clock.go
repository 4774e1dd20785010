// Package clock is where the services read "now" (decision 0015). In
// production it is the wall clock. A test that must drive time across
// period ends (the money test) starts the services with CLOCK_OFFSET_FILE:
// every service then reads the wall clock plus the offset held in that
// file, re-read at every reading, so one write moves every process's "now"
// at once and nothing else in the services changes. service.LoadConfig
// accepts the variable only where the published development key is accepted
// (AUTH_DEV_KEY=true on a loopback listener), never in production.
package clock

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"
)

// Func is a source of the current time.
type Func = func() time.Time

// Wall is the production clock.
func Wall() time.Time { return time.Now() }

// OffsetFile is a clock that reads the wall clock plus the offset in a file
// (see SetOffset). It never goes back: a reading is at least every earlier
// one of the same clock (a smaller offset written later is ignored until
// the wall clock catches up).
type OffsetFile struct {
	path string
	mu   sync.Mutex
	off  time.Duration
	last time.Time
}

// NewOffsetFile reads path once (an absent file is offset 0) and returns
// its clock.
func NewOffsetFile(path string) (*OffsetFile, error) {
	c := &OffsetFile{path: path}
	if _, err := c.read(); err != nil {
		return nil, err
	}
	return c, nil
}

func (c *OffsetFile) read() (time.Duration, error) {
	b, err := os.ReadFile(c.path)
	if os.IsNotExist(err) {
		return 0, nil
	}
	if err != nil {
		return 0, err
	}
	return ParseOffset(string(b))
}

// Now is the wall clock plus the file's current offset. A file that cannot
// be read or parsed keeps the last offset read.
func (c *OffsetFile) Now() time.Time {
	off, err := c.read()
	c.mu.Lock()
	defer c.mu.Unlock()
	if err == nil {
		c.off = off
	}
	now := time.Now().Add(c.off)
	if now.Before(c.last) {
		now = c.last
	}
	c.last = now
	return now
}

// ParseOffset parses a file's content: a signed number of nanoseconds.
func ParseOffset(s string) (time.Duration, error) {
	n, err := strconv.ParseInt(strings.TrimSpace(s), 10, 64)
	if err != nil {
		return 0, fmt.Errorf("clock offset %q: want a number of nanoseconds", strings.TrimSpace(s))
	}
	return time.Duration(n), nil
}

// SetOffset writes offset to path atomically (a temporary file renamed over
// it): a service reads the old offset or the new, never a torn one.
func SetOffset(path string, offset time.Duration) error {
	tmp, err := os.CreateTemp(filepath.Dir(path), ".clock-*")
	if err != nil {
		return err
	}
	if _, err := tmp.WriteString(strconv.FormatInt(int64(offset), 10) + "\n"); err != nil {
		tmp.Close()
		os.Remove(tmp.Name())
		return err
	}
	if err := tmp.Close(); err != nil {
		os.Remove(tmp.Name())
		return err
	}
	return os.Rename(tmp.Name(), path)
}

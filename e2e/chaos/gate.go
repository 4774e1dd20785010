package chaos

import (
	"context"
	"fmt"
	"sync"
	"time"
)

// Gate pauses loads that share it: while paused no sender starts a request
// and no price change starts, and Pause returns once those under way have
// ended (accepted, refused or given up). The soak pauses its loads around a
// move of the services' clock, so that no fact is stamped on one side of
// the move and sent on the other (it would arrive late, after its period
// closed).
type Gate struct {
	mu       sync.Mutex
	paused   bool
	inflight int
	// held is how long the gate has been paused in all, the pause under
	// way excluded (since holds its start).
	held  time.Duration
	since time.Time
}

// Held is how long the gate has been paused in all, the pause under way
// included: a load's give-up deadline moves by it, so a fact waiting at a
// paused gate is not given up for the time the gate held it.
func (g *Gate) Held() time.Duration {
	if g == nil {
		return 0
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.paused {
		return g.held + time.Since(g.since)
	}
	return g.held
}

// enter waits while the gate is paused, then counts one request under way.
// It returns false when ctx ends.
func (g *Gate) enter(ctx context.Context) bool {
	if g == nil {
		return true
	}
	for {
		g.mu.Lock()
		if !g.paused {
			g.inflight++
			g.mu.Unlock()
			return true
		}
		g.mu.Unlock()
		if !sleepCtx(ctx, 50*time.Millisecond) {
			return false
		}
	}
}

func (g *Gate) leave() {
	if g == nil {
		return
	}
	g.mu.Lock()
	g.inflight--
	g.mu.Unlock()
}

// Pause stops new requests and waits, at most timeout, for those under way
// to end, logging their number every ten seconds. On an error the gate
// stays paused; Resume opens it.
func (g *Gate) Pause(ctx context.Context, timeout time.Duration, progress func(string, ...any)) error {
	g.hold()
	deadline, logAt := time.Now().Add(timeout), time.Now().Add(10*time.Second)
	for {
		g.mu.Lock()
		n := g.inflight
		g.mu.Unlock()
		if n == 0 {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("pause the load: %d requests still under way after %s", n, timeout)
		}
		if time.Now().After(logAt) {
			progress("pausing the load: %d requests still under way", n)
			logAt = time.Now().Add(10 * time.Second)
		}
		if !sleepCtx(ctx, 50*time.Millisecond) {
			return ctx.Err()
		}
	}
}

// hold pauses the gate without waiting: no request starts after it returns.
func (g *Gate) hold() {
	g.mu.Lock()
	if !g.paused {
		g.paused, g.since = true, time.Now()
	}
	g.mu.Unlock()
}

// Resume lets the loads send again.
func (g *Gate) Resume() {
	g.mu.Lock()
	if g.paused {
		g.paused, g.held = false, g.held+time.Since(g.since)
	}
	g.mu.Unlock()
}

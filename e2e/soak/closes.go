package soak

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/shopspring/decimal"

	"github.com/usagebilling/billing/e2e/chaos"
	"github.com/usagebilling/billing/pkg/events"
)

// Grace is the soak tenants' grace period: they set none, so billing's
// default hour (decision 0014) applies.
const Grace = time.Hour

// Close is one period closed by billing's scheduler under a moved clock.
type Close struct {
	Period string
	// At is when the load was paused (since the load began); Paused how
	// long the load waited to stop, Charged until every accepted fact was
	// charged, Closed until the scheduler had closed the period and
	// invoice issued its invoices.
	At, Paused, Charged, Closed time.Duration
	// Offset is the services' clock offset after the move.
	Offset time.Duration
	// Invoices checked equal to what the ledger sent, Facts in them.
	Invoices, Facts int
	Err             error
}

// closeTimes are when (since the load began) the soak closes a period:
// every every, before the last half minute of the load; once at half time
// when every is not shorter than the run.
func closeTimes(d, every time.Duration) []time.Duration {
	if every <= 0 {
		return nil
	}
	if every >= d {
		return []time.Duration{d / 2}
	}
	var out []time.Duration
	for at := every; at < d-30*time.Second; at += every {
		out = append(out, at)
	}
	return out
}

// closeLoop closes a period by the scheduler at each of closeTimes: it
// pauses the loads, waits until every accepted fact is charged, moves the
// services' clock past the current period's end plus the grace, waits for
// billing's scheduler to close the period and invoice to issue its
// invoices, checks each invoice equal to what the ledger sent for the
// period, and resumes the loads. Faults go on meanwhile; every wait is
// bounded, and a close not seen in time is an error of the run.
func closeLoop(ctx context.Context, h *chaos.Harness, r *chaos.Run, cfg Config, gate *chaos.Gate, tenants []string, out *[]*Close) {
	for _, at := range closeTimes(cfg.Duration, cfg.CloseEvery) {
		if !r.At(ctx, at) {
			return
		}
		c := &Close{At: r.Since()}
		*out = append(*out, c)
		c.Err = closeOnce(ctx, h, r, cfg, gate, tenants, c)
		gate.Resume()
		if c.Err != nil {
			h.Progress("soak: scheduled close FAILED at %s: %v", c.At.Round(time.Second), c.Err)
		} else {
			h.Progress("soak: %s closed by the scheduler, %d invoices equal to the ledger (%d facts); paused %s, charged %s, closed %s",
				c.Period, c.Invoices, c.Facts, c.Paused.Round(time.Second), c.Charged.Round(time.Second), c.Closed.Round(time.Second))
		}
	}
}

func closeOnce(ctx context.Context, h *chaos.Harness, r *chaos.Run, cfg Config, gate *chaos.Gate, tenants []string, c *Close) error {
	began := time.Now()
	h.Progress("soak: pausing the load for a scheduled close")
	if err := gate.Pause(ctx, 5*time.Minute, h.Progress); err != nil {
		return err
	}
	c.Paused = time.Since(began)
	// Every accepted fact charged: nothing is left in flight to arrive
	// after the move, late.
	if err := waitChargedLogged(ctx, h, r.Ledger.AcceptedIDsOf(tenants...), 10*time.Minute, "billing charges every accepted fact"); err != nil {
		return err
	}
	c.Charged = time.Since(began)
	now := cfg.Clock.Now()
	c.Period = events.Period(now)
	start, err := events.ParsePeriod(c.Period)
	if err != nil {
		return err
	}
	to := start.AddDate(0, 1, 0).Add(Grace + time.Minute)
	if err := cfg.Clock.Advance(to); err != nil {
		return fmt.Errorf("move the clock: %w", err)
	}
	c.Offset = time.Until(cfg.Clock.Now())
	h.Progress("soak: clock moved from %s to %s (offset %s): %s is past its end plus %s of grace", now.UTC().Format(time.RFC3339),
		to.UTC().Format(time.RFC3339), c.Offset.Round(time.Second), c.Period, Grace)
	var closing []string
	for t, ps := range r.Ledger.Periods(tenants...) {
		if slices.Contains(ps, c.Period) {
			closing = append(closing, t)
		}
	}
	slices.Sort(closing)
	if len(closing) == 0 {
		return fmt.Errorf("no tenant has facts in %s", c.Period)
	}
	if err := waitLogged(ctx, h, 10*time.Minute, "the scheduler closes "+c.Period+" and invoice issues it", func() (bool, string, error) {
		var waiting []string
		for _, t := range closing {
			// A period has no row until a close or its end writes one: not
			// closed yet.
			var status string
			err := h.DB["billing"].QueryRow(ctx, `SELECT coalesce((SELECT status FROM billing_period WHERE tenant_id = $1 AND period = $2), 'open')`,
				t, c.Period).Scan(&status)
			if err != nil {
				return false, "", fmt.Errorf("%s's period %s: %w", t, c.Period, err)
			}
			var issued, all int
			if err := h.DB["invoice"].QueryRow(ctx, `SELECT count(*) FILTER (WHERE status = 'issued'), count(*) FROM invoice WHERE tenant_id = $1 AND period = $2`,
				t, c.Period).Scan(&issued, &all); err != nil {
				return false, "", err
			}
			want, _ := r.Ledger.PeriodTotals(t, c.Period)
			if status != "closed" || issued < len(want) || issued < all {
				waiting = append(waiting, fmt.Sprintf("%s %s, %d of %d invoices issued", t, status, issued, len(want)))
			}
		}
		return len(waiting) == 0, strings.Join(waiting, "; "), nil
	}); err != nil {
		return err
	}
	c.Closed = time.Since(began)
	// Each invoice equal to what the ledger sent: no adjustment is posted
	// before the end, so an invoice's subtotal is its charges' exact sum.
	var bad []string
	for _, t := range closing {
		want, n := r.Ledger.PeriodTotals(t, c.Period)
		c.Facts += n
		rows, err := h.DB["invoice"].Query(ctx, `SELECT currency, subtotal::text FROM invoice WHERE tenant_id = $1 AND period = $2`, t, c.Period)
		if err != nil {
			return err
		}
		got := map[string]decimal.Decimal{}
		for rows.Next() {
			var cur string
			var sub *string
			if err := rows.Scan(&cur, &sub); err != nil {
				rows.Close()
				return err
			}
			if sub != nil {
				got[cur] = decimal.RequireFromString(*sub)
			}
		}
		rows.Close()
		if err := rows.Err(); err != nil {
			return err
		}
		for cur, w := range want {
			if g, ok := got[cur]; !ok || !g.Equal(w) {
				bad = append(bad, fmt.Sprintf("%s %s %s: invoiced %s, the ledger sent %s", t, c.Period, cur, got[cur], w))
				continue
			}
			c.Invoices++
		}
		for cur := range got {
			if _, ok := want[cur]; !ok {
				bad = append(bad, fmt.Sprintf("%s %s %s: invoiced %s, the ledger sent nothing", t, c.Period, cur, got[cur]))
			}
		}
	}
	if len(bad) > 0 {
		return fmt.Errorf("invoices of %s not equal to the ledger: %s", c.Period, strings.Join(bad, "; "))
	}
	return nil
}

// waitChargedLogged waits until billing has charged every one of ids
// (waitCharged, polling every second), logging how many are charged every
// fifteen seconds; it fails after timeout.
func waitChargedLogged(ctx context.Context, h *chaos.Harness, ids []string, timeout time.Duration, what string) error {
	logAt := time.Now().Add(15 * time.Second)
	_, err := waitCharged(ctx, h.DB["billing"], ids, timeout, time.Second, func(charged, of int) {
		if charged < of && time.Now().After(logAt) {
			h.Progress("soak: waiting until %s: %d of %d charged", what, charged, of)
			logAt = time.Now().Add(15 * time.Second)
		}
	})
	if err != nil {
		return fmt.Errorf("%s: %w", what, err)
	}
	return nil
}

// waitLogged polls cond every 200ms until it holds, logging its status
// every fifteen seconds; it fails after timeout.
func waitLogged(ctx context.Context, h *chaos.Harness, timeout time.Duration, what string, cond func() (bool, string, error)) error {
	logAt := time.Now().Add(15 * time.Second)
	return chaos.Poll(ctx, timeout, what, func() (bool, string, error) {
		ok, status, err := cond()
		if !ok && err == nil && time.Now().After(logAt) {
			h.Progress("soak: waiting until %s: %s", what, status)
			logAt = time.Now().Add(15 * time.Second)
		}
		return ok, status, err
	})
}

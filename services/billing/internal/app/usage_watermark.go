package app

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/usagebilling/billing/pkg/envelope"
	"github.com/usagebilling/billing/pkg/events"
	"github.com/usagebilling/billing/pkg/inbox"
	"github.com/usagebilling/billing/services/billing/internal/db"
)

// A close waits for the usage accepted before it (decision 0014): usage
// publishes UsageAcceptedThrough {partition, through} on every partition of
// usage.events.v1, behind every fact it accepted before through; billing
// keeps the highest through per partition (usage_watermark). A close records
// close_requested_at and leaves the period open; its step 1 (mark closing)
// runs only once every partition's through is at or after the request and
// no UsageAccepted of the period (or before it) waits in the inbox. A fact
// accepted before the request is then rated into its period, or the close
// is visibly waiting for it.

// OnUsageAcceptedThrough applies a usage watermark: raises its partition's
// through (a lower or equal one changes nothing).
func (a *App) OnUsageAcceptedThrough(ctx context.Context, tx pgx.Tx, d *envelope.Decoded, p events.UsageAcceptedThrough) (inbox.Outcome, error) {
	e := d.Envelope
	if e.AggregateType != events.AggregateUsageWatermark || e.AggregateVersion != 1 || e.TenantID != events.UsageWatermarkTenant {
		return inbox.Outcome{}, inbox.Permanent(inbox.ReasonAggregateMismatch, fmt.Errorf(
			"UsageAcceptedThrough of partition %d is on aggregate %s/%s/%s v%d", p.Partition,
			e.TenantID, e.AggregateType, e.AggregateID, e.AggregateVersion))
	}
	err := db.New(tx).RaiseUsageWatermark(ctx, db.RaiseUsageWatermarkParams{
		Partition: p.Partition, Partitions: p.Partitions, Through: p.Through,
	})
	if err != nil {
		return inbox.Outcome{}, fmt.Errorf("raise usage watermark: %w", err)
	}
	return inbox.Outcome{}, nil
}

// usageCaughtUp says whether a close requested at requestedAt may mark the
// period closing: every partition's watermark at or after it, and none of
// the tenant's usage that occurred before the period's end deferred. When
// not, waitingFor says why (shown in the period's GET).
func (a *App) usageCaughtUp(ctx context.Context, q db.DBTX, tenantID string, periodEnd, requestedAt time.Time) (bool, string, error) {
	if !a.cfg.WaitForUsage {
		return true, "", nil
	}
	marks, err := db.New(q).UsageWatermarks(ctx)
	if err != nil {
		return false, "", fmt.Errorf("read usage watermarks: %w", err)
	}
	var partitions int32
	for _, m := range marks {
		partitions = max(partitions, m.Partitions)
	}
	if partitions == 0 {
		return false, "no usage watermark received yet (usage down, or its path to billing cut)", nil
	}
	behind, seen := 0, 0
	var oldest time.Time
	for _, m := range marks {
		if m.Partition >= partitions {
			continue
		}
		seen++
		if m.Through.Before(requestedAt) {
			if behind == 0 || m.Through.Before(oldest) {
				oldest = m.Through
			}
			behind++
		}
	}
	if missing := int(partitions) - seen; missing > 0 {
		return false, fmt.Sprintf("no usage watermark yet from %d of %d partitions", missing, partitions), nil
	}
	if behind > 0 {
		return false, fmt.Sprintf("usage watermark of %d of %d partitions before the close request (oldest %s)",
			behind, partitions, oldest.UTC().Format(time.RFC3339Nano)), nil
	}
	n, err := db.DeferredUsageBefore(ctx, q, tenantID, periodEnd)
	if err != nil {
		return false, "", fmt.Errorf("count deferred usage: %w", err)
	}
	if n > 0 {
		return false, fmt.Sprintf("%d usage facts of the period deferred (waiting for their price schedule)", n), nil
	}
	// A subscriber's fees are priced by the plan versions in effect on each
	// day of the period as far as the close reaches (its end, or now for an
	// early close): they must be known through there.
	through := periodEnd
	if requestedAt.Before(through) {
		through = requestedAt
	}
	plans, err := db.New(q).PlansKnownFor(ctx, db.PlansKnownForParams{TenantID: tenantID,
		Since: periodEnd.AddDate(0, -1, -1), Until: periodEnd})
	if err != nil {
		return false, "", fmt.Errorf("read the plans' schedule: %w", err)
	}
	if plans.Subscribed && plans.KnownThrough.Before(through) {
		return false, fmt.Sprintf("the plans' schedule known through %s, before %s (the subscription's fees need it)",
			plans.KnownThrough.UTC().Format(time.RFC3339Nano), through.UTC().Format(time.RFC3339Nano)), nil
	}
	return true, "", nil
}

// closeMetrics are the gauges of closes waiting for usage, refreshed by
// each scheduler pass.
type closeMetrics struct {
	waiting prometheus.Gauge
	oldest  prometheus.Gauge
}

func newCloseMetrics() closeMetrics {
	return closeMetrics{
		waiting: prometheus.NewGauge(prometheus.GaugeOpts{Name: "billing_close_waiting_periods",
			Help: "Closes requested and waiting for usage's watermarks or deferred usage (decision 0014)."}),
		oldest: prometheus.NewGauge(prometheus.GaugeOpts{Name: "billing_close_wait_oldest_seconds",
			Help: "How long the oldest waiting close has waited, in seconds."}),
	}
}

// Collectors are billing's close gauges, for the service to register:
// billing_close_waiting_periods (closes requested and waiting for usage) and
// billing_close_wait_oldest_seconds (how long the oldest has waited).
func (a *App) Collectors() []prometheus.Collector {
	return []prometheus.Collector{a.metrics.waiting, a.metrics.oldest}
}

func (a *App) observeWaiting(n int, oldest time.Duration) {
	a.metrics.waiting.Set(float64(n))
	a.metrics.oldest.Set(oldest.Seconds())
}

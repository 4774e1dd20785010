// Package app is the query service's application layer: the inbox handler
// that projects every public event (a per-event row and a summary delta, in
// the deciding transaction), the summary read (folded totals plus the deltas
// not folded yet, in one snapshot), and the background folder.
package app

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/shopspring/decimal"

	"github.com/usagebilling/billing/pkg/envelope"
	"github.com/usagebilling/billing/pkg/events"
	"github.com/usagebilling/billing/pkg/inbox"
	"github.com/usagebilling/billing/services/query/internal/db"
	"github.com/usagebilling/billing/services/query/internal/domain"
)

// Topics are the public topics the query service projects.
var Topics = []string{events.TopicMeter, events.TopicUsage, events.TopicBilling, events.TopicInvoice}

// Projected are the event types projected (every public event type).
var Projected = []string{
	events.TypePriceActivated, events.TypeUsageAccepted, events.TypeChargeRated, events.TypeAdjustmentPosted,
	events.TypeBillingPeriodClosed, events.TypeInvoiceIssued, events.TypeInvoiceCorrectionIssued,
}

// BatchHandlers maps every projected event type to the projection, and the
// meter's schedule watermarks (PriceScheduleWatermark, billing's concern,
// sent every few seconds per price series) to nothing: they share the
// meter's topic and are absorbed, not projected.
func BatchHandlers() map[string]inbox.BatchHandler {
	hs := make(map[string]inbox.BatchHandler, len(Projected)+1)
	for _, t := range Projected {
		hs[t] = project
	}
	hs[events.TypePriceScheduleWatermark] = absorb
	// BillingPeriodEnded (a period went into grace, decision 0014) changes
	// no summary: absorbed.
	hs[events.TypeBillingPeriodEnded] = absorb
	// Usage's watermarks (UsageAcceptedThrough, decision 0014: billing's
	// concern, every second per partition) share the usage topic: absorbed.
	hs[events.TypeUsageAcceptedThrough] = absorb
	return hs
}

// absorb applies events without effect.
func absorb(_ context.Context, _ pgx.Tx, ds []*envelope.Decoded) ([]inbox.Outcome, error) {
	return make([]inbox.Outcome, len(ds)), nil
}

// project records the events and their summary deltas in one statement. The
// inbox dedups by event id; an event projected anyway (its projected_event
// row exists) is a duplicate.
func project(ctx context.Context, tx pgx.Tx, ds []*envelope.Decoded) ([]inbox.Outcome, error) {
	n := len(ds)
	p := db.ProjectParams{
		EventIds: make([]uuid.UUID, n), EventTypes: make([]string, n), TenantIds: make([]string, n),
		AggregateTypes: make([]string, n), AggregateIds: make([]string, n), AggregateVersions: make([]int64, n),
		OccurredAts: make([]time.Time, n), SubjectIds: make([]string, n), OriginEventIds: make([]string, n),
		Periods: make([]string, n), MeterCodes: make([]string, n), Currencies: make([]string, n),
		Quantities: make([]string, n), UnitPrices: make([]string, n), Amounts: make([]string, n),
		Payloads: make([][]byte, n), DeltaKinds: make([]string, n), DeltaKeys: make([]string, n),
		DeltaAmounts: make([]decimal.Decimal, n),
	}
	for i, d := range ds {
		e := &d.Envelope
		fact, delta, err := domain.Project(d.Payload)
		if err != nil {
			return nil, inbox.ItemError(i, inbox.Permanent(inbox.ReasonUnprojectable, err))
		}
		p.EventIds[i], p.EventTypes[i], p.TenantIds[i] = e.EventID, e.EventType, e.TenantID
		p.AggregateTypes[i], p.AggregateIds[i], p.AggregateVersions[i] = e.AggregateType, e.AggregateID, e.AggregateVersion
		p.OccurredAts[i], p.SubjectIds[i], p.OriginEventIds[i] = e.OccurredAt, uuidText(fact.SubjectID), uuidText(fact.OriginEventID)
		p.Periods[i], p.MeterCodes[i], p.Currencies[i] = fact.Period, fact.MeterCode, fact.Currency
		p.Quantities[i], p.UnitPrices[i], p.Amounts[i] = decimalText(fact.Quantity), decimalText(fact.UnitPrice), decimalText(fact.Amount)
		p.Payloads[i] = e.Payload
		p.DeltaKinds[i], p.DeltaKeys[i], p.DeltaAmounts[i] = delta.Kind, delta.Key, delta.Amount
	}
	if err := priceLines(ctx, tx, ds, p.DeltaAmounts); err != nil {
		return nil, err
	}
	stored, err := db.New(tx).Project(ctx, p)
	if err != nil {
		return nil, fmt.Errorf("project %d events: %w", n, err)
	}
	if len(stored) != n {
		have := make(map[uuid.UUID]bool, len(stored))
		for _, id := range stored {
			have[id] = true
		}
		for i, id := range p.EventIds {
			if !have[id] {
				return nil, inbox.ItemError(i, inbox.Duplicate("projected_event_pkey"))
			}
		}
	}
	return make([]inbox.Outcome, n), nil
}

// uuidText and decimalText render a nullable column for Project: "" is NULL.
func uuidText(id uuid.UUID) string {
	if id == uuid.Nil {
		return ""
	}
	return id.String()
}

func decimalText(d *decimal.Decimal) string {
	if d == nil {
		return ""
	}
	return d.String()
}

// Reader reads tenant summaries.
type Reader struct {
	pool *pgxpool.Pool
}

// NewReader returns a Reader on pool.
func NewReader(pool *pgxpool.Pool) *Reader { return &Reader{pool: pool} }

// Summary returns the tenant's summary: its folded totals plus the deltas not
// folded yet, read in one snapshot (a REPEATABLE READ transaction), so the
// figures are exact whether or not the folder (Folder) ran, or runs
// meanwhile. A tenant with no event has an all-zero summary. A read never
// writes and never waits for a fold.
func (r *Reader) Summary(ctx context.Context, tenantID string) (domain.Summary, error) {
	var out domain.Summary
	err := pgx.BeginTxFunc(ctx, r.pool, pgx.TxOptions{IsoLevel: pgx.RepeatableRead, AccessMode: pgx.ReadOnly}, func(tx pgx.Tx) error {
		q := db.New(tx)
		var lastEventAt *time.Time
		row, err := q.GetTenantSummary(ctx, tenantID)
		switch {
		case errors.Is(err, pgx.ErrNoRows):
		case err != nil:
			return fmt.Errorf("read summary of %s: %w", tenantID, err)
		default:
			at := row.LastEventAt.UTC()
			lastEventAt = &at
		}
		pending, err := q.GetPendingSummary(ctx, tenantID)
		if err != nil {
			return fmt.Errorf("read pending summary of %s: %w", tenantID, err)
		}
		if at, ok := pending.LastEventAt.(time.Time); ok && (lastEventAt == nil || at.After(*lastEventAt)) {
			at = at.UTC()
			lastEventAt = &at
		}
		rows, err := q.ListTenantTotals(ctx, tenantID)
		if err != nil {
			return fmt.Errorf("read totals of %s: %w", tenantID, err)
		}
		prows, err := q.ListPendingTotals(ctx, tenantID)
		if err != nil {
			return fmt.Errorf("read pending totals of %s: %w", tenantID, err)
		}
		totals := make([]domain.Total, 0, len(rows)+len(prows))
		at := map[[2]string]int{}
		for _, t := range rows {
			at[[2]string{t.Kind, t.Key}] = len(totals)
			totals = append(totals, domain.Total{Kind: t.Kind, Key: t.Key, Amount: t.Amount, Events: t.Events})
		}
		for _, p := range prows {
			if i, ok := at[[2]string{p.Kind, p.Key}]; ok {
				totals[i].Amount = totals[i].Amount.Add(p.Amount)
				totals[i].Events += p.Events
				continue
			}
			totals = append(totals, domain.Total{Kind: p.Kind, Key: p.Key, Amount: p.Amount, Events: p.Events})
		}
		out = domain.Summarize(tenantID, totals, lastEventAt)
		return nil
	})
	return out, err
}

// Folder moves the summary deltas the consumers insert into the folded
// totals, in the background, so a read adds up few rows and the table stays
// small. Folds of one tenant are serialised (an advisory lock); consumers
// never wait for them, and reads never wait either (see Summary).
type Folder struct {
	pool     *pgxpool.Pool
	interval time.Duration
	log      *slog.Logger
	pending  prometheus.Gauge
	folded   prometheus.Counter
}

// DefaultFoldInterval is how often the folder runs when not configured.
const DefaultFoldInterval = time.Second

// NewFolder returns a folder running every interval, with its metrics on
// reg (nil: none): summary_deltas_pending and summary_folds_total.
func NewFolder(pool *pgxpool.Pool, interval time.Duration, reg prometheus.Registerer, log *slog.Logger) *Folder {
	if interval <= 0 {
		interval = DefaultFoldInterval
	}
	f := &Folder{pool: pool, interval: interval, log: log,
		pending: prometheus.NewGauge(prometheus.GaugeOpts{Name: "summary_deltas_pending",
			Help: "Summary deltas not folded into the tenant totals yet (after the last fold)."}),
		folded: prometheus.NewCounter(prometheus.CounterOpts{Name: "summary_folds_total",
			Help: "Tenant folds of summary deltas committed by the background folder."}),
	}
	if reg != nil {
		_ = reg.Register(f.pending)
		_ = reg.Register(f.folded)
	}
	return f
}

// Run folds every interval until ctx ends.
func (f *Folder) Run(ctx context.Context) error {
	t := time.NewTicker(f.interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
		if _, err := f.FoldOnce(ctx); err != nil && ctx.Err() == nil {
			f.log.WarnContext(ctx, "fold of summary deltas failed; next interval tries again", "err", err)
		}
	}
}

// FoldOnce folds the deltas of the tenants with the oldest pending deltas
// (up to 100 tenants), one transaction per tenant, and returns how many
// tenants it folded.
func (f *Folder) FoldOnce(ctx context.Context) (int, error) {
	tenants, err := db.New(f.pool).ListTenantsToFold(ctx, 10000)
	if err != nil {
		return 0, fmt.Errorf("list tenants to fold: %w", err)
	}
	n := 0
	for _, tenantID := range tenants[:min(len(tenants), 100)] {
		err := pgx.BeginFunc(ctx, f.pool, func(tx pgx.Tx) error {
			q := db.New(tx)
			if err := q.LockTenantSummary(ctx, tenantID); err != nil {
				return fmt.Errorf("lock summary of %s: %w", tenantID, err)
			}
			if err := q.FoldDeltas(ctx, tenantID); err != nil {
				return fmt.Errorf("fold deltas of %s: %w", tenantID, err)
			}
			return nil
		})
		if err != nil {
			return n, err
		}
		n++
		f.folded.Inc()
	}
	if left, err := db.New(f.pool).CountPendingDeltas(ctx); err == nil {
		f.pending.Set(float64(left))
	}
	return n, nil
}

package app

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/usagebilling/billing/services/query/internal/db"
)

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

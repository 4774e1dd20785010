package service

import (
	"context"
	"log/slog"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/usagebilling/billing/pkg/events"
	"github.com/usagebilling/billing/pkg/idempotency"
	"github.com/usagebilling/billing/pkg/inbox"
	"github.com/usagebilling/billing/pkg/monthpart"
)

// KeepNewestAggregates are the aggregate types whose next version may come
// long after the last (a new price version, an invoice's correction): the
// inbox keeps the newest applied version of each such aggregate whatever its
// age, since the gap check of the next version reads it.
var KeepNewestAggregates = []string{events.AggregatePrice, events.AggregateInvoice}

// retention purges, in the background, what each service keeps only for a
// while: decided inbox events and quarantine rows redriven past
// INBOX_RETENTION, idempotency keys past IDEMPOTENCY_TTL, and deferred events
// past DEFERRED_MAX_AGE (quarantined as deferred_expired, not deleted). It
// also keeps inbox_event's weeks, and the months of the service's own tables
// partitioned by month (Spec.MonthTables): the partitions of the current
// span and the next ones are created ahead (at start and each interval); an
// inbox week past INBOX_RETENTION is dropped whole; the rows outside the
// partitions (the default partition) are deleted in small batches, like the
// rest.
type retention struct {
	pool       *pgxpool.Pool
	ib         *inbox.Inbox
	cfg        Config
	log        *slog.Logger
	keysPurged prometheus.Counter
	// quarantinePurged counts the redriven quarantine rows purged.
	quarantinePurged prometheus.Counter
	// months are the service's own tables partitioned by month
	// (Spec.MonthTables), whose months ahead are kept with inbox_event's
	// weeks.
	months []monthpart.Table
	now    func() time.Time
}

func newRetention(pool *pgxpool.Pool, ib *inbox.Inbox, cfg Config, reg prometheus.Registerer, log *slog.Logger) (*retention, error) {
	r := &retention{pool: pool, ib: ib, cfg: cfg, log: log.With("component", "retention"), now: time.Now,
		keysPurged: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "idempotency_keys_purged_total",
			Help: "Idempotency keys deleted past IDEMPOTENCY_TTL.",
		}),
		quarantinePurged: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "inbox_quarantine_purged_total",
			Help: "Quarantine rows deleted past INBOX_RETENTION after their redrive (rows still quarantined are never purged).",
		})}
	if reg != nil {
		for _, c := range []prometheus.Counter{r.keysPurged, r.quarantinePurged} {
			if err := reg.Register(c); err != nil {
				return nil, err
			}
		}
	}
	return r, nil
}

func (r *retention) run(ctx context.Context) {
	r.ensureParts(ctx)
	t := time.NewTicker(r.cfg.RetentionInterval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		r.once(ctx)
	}
}

// once runs each purge until it finds less than a batch (or for at most a
// minute, so a large backlog is worked off over several ticks).
func (r *retention) once(ctx context.Context) {
	stop := r.now().Add(time.Minute)
	limit := r.cfg.RetentionBatch
	r.ensureParts(ctx)
	dropped, rows, err := inbox.DropParts(ctx, r.pool, r.now().Add(-r.cfg.InboxRetention), KeepNewestAggregates)
	r.ib.CountPurged(rows)
	if err != nil {
		r.warn(ctx, err)
	}
	if len(dropped) > 0 {
		r.log.InfoContext(ctx, "dropped inbox weeks past the retention", "partitions", dropped, "rows", rows)
	}
	for r.now().Before(stop) {
		n, err := inbox.PurgeDefault(ctx, r.pool, r.now().Add(-r.cfg.InboxRetention), KeepNewestAggregates, limit)
		r.ib.CountPurged(n)
		if err != nil {
			r.warn(ctx, err)
			break
		}
		if n < int64(limit) {
			break
		}
	}
	for r.now().Before(stop) {
		n, err := inbox.PurgeRedriven(ctx, r.pool, r.now().Add(-r.cfg.InboxRetention), limit)
		r.quarantinePurged.Add(float64(n))
		if err != nil {
			r.warn(ctx, err)
			break
		}
		if n < int64(limit) {
			break
		}
	}
	for r.now().Before(stop) {
		n, err := idempotency.Purge(ctx, r.pool, r.now().Add(-r.cfg.IdempotencyTTL), limit)
		r.keysPurged.Add(float64(n))
		if err != nil {
			r.warn(ctx, err)
			break
		}
		if n < int64(limit) {
			break
		}
	}
	// Expiring is heavier (each row is decoded and quarantined with its
	// notice), so its batches are smaller.
	for r.now().Before(stop) {
		n, err := r.ib.ExpireDeferred(ctx, r.pool, r.now().Add(-r.cfg.DeferredMaxAge), min(limit, 100))
		if err != nil {
			r.warn(ctx, err)
			break
		}
		if n < min(limit, 100) {
			break
		}
	}
}

// ensureParts creates the partitions of inbox_event and of the service's
// month tables for the current span and the next ones; a failure is logged
// and tried again at the next interval (until then, rows of a span without a
// partition go to the default one).
func (r *retention) ensureParts(ctx context.Context) {
	for _, tb := range append([]monthpart.Table{inbox.EventParts}, r.months...) {
		created, err := tb.Ensure(ctx, r.pool, r.now())
		if err != nil {
			r.warn(ctx, err)
		}
		if len(created) > 0 {
			r.log.InfoContext(ctx, "created partitions", "table", tb.Name, "partitions", created)
		}
	}
}

func (r *retention) warn(ctx context.Context, err error) {
	if ctx.Err() == nil {
		r.log.WarnContext(ctx, "retention purge failed; next interval tries again", "err", err)
	}
}

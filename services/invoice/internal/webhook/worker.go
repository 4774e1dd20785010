package webhook

import (
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"sync"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgtype"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/usagebilling/billing/services/invoice/internal/webhook/webhookdb"
)

// purgeBatch bounds one purge or expiry statement.
const purgeBatch = 1000

// recordTimeout bounds the recording of a delivery's result, which goes on
// after the worker is asked to stop (the call was made: its answer is kept).
const recordTimeout = 5 * time.Second

// Worker delivers due intents. Any number of workers, in any number of
// processes, share the intents: each claims a batch with FOR UPDATE SKIP
// LOCKED under a fresh lease token, calls the receivers with no database
// transaction open, and records each result fenced on its token (a worker
// whose lease ran out and was taken over records nothing).
type Worker struct {
	pool *pgxpool.Pool
	cfg  Config
	log  *slog.Logger
	hc   *http.Client
	m    *metrics

	// crashAfterCall, set by tests, is asked after each call whether to
	// drop its result unrecorded, as a worker killed at that moment would.
	crashAfterCall func(key string) bool
	lastPurge      time.Time
}

// NewWorker returns a worker on pool; reg registers its metrics (nil: none).
func NewWorker(pool *pgxpool.Pool, cfg Config, log *slog.Logger, reg prometheus.Registerer) (*Worker, error) {
	if err := cfg.Check(); err != nil {
		return nil, err
	}
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	m, err := newMetrics(reg)
	if err != nil {
		return nil, fmt.Errorf("register webhook metrics: %w", err)
	}
	return &Worker{pool: pool, cfg: cfg, log: log.With("component", "webhook"), hc: newClient(), m: m}, nil
}

// Run delivers until ctx ends, then returns once the deliveries in flight
// are recorded (each bounded by the timeout). A database error is logged
// and retried at the next poll: it never stops the service.
func (w *Worker) Run(ctx context.Context) error {
	timer := time.NewTimer(0)
	defer timer.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-timer.C:
		}
		n, err := w.Tick(ctx)
		if err != nil && ctx.Err() == nil {
			w.log.WarnContext(ctx, "webhook delivery round", "err", err)
		}
		wait := w.cfg.PollInterval
		if n == w.cfg.Concurrency { // a full batch: more may be due
			wait = 0
		}
		timer.Reset(wait)
	}
}

// Tick runs one round: expires what is past its expiry, claims up to
// Concurrency due intents and delivers them concurrently, records each
// result, refreshes the oldest-pending gauge and purges old accepted
// intents now and then. It returns how many intents it claimed.
func (w *Worker) Tick(ctx context.Context) (int, error) {
	q := webhookdb.New(w.pool)
	if err := w.expire(ctx, q); err != nil {
		return 0, err
	}
	owner, err := uuid.NewV7()
	if err != nil {
		return 0, fmt.Errorf("new lease token: %w", err)
	}
	rows, err := q.ClaimIntents(ctx, webhookdb.ClaimIntentsParams{
		Owner: owner, LeaseSeconds: w.cfg.LeaseTTL.Seconds(), MaxRows: int32(w.cfg.Concurrency)})
	if err != nil {
		return 0, fmt.Errorf("claim webhook intents: %w", err)
	}
	var wg sync.WaitGroup
	for _, row := range rows {
		if row.Attempts == 1 {
			w.m.commitToFirstAttempt.Observe(row.AgeSeconds)
		}
		wg.Go(func() { w.attempt(ctx, owner, row) })
	}
	wg.Wait()
	if age, err := q.OldestOpenAge(ctx); err == nil {
		w.m.oldestPendingAge.Set(age)
	}
	if time.Since(w.lastPurge) > time.Minute {
		w.lastPurge = time.Now()
		if n, err := PurgeEnded(ctx, q, w.cfg, purgeBatch); err != nil {
			w.log.WarnContext(ctx, "purge ended webhook intents", "err", err)
		} else if n > 0 {
			w.log.InfoContext(ctx, "purged ended webhook intents", "count", n)
		}
	}
	return len(rows), nil
}

// PurgeEnded deletes up to limit intents past their retention: accepted
// ones after cfg.Retention, failed and expired ones after
// cfg.FailedRetention. The worker runs it once a minute.
func PurgeEnded(ctx context.Context, q *webhookdb.Queries, cfg Config, limit int32) (int64, error) {
	n, err := q.PurgeEnded(ctx, webhookdb.PurgeEndedParams{AcceptedSeconds: cfg.Retention.Seconds(),
		FailedSeconds: cfg.FailedRetention.Seconds(), MaxRows: limit})
	if err != nil {
		return 0, fmt.Errorf("purge ended webhook intents: %w", err)
	}
	return n, nil
}

func (w *Worker) expire(ctx context.Context, q *webhookdb.Queries) error {
	attempts, err := q.ExpireIntents(ctx, purgeBatch)
	if err != nil {
		return fmt.Errorf("expire webhook intents: %w", err)
	}
	for _, a := range attempts {
		w.m.ended(StatusExpired, a)
	}
	if len(attempts) > 0 {
		w.log.WarnContext(ctx, "webhook intents expired into the operator queue", "count", len(attempts))
	}
	return nil
}

// attempt makes one delivery and records its result. Neither is cut short
// by ctx ending: the call is bounded by the timeout, and its answer must be
// recorded, or the intent is delivered again after its lease.
func (w *Worker) attempt(ctx context.Context, owner uuid.UUID, row webhookdb.ClaimIntentsRow) {
	detached := context.WithoutCancel(ctx)
	res := deliver(detached, w.hc, w.cfg.Timeout, row.Url, row.Secret, row.IdempotencyKey, []byte(row.Body), time.Now())
	if w.crashAfterCall != nil && w.crashAfterCall(row.IdempotencyKey) {
		return
	}
	rctx, cancel := context.WithTimeout(detached, recordTimeout)
	defer cancel()
	status, err := w.record(rctx, owner, row, res)
	log := w.log.With("intent_id", row.IntentID, "tenant_id", row.TenantID, "webhook_id", row.IdempotencyKey,
		"attempt", row.Attempts, "status_code", res.statusCode)
	switch {
	case err != nil:
		log.WarnContext(ctx, "record webhook delivery", "outcome", res.outcome, "err", err)
	case status == "":
		w.m.attempts.WithLabelValues(outcomeLost).Inc()
		log.WarnContext(ctx, "webhook lease lost before recording; the new holder delivers again", "outcome", res.outcome)
	default:
		w.m.attempts.WithLabelValues(res.outcome).Inc()
		if status != StatusPending {
			w.m.ended(status, row.Attempts)
		}
		log.DebugContext(ctx, "webhook delivery", "outcome", res.outcome, "status", status, "error", res.err)
	}
}

// record writes res, fenced on owner. It returns the intent's new status,
// or "" when the lease was lost.
func (w *Worker) record(ctx context.Context, owner uuid.UUID, row webhookdb.ClaimIntentsRow, res result) (string, error) {
	q := webhookdb.New(w.pool)
	code := pgtype.Int4{Int32: int32(res.statusCode), Valid: res.statusCode != 0}
	ref := pgtype.Text{String: res.ref, Valid: res.ref != ""}
	var n int64
	var err error
	switch res.outcome {
	case outcomeAccepted:
		n, err = q.RecordAccepted(ctx, webhookdb.RecordAcceptedParams{
			StatusCode: int32(res.statusCode), ResponseRef: ref, IntentID: row.IntentID, Owner: owner})
		return statusIf(n, StatusAccepted), err
	case outcomeFailed:
		n, err = q.RecordFailed(ctx, webhookdb.RecordFailedParams{
			StatusCode: code, ResponseRef: ref, LastError: res.err, IntentID: row.IntentID, Owner: owner})
		return statusIf(n, StatusFailed), err
	default:
		delay := backoff(w.cfg.BackoffBase, w.cfg.BackoffMax, row.Attempts, res.retryAfter)
		r, err := q.RecordRetry(ctx, webhookdb.RecordRetryParams{
			DelaySeconds: delay.Seconds(), StatusCode: code, LastError: res.err, IntentID: row.IntentID, Owner: owner})
		if isNoRows(err) {
			return "", nil
		}
		return r.Status, err
	}
}

func statusIf(n int64, status string) string {
	if n == 0 {
		return ""
	}
	return status
}

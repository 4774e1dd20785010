package webhook

import (
	"context"
	"errors"
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

// claimScan bounds the due intents one claim ranks for fairness.
const claimScan = 1000

// Worker delivers due intents. Any number of workers, in any number of
// processes, share the intents: each claims due intents with FOR UPDATE SKIP
// LOCKED under a fresh lease token, calls the receivers with no database
// transaction open, and records each result fenced on its token (a worker
// whose lease ran out and was taken over records nothing).
//
// A worker has Concurrency slots. A delivery holds one slot until its
// result is recorded, and a freed slot is claimed into at once: a slow
// call never holds back the others. No tenant holds more than
// TenantConcurrency of the slots, and a claim takes every tenant's oldest
// intent (each endpoint's oldest first) before any tenant's second
// (ClaimIntents), so a tenant whose endpoints hang slows only itself.
type Worker struct {
	pool *pgxpool.Pool
	cfg  Config
	log  *slog.Logger
	hc   *http.Client
	m    *metrics

	mu       sync.Mutex
	inFlight map[string]int // deliveries in flight by tenant
	busy     int            // slots held
	freed    chan struct{}  // a slot was freed (capacity 1: wakes Run)
	wg       sync.WaitGroup // the deliveries in flight

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
	return &Worker{pool: pool, cfg: cfg, log: log.With("component", "webhook"), hc: NewEgress(cfg, nil).Client(), m: m,
		inFlight: map[string]int{}, freed: make(chan struct{}, 1)}, nil
}

// Run delivers until ctx ends, then returns once the deliveries in flight
// are recorded (each bounded by the timeout). A database error is logged
// and retried at the next poll: it never stops the service.
func (w *Worker) Run(ctx context.Context) error {
	defer w.Wait()
	timer := time.NewTimer(0)
	defer timer.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-timer.C:
		case <-w.freed:
		}
		n, err := w.Tick(ctx)
		if err != nil && ctx.Err() == nil {
			w.log.WarnContext(ctx, "webhook delivery round", "err", err)
		}
		wait := w.cfg.PollInterval
		if n > 0 && w.free() > 0 { // slots left after a claim that found some: more may be due
			wait = 0
		}
		if !timer.Stop() {
			select {
			case <-timer.C:
			default:
			}
		}
		timer.Reset(wait)
	}
}

// Wait returns once the deliveries Tick started are recorded.
func (w *Worker) Wait() { w.wg.Wait() }

// free is the number of slots not held.
func (w *Worker) free() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.cfg.Concurrency - w.busy
}

// rooms lists the tenants with deliveries in flight and the slots each may
// still take.
func (w *Worker) rooms() ([]string, []int32) {
	w.mu.Lock()
	defer w.mu.Unlock()
	var tenants []string
	var rooms []int32
	for t, n := range w.inFlight {
		tenants, rooms = append(tenants, t), append(rooms, int32(w.cfg.TenantConcurrency-n))
	}
	return tenants, rooms
}

// Tick runs one round: expires what is past its expiry, claims due intents
// into the free slots (fairly, see ClaimIntents) and starts their
// deliveries, each recording its result and freeing its slot when done;
// refreshes the oldest-pending gauge and purges ended intents now and then.
// It returns how many intents it claimed, without waiting for their
// deliveries (Wait does).
func (w *Worker) Tick(ctx context.Context) (int, error) {
	q := webhookdb.New(w.pool)
	if err := w.expire(ctx, q); err != nil {
		return 0, err
	}
	n, err := w.claim(ctx, q)
	if err != nil {
		return 0, err
	}
	if age, err := q.OldestOpenAge(ctx); err == nil {
		w.m.oldestPendingAge.Set(age)
	}
	if time.Since(w.lastPurge) > time.Minute {
		w.lastPurge = time.Now()
		if n, err := Reseal(ctx, q, w.cfg.SecretKeys, purgeBatch); err != nil {
			w.log.WarnContext(ctx, "reseal webhook signing secrets", "err", err)
		} else if n > 0 {
			w.log.InfoContext(ctx, "resealed webhook signing secrets with the current key", "count", n)
		}
		if n, err := PurgeEnded(ctx, q, w.cfg, purgeBatch); err != nil {
			w.log.WarnContext(ctx, "purge ended webhook intents", "err", err)
		} else if n > 0 {
			w.log.InfoContext(ctx, "purged ended webhook intents", "count", n)
		}
	}
	return n, nil
}

// claim claims due intents into the free slots and starts their deliveries.
func (w *Worker) claim(ctx context.Context, q *webhookdb.Queries) (int, error) {
	free := w.free()
	if free <= 0 {
		return 0, nil
	}
	owner, err := uuid.NewV7()
	if err != nil {
		return 0, fmt.Errorf("new lease token: %w", err)
	}
	tenants, rooms := w.rooms()
	rows, err := q.ClaimIntents(ctx, webhookdb.ClaimIntentsParams{
		Owner: owner, LeaseSeconds: w.cfg.LeaseTTL.Seconds(), Tenants: tenants, Rooms: rooms,
		ScanRows: claimScan, TenantRoom: int32(w.cfg.TenantConcurrency), MaxRows: int32(free)})
	if err != nil {
		return 0, fmt.Errorf("claim webhook intents: %w", err)
	}
	w.mu.Lock()
	for _, row := range rows {
		w.busy++
		w.inFlight[row.TenantID]++
	}
	w.mu.Unlock()
	for _, row := range rows {
		if row.Attempts == 1 {
			w.m.commitToFirstAttempt.Observe(row.AgeSeconds)
		}
		w.wg.Add(1)
		go func() {
			defer w.wg.Done()
			defer w.release(row.TenantID)
			w.attempt(ctx, owner, row)
		}()
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

// Reseal seals up to limit stored secrets that are not sealed with keys'
// current key (plaintext ones, those of an older key) with it, so an old
// key can be dropped once none is left under it. Nil keys: nothing. The
// worker runs it once a minute.
func Reseal(ctx context.Context, q *webhookdb.Queries, keys *SecretKeys, limit int32) (int, error) {
	if keys == nil {
		return 0, nil
	}
	rows, err := q.SecretsToReseal(ctx, webhookdb.SecretsToResealParams{CurrentPrefix: keys.currentPrefix(), MaxRows: limit})
	if err != nil {
		return 0, fmt.Errorf("read secrets to reseal: %w", err)
	}
	n := 0
	var errs []error
	for _, r := range rows {
		secret, err := keys.Open(r.EndpointID, r.Secret)
		if err != nil { // a key missing: the others are resealed all the same
			errs = append(errs, fmt.Errorf("endpoint %s: %w", r.EndpointID, err))
			continue
		}
		sealed, err := keys.Seal(r.EndpointID, secret)
		if err != nil {
			return n, fmt.Errorf("endpoint %s: %w", r.EndpointID, err)
		}
		done, err := q.ResealSecret(ctx, webhookdb.ResealSecretParams{EndpointID: r.EndpointID, Old: r.Secret, New: sealed})
		if err != nil {
			return n, fmt.Errorf("reseal the secret of endpoint %s: %w", r.EndpointID, err)
		}
		n += int(done)
	}
	return n, errors.Join(errs...)
}

// release frees the slot of a delivery of tenant and wakes Run.
func (w *Worker) release(tenant string) {
	w.mu.Lock()
	w.busy--
	if w.inFlight[tenant]--; w.inFlight[tenant] <= 0 {
		delete(w.inFlight, tenant)
	}
	w.mu.Unlock()
	select {
	case w.freed <- struct{}{}:
	default:
	}
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
	var res result
	if secret, err := w.cfg.SecretKeys.Open(row.EndpointID, row.Secret); err != nil {
		// A configuration to fix (a key missing): retried, nothing sent.
		res = result{outcome: outcomeRetry, err: err.Error()}
	} else {
		res = deliver(detached, w.hc, w.cfg.Timeout, row.Url, secret, row.IdempotencyKey, []byte(row.Body), time.Now())
	}
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

package webhook

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/usagebilling/billing/services/invoice/internal/webhook/webhookdb"
)

// Intent is an intent as the operator sees it (no body, no secret).
type Intent struct {
	ID              uuid.UUID
	EndpointID      uuid.UUID
	URL             string
	TenantID        string
	IdempotencyKey  string
	EventID         uuid.UUID
	EventType       string
	Status          string
	Attempts        int32
	CreatedAt       time.Time
	NotBefore       time.Time
	ExpiresAt       time.Time
	FirstAttemptAt  *time.Time
	LastAttemptAt   *time.Time
	LastStatusCode  *int32
	LastError       string
	ResponseRef     string
	FinishedAt      *time.Time
	OperatorRetries int32
}

// Filter selects intents: of one status and tenant when set, after id
// After, at most Limit.
type Filter struct {
	Status, TenantID string
	After            uuid.UUID
	Limit            int32
}

// Stats are the intents' counts by status (each up to 100,000) and the age
// of the oldest one not yet ended.
type Stats struct {
	ByStatus                map[string]int64
	OldestPendingAgeSeconds float64
}

// Retry outcomes.
const (
	RetryRescheduled  = "rescheduled"   // failed or expired, now pending and due
	RetryNotFound     = "not_found"     // no such intent
	RetryNotRetryable = "not_retryable" // pending, leased or accepted, or its endpoint deleted
)

// Store is the operator's access to the intents.
type Store struct {
	pool *pgxpool.Pool
	ttl  time.Duration
}

// NewStore returns the operator's access on pool; a retried intent gets a
// new expiry ttl from the retry.
func NewStore(pool *pgxpool.Pool, ttl time.Duration) *Store { return &Store{pool: pool, ttl: ttl} }

// List reads a page of intents in creation order.
func (s *Store) List(ctx context.Context, f Filter) ([]Intent, error) {
	rows, err := webhookdb.New(s.pool).ListIntents(ctx, webhookdb.ListIntentsParams{
		After: f.After, Status: text(f.Status), TenantID: text(f.TenantID), MaxRows: f.Limit})
	if err != nil {
		return nil, fmt.Errorf("list webhook intents: %w", err)
	}
	out := make([]Intent, len(rows))
	for i, r := range rows {
		out[i] = Intent{ID: r.IntentID, EndpointID: r.EndpointID, URL: r.Url, TenantID: r.TenantID,
			IdempotencyKey: r.IdempotencyKey, EventID: r.EventID, EventType: r.EventType, Status: r.Status,
			Attempts: r.Attempts, CreatedAt: r.CreatedAt.UTC(), NotBefore: r.NotBefore.UTC(), ExpiresAt: r.ExpiresAt.UTC(),
			FirstAttemptAt: utc(r.FirstAttemptAt), LastAttemptAt: utc(r.LastAttemptAt), LastError: r.LastError.String,
			ResponseRef: r.ResponseRef.String, FinishedAt: utc(r.FinishedAt), OperatorRetries: r.OperatorRetries}
		if r.LastStatusCode.Valid {
			out[i].LastStatusCode = &r.LastStatusCode.Int32
		}
	}
	return out, nil
}

// Stats reads the counts by status and the oldest open intent's age.
func (s *Store) Stats(ctx context.Context) (Stats, error) {
	q := webhookdb.New(s.pool)
	rows, err := q.CountByStatus(ctx)
	if err != nil {
		return Stats{}, fmt.Errorf("count webhook intents: %w", err)
	}
	out := Stats{ByStatus: make(map[string]int64, len(rows))}
	for _, r := range rows {
		out.ByStatus[r.Status] = r.Count
	}
	if out.OldestPendingAgeSeconds, err = q.OldestOpenAge(ctx); err != nil {
		return Stats{}, fmt.Errorf("read the oldest webhook intent: %w", err)
	}
	return out, nil
}

// Retry makes a failed or expired intent pending again, due now, with a new
// expiry: the next delivery carries the same Webhook-Id. It returns the
// outcome and the intent's status after it. Asking twice is safe: the
// second finds it pending (not_retryable).
func (s *Store) Retry(ctx context.Context, id uuid.UUID) (outcome, status string, err error) {
	q := webhookdb.New(s.pool)
	n, err := q.RetryIntent(ctx, webhookdb.RetryIntentParams{TtlSeconds: s.ttl.Seconds(), IntentID: id})
	if err != nil {
		return "", "", fmt.Errorf("retry webhook intent %s: %w", id, err)
	}
	if n == 1 { // the status it set: a worker may lease it the next moment
		return RetryRescheduled, StatusPending, nil
	}
	st, err := q.GetIntentStatus(ctx, id)
	switch {
	case isNoRows(err):
		return RetryNotFound, "", nil
	case err != nil:
		return "", "", fmt.Errorf("read webhook intent %s: %w", id, err)
	default:
		return RetryNotRetryable, st.Status, nil
	}
}

// Status reads an intent's status; found is false when there is no such
// intent.
func (s *Store) Status(ctx context.Context, id uuid.UUID) (status string, found bool, err error) {
	st, err := webhookdb.New(s.pool).GetIntentStatus(ctx, id)
	switch {
	case isNoRows(err):
		return "", false, nil
	case err != nil:
		return "", false, fmt.Errorf("read webhook intent %s: %w", id, err)
	default:
		return st.Status, true, nil
	}
}

func isNoRows(err error) bool { return errors.Is(err, pgx.ErrNoRows) }

func text(s string) pgtype.Text { return pgtype.Text{String: s, Valid: s != ""} }

func utc(t *time.Time) *time.Time {
	if t == nil {
		return nil
	}
	u := t.UTC()
	return &u
}

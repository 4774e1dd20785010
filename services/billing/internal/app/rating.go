package app

import (
	"context"
	"errors"
	"fmt"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/usagebilling/billing/pkg/envelope"
	"github.com/usagebilling/billing/pkg/events"
	"github.com/usagebilling/billing/pkg/inbox"
	"github.com/usagebilling/billing/pkg/outbox"
	"github.com/usagebilling/billing/services/billing/internal/db"
	"github.com/usagebilling/billing/services/billing/internal/domain"
)

// rateLockKey is the transaction-scoped advisory lock every rating statement
// takes before it locks a period row. A batch of usage events locks the
// period rows of its tenants in the order the batch brings them, and batches
// of different partitions run concurrently: without one lock in front of
// them, two batches that hold (A, P) and (B, P) and each want the other's
// would deadlock. Rating transactions therefore run one after another;
// adjustments and closes lock a single period row and do not take it.
const rateLockKey int64 = 0x62696c6c5f726174 // "bill_rat"

// maxRatingAttempts bounds how often a rating follows a period that started
// closing while it was being rated (each close moves it one period on).
const maxRatingAttempts = 4

// OnPriceActivated replicates a price version as price evidence. A replay of
// a version changes nothing. Applying it provides the aggregate key
// price/<meter>.<currency>@version, which wakes usage deferred for it.
func (s *Service) OnPriceActivated(ctx context.Context, tx pgx.Tx, d *envelope.Decoded) (inbox.Outcome, error) {
	p, ok := d.Payload.(events.PriceActivated)
	if !ok {
		return inbox.Outcome{}, inbox.Permanent("unexpected_payload", fmt.Errorf("payload is %T", d.Payload))
	}
	e := d.Envelope
	if e.AggregateType != events.AggregatePrice || e.AggregateID != events.PriceSeriesID(p.MeterCode, p.Currency) ||
		e.AggregateVersion != p.Version {
		return inbox.Outcome{}, inbox.Permanent("aggregate_mismatch", fmt.Errorf(
			"PriceActivated of %s v%d is on aggregate %s/%s v%d", events.PriceSeriesID(p.MeterCode, p.Currency),
			p.Version, e.AggregateType, e.AggregateID, e.AggregateVersion))
	}
	_, err := db.New(tx).InsertPriceEvidence(ctx, db.InsertPriceEvidenceParams{
		TenantID: e.TenantID, MeterCode: p.MeterCode, Currency: p.Currency, Version: p.Version,
		UnitPrice: p.UnitPrice, EffectiveAt: p.EffectiveAt, PriceID: p.PriceID, EventID: e.EventID,
	})
	if err != nil {
		return inbox.Outcome{}, fmt.Errorf("insert price evidence: %w", err)
	}
	return inbox.Outcome{}, nil
}

// OnUsageAccepted rates one usage fact: exactly one charge per usage event,
// at the price version the usage event names, from billing's own evidence
// (deferred until that version is here), into the period of its occurrence
// or, when that period is closing or closed, the earliest open period after
// it (late). The charge is the next version of its period's aggregate and
// ChargeRated is appended with it. Two statements in the common case: rate
// (one statement, see RateUsage) and append.
func (s *Service) OnUsageAccepted(ctx context.Context, tx pgx.Tx, d *envelope.Decoded) (inbox.Outcome, error) {
	u, ok := d.Payload.(events.UsageAccepted)
	if !ok {
		return inbox.Outcome{}, inbox.Permanent("unexpected_payload", fmt.Errorf("payload is %T", d.Payload))
	}
	in := d.Envelope
	if in.AggregateType != events.AggregateUsage || in.AggregateID != u.UsageID.String() {
		return inbox.Outcome{}, inbox.Permanent("aggregate_mismatch", fmt.Errorf(
			"UsageAccepted of usage %s is on aggregate %s/%s", u.UsageID, in.AggregateType, in.AggregateID))
	}
	chargeID, err := uuid.NewV7()
	if err != nil {
		return inbox.Outcome{}, fmt.Errorf("new charge id: %w", err)
	}
	// The charge row records the id of the event it emits, and the event's
	// version is only known once the row is written: the id is made first
	// and given to the envelope.
	eventID, err := uuid.NewV7()
	if err != nil {
		return inbox.Outcome{}, fmt.Errorf("new event id: %w", err)
	}
	q := db.New(tx)
	occurred := events.Period(u.OccurredAt)
	period, late := occurred, false
	for attempt := 1; ; attempt++ {
		row, err := q.RateUsage(ctx, db.RateUsageParams{
			LockKey: rateLockKey, TenantID: in.TenantID, MeterCode: u.MeterCode, Currency: u.Currency,
			PriceVersion: u.PriceVersion, Period: period, ChargeID: chargeID, EventID: eventID,
			UsageEventID: in.EventID, UsageID: u.UsageID, Quantity: u.Quantity, Late: late, OccurredAt: u.OccurredAt,
		})
		if errors.Is(err, pgx.ErrNoRows) {
			return inbox.Outcome{}, inbox.DeferUntil(inbox.AggregateKey(in.TenantID, events.AggregatePrice,
				events.PriceSeriesID(u.MeterCode, u.Currency), u.PriceVersion))
		}
		if err != nil {
			return inbox.Outcome{}, fmt.Errorf("rate usage event %s: %w", in.EventID, err)
		}
		if row.AggregateVersion.Valid {
			charge := events.ChargeRated{
				ChargeID: chargeID, UsageEventID: in.EventID, UsageID: u.UsageID, MeterCode: u.MeterCode,
				Currency: u.Currency, Quantity: u.Quantity, UnitPrice: row.UnitPrice, PriceVersion: u.PriceVersion,
				Amount: domain.Amount(u.Quantity, row.UnitPrice), Period: period, Late: late, OccurredAt: u.OccurredAt,
			}
			env, err := newEvent(events.TypeChargeRated, in.TenantID, period, row.AggregateVersion.Int64, s.now(),
				in.CorrelationID, in.EventID.String(), charge)
			if err != nil {
				return inbox.Outcome{}, err
			}
			env.EventID = eventID
			if err := outbox.Append(ctx, tx, events.TopicBilling, env); err != nil {
				return inbox.Outcome{}, err
			}
			return inbox.Outcome{}, nil
		}
		// The period is closing or closed: nothing was written. Rate into
		// the earliest open period after the occurrence's.
		if attempt == maxRatingAttempts {
			return inbox.Outcome{}, fmt.Errorf("rate usage event %s: periods kept closing under it (now at %s)", in.EventID, period)
		}
		notOpen, err := q.NonOpenPeriodsFrom(ctx, db.NonOpenPeriodsFromParams{TenantID: in.TenantID, Period: occurred})
		if err != nil {
			return inbox.Outcome{}, fmt.Errorf("find open period after %s: %w", occurred, err)
		}
		period, late = domain.RatingPeriod(occurred, notOpen)
	}
}

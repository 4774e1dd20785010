package app

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/shopspring/decimal"

	"github.com/usagebilling/billing/pkg/envelope"
	"github.com/usagebilling/billing/pkg/events"
	"github.com/usagebilling/billing/pkg/inbox"
	"github.com/usagebilling/billing/services/billing/internal/db"
	"github.com/usagebilling/billing/services/billing/internal/domain"
)

// maxRatingAttempts bounds how often a rating follows a period that started
// closing while it was being rated (each close moves it one period on).
const maxRatingAttempts = 4

// OnPriceActivated replicates a price version as price evidence. A replay of
// a version changes nothing. Applying it provides the aggregate key
// price/<meter>.<currency>@version, which wakes usage deferred for it.
func (s *Service) OnPriceActivated(ctx context.Context, tx pgx.Tx, d *envelope.Decoded, p events.PriceActivated) (inbox.Outcome, error) {
	e := d.Envelope
	if e.AggregateType != events.AggregatePrice || e.AggregateID != events.PriceSeriesID(p.MeterCode, p.Currency) ||
		e.AggregateVersion != p.Version {
		return inbox.Outcome{}, inbox.Permanent(inbox.ReasonAggregateMismatch, fmt.Errorf(
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

// OnUsagesAccepted rates usage facts as OnUsageAccepted does each, in one
// round trip for all of them in the common case: the shared locks of their
// occurrence periods, taken in key order, then one statement that reads each
// fact's price evidence and period status and inserts the charges of the
// facts whose period is open. A fact whose price version is missing is
// deferred (its item error); one whose period is closing or closed is rated
// alone by OnUsageAccepted, late into the next open period.
func (s *Service) OnUsagesAccepted(ctx context.Context, tx pgx.Tx, ds []*envelope.Decoded, us []events.UsageAccepted) ([]inbox.Outcome, error) {
	n := len(ds)
	arg := db.RateUsagesParams{
		TenantIds: make([]string, n), MeterCodes: make([]string, n), Currencies: make([]string, n),
		PriceVersions: make([]int64, n), Periods: make([]string, n), ChargeIds: make([]uuid.UUID, n),
		EventIds: make([]uuid.UUID, n), UsageEventIds: make([]uuid.UUID, n), UsageIds: make([]uuid.UUID, n),
		Quantities: make([]decimal.Decimal, n), OccurredAts: make([]time.Time, n),
	}
	for i, d := range ds {
		u := us[i]
		in := &d.Envelope
		if in.AggregateType != events.AggregateUsage || in.AggregateID != u.UsageID.String() {
			return nil, inbox.ItemError(i, inbox.Permanent(inbox.ReasonAggregateMismatch, fmt.Errorf(
				"UsageAccepted of usage %s is on aggregate %s/%s", u.UsageID, in.AggregateType, in.AggregateID)))
		}
		chargeID, err := uuid.NewV7()
		if err != nil {
			return nil, fmt.Errorf("new charge id: %w", err)
		}
		eventID, err := uuid.NewV7()
		if err != nil {
			return nil, fmt.Errorf("new event id: %w", err)
		}
		arg.TenantIds[i], arg.MeterCodes[i], arg.Currencies[i] = in.TenantID, u.MeterCode, u.Currency
		arg.PriceVersions[i], arg.Periods[i], arg.ChargeIds[i] = u.PriceVersion, events.Period(u.OccurredAt), chargeID
		arg.EventIds[i], arg.UsageEventIds[i], arg.UsageIds[i] = eventID, in.EventID, u.UsageID
		arg.Quantities[i], arg.OccurredAts[i] = u.Quantity, u.OccurredAt
	}
	rows, err := db.RateUsagesLocked(ctx, tx, arg)
	if err != nil {
		return nil, fmt.Errorf("rate %d usage events: %w", n, err)
	}
	if len(rows) != n {
		return nil, fmt.Errorf("rate %d usage events: %d results", n, len(rows))
	}
	outs := make([]inbox.Outcome, n)
	for i, row := range rows {
		in, u := &ds[i].Envelope, us[i]
		if !row.Priced {
			return nil, inbox.ItemError(i, inbox.DeferUntil(inbox.AggregateKey(in.TenantID, events.AggregatePrice,
				events.PriceSeriesID(u.MeterCode, u.Currency), u.PriceVersion)))
		}
		switch row.Status {
		case domain.StatusOpen:
			env, err := s.chargeRated(in, u, arg.ChargeIds[i], arg.EventIds[i], row.UnitPrice, arg.Periods[i], false)
			if err != nil {
				return nil, err
			}
			outs[i] = inbox.Outcome{Publish: []inbox.Publication{{Topic: events.TopicBilling, Event: env}}}
		case domain.StatusClosing, domain.StatusClosed:
			// Nothing was written for it: rated alone, late.
			out, err := s.OnUsageAccepted(ctx, tx, ds[i], u)
			if err != nil {
				return nil, inbox.ItemError(i, err)
			}
			outs[i] = out
		default:
			return nil, fmt.Errorf("%w: period %s of %s has status %q", ErrInternal, arg.Periods[i], in.TenantID, row.Status)
		}
	}
	return outs, nil
}

// chargeRated is the ChargeRated of a charge rated from usage event in.
func (s *Service) chargeRated(in *envelope.Envelope, u events.UsageAccepted, chargeID, eventID uuid.UUID,
	unitPrice decimal.Decimal, period string, late bool) (envelope.Envelope, error) {
	charge := events.ChargeRated{
		ChargeID: chargeID, UsageEventID: in.EventID, UsageID: u.UsageID, MeterCode: u.MeterCode,
		Currency: u.Currency, Quantity: u.Quantity, UnitPrice: unitPrice, PriceVersion: u.PriceVersion,
		Amount: domain.Amount(u.Quantity, unitPrice), Period: period, Late: late, OccurredAt: u.OccurredAt,
	}
	env, err := newEvent(events.TypeChargeRated, in.TenantID, events.AggregateCharge, chargeID.String(),
		s.now(), in.CorrelationID, in, charge)
	if err != nil {
		return envelope.Envelope{}, err
	}
	env.EventID = eventID
	return env, nil
}

// OnUsageAccepted rates one usage fact: exactly one charge per usage event,
// at the price version the usage event names, from billing's own evidence
// (deferred until that version is here), into the period of its occurrence
// or, when that period is closing or closed, the earliest open period after
// it (late). The charge is its own aggregate (charge/<id>, version 1) and
// ChargeRated is appended with it: nothing a charge writes is shared with
// another charge, so one tenant's usage is rated by every consumer at once.
// A period's close is kept consistent by the period's advisory lock, held
// shared here and exclusively by the close (see ClosePeriod). One round
// trip in the common case: lock and rate, pipelined; ChargeRated is appended
// by the inbox with the run's decisions (inbox.Outcome.Publish).
func (s *Service) OnUsageAccepted(ctx context.Context, tx pgx.Tx, d *envelope.Decoded, u events.UsageAccepted) (inbox.Outcome, error) {
	in := d.Envelope
	if in.AggregateType != events.AggregateUsage || in.AggregateID != u.UsageID.String() {
		return inbox.Outcome{}, inbox.Permanent(inbox.ReasonAggregateMismatch, fmt.Errorf(
			"UsageAccepted of usage %s is on aggregate %s/%s", u.UsageID, in.AggregateType, in.AggregateID))
	}
	chargeID, err := uuid.NewV7()
	if err != nil {
		return inbox.Outcome{}, fmt.Errorf("new charge id: %w", err)
	}
	// The charge row records the id of the event it emits: the id is made
	// first and given to the envelope.
	eventID, err := uuid.NewV7()
	if err != nil {
		return inbox.Outcome{}, fmt.Errorf("new event id: %w", err)
	}
	occurred := events.Period(u.OccurredAt)
	period, late := occurred, false
	for attempt := 1; ; attempt++ {
		row, err := db.RateUsageLocked(ctx, tx, db.RateUsageParams{
			TenantID: in.TenantID, MeterCode: u.MeterCode, Currency: u.Currency,
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
		switch row.Status {
		case domain.StatusOpen:
			env, err := s.chargeRated(&in, u, chargeID, eventID, row.UnitPrice, period, late)
			if err != nil {
				return inbox.Outcome{}, err
			}
			return inbox.Outcome{Publish: []inbox.Publication{{Topic: events.TopicBilling, Event: env}}}, nil
		case domain.StatusClosing, domain.StatusClosed:
		default:
			return inbox.Outcome{}, fmt.Errorf("%w: period %s of %s has status %q", ErrInternal, period, in.TenantID, row.Status)
		}
		// The period is closing or closed: nothing was written. Rate into
		// the earliest open period after the occurrence's.
		if attempt == maxRatingAttempts {
			return inbox.Outcome{}, fmt.Errorf("rate usage event %s: periods kept closing under it (now at %s)", in.EventID, period)
		}
		notOpen, err := db.New(tx).NonOpenPeriodsFrom(ctx, db.NonOpenPeriodsFromParams{TenantID: in.TenantID, Period: occurred})
		if err != nil {
			return inbox.Outcome{}, fmt.Errorf("find open period after %s: %w", occurred, err)
		}
		period, late = domain.RatingPeriod(occurred, notOpen)
	}
}

package app

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"

	"github.com/usagebilling/billing/pkg/catalog"
	"github.com/usagebilling/billing/pkg/envelope"
	"github.com/usagebilling/billing/pkg/events"
	"github.com/usagebilling/billing/services/meter/internal/db"
	"github.com/usagebilling/billing/services/meter/internal/domain"
)

// Meter is a catalog meter as the API shows it. EventID is absent while the
// MeterDefined of a meter the catalog migration implied is not yet
// published (PublishPendingMeters).
type Meter struct {
	Code          string     `json:"code"`
	Name          string     `json:"name"`
	Aggregation   string     `json:"aggregation"`
	ValueProperty string     `json:"valueProperty,omitempty"`
	Dimensions    []string   `json:"dimensions"`
	EventType     string     `json:"eventType"`
	Implied       bool       `json:"implied,omitempty"`
	DefinedAt     time.Time  `json:"definedAt"`
	EventID       *uuid.UUID `json:"eventId,omitempty"`
}

// Definition is the meter's catalog definition.
func (m Meter) Definition() catalog.Meter {
	return catalog.Meter{Code: m.Code, Name: m.Name, Aggregation: m.Aggregation, ValueProperty: m.ValueProperty,
		Dimensions: m.Dimensions, EventType: m.EventType}
}

func meterOf(r db.Meter) Meter {
	dims := r.Dimensions
	if dims == nil {
		dims = []string{}
	}
	return Meter{Code: r.Code, Name: r.Name, Aggregation: r.Aggregation, ValueProperty: r.ValueProperty.String,
		Dimensions: dims, EventType: r.EventType, Implied: r.Implied, DefinedAt: r.DefinedAt.UTC(), EventID: r.EventID}
}

// DefineMeter is the command to define a catalog meter.
type DefineMeter struct {
	// Meter is the definition, valid and normalized (domain.ParseMeter).
	Meter         catalog.Meter
	CorrelationID string
	// Actor is the catalog-admin who sent it, recorded in the row and the
	// MeterDefined; required.
	Actor string
}

// DefineMeter defines a meter in tx and publishes its MeterDefined in it,
// returning the meter and true. The same definition of a code already
// defined (also by an implied meter) returns the meter as first defined
// and false; another definition of it is refused (meter_exists), and so is
// an eventType that feeds another meter (event_type_taken), with nothing
// written.
func (a *App) DefineMeter(ctx context.Context, tx pgx.Tx, cmd DefineMeter) (Meter, bool, error) {
	if cmd.Actor == "" {
		return Meter{}, false, ErrNoActor
	}
	m := cmd.Meter
	at := domain.Instant(a.now())
	env, row, inserted, err := a.insertMeter(ctx, tx, m, false, at, cmd.Actor, cmd.CorrelationID)
	if err != nil {
		return Meter{}, false, err
	}
	if inserted {
		if err := events.Append(ctx, tx, env); err != nil {
			return Meter{}, false, err
		}
		return meterOf(row), true, nil
	}
	q := db.New(tx)
	existing, err := q.GetMeter(ctx, m.Code)
	switch {
	case err == nil:
		if !domain.SameDefinition(meterOf(existing).Definition(), m) {
			return Meter{}, false, domain.MeterExists(m.Code)
		}
		return meterOf(existing), false, nil
	case !errors.Is(err, pgx.ErrNoRows):
		return Meter{}, false, fmt.Errorf("read meter %s: %w", m.Code, err)
	}
	by, err := q.MeterOfEventType(ctx, m.EventType)
	if err != nil {
		return Meter{}, false, fmt.Errorf("read the meter of event type %q: %w", m.EventType, err)
	}
	return Meter{}, false, domain.EventTypeTaken(m.EventType, by)
}

// insertMeter writes m with its MeterDefined's event id, unless its code or
// its eventType is taken (inserted false, nothing written). The caller
// appends env.
func (a *App) insertMeter(ctx context.Context, tx pgx.Tx, m catalog.Meter, implied bool, at time.Time, actor,
	correlationID string) (env envelope.Envelope, row db.Meter, inserted bool, err error) {
	env, err = events.New(events.MeterDefined{
		Code: m.Code, Name: m.Name, Aggregation: m.Aggregation, ValueProperty: m.ValueProperty,
		Dimensions: m.Dimensions, EventType: m.EventType, DefinedAt: at, Implied: implied, Actor: actor,
	}, events.Meta{
		Producer: Producer, TenantID: events.CatalogTenant, AggregateID: m.Code, OccurredAt: at, CorrelationID: correlationID,
	})
	if err != nil {
		return envelope.Envelope{}, db.Meter{}, false, err
	}
	dims := m.Dimensions
	if dims == nil {
		dims = []string{}
	}
	row = db.Meter{
		Code: m.Code, Name: m.Name, Aggregation: m.Aggregation, ValueProperty: optText(m.ValueProperty),
		Dimensions: dims, EventType: m.EventType, Implied: implied, DefinedAt: at, Actor: optText(actor),
		EventID: &env.EventID,
	}
	n, err := db.New(tx).InsertMeter(ctx, db.InsertMeterParams(row))
	if err != nil {
		return envelope.Envelope{}, db.Meter{}, false, fmt.Errorf("insert meter %s: %w", m.Code, err)
	}
	return env, row, n == 1, nil
}

func optText(s string) pgtype.Text { return pgtype.Text{String: s, Valid: s != ""} }

// maxImpliedAttempts bounds the eventTypes an implied meter tries
// (domain.ImpliedEventType); past it the catalog is being attacked, not
// used.
const maxImpliedAttempts = 20

// meterFor returns the catalog meter of a price's meter code, defining the
// implied one (a sum meter without dimensions) when the code is not in the
// catalog: its MeterDefined is returned to be appended in the activation's
// transaction (nil when the meter was there). When the code's eventType
// feeds another meter, the implied one takes the first free
// domain.ImpliedEventType.
func (a *App) meterFor(ctx context.Context, tx pgx.Tx, code string, at time.Time, actor, correlationID string) (catalog.Meter, *envelope.Envelope, error) {
	q := db.New(tx)
	for attempt := range maxImpliedAttempts {
		existing, err := q.GetMeter(ctx, code)
		if err == nil {
			return meterOf(existing).Definition(), nil, nil
		}
		if !errors.Is(err, pgx.ErrNoRows) {
			return catalog.Meter{}, nil, fmt.Errorf("read meter %s: %w", code, err)
		}
		m := domain.ImpliedMeter(code, attempt)
		env, _, inserted, err := a.insertMeter(ctx, tx, m, true, at, actor, correlationID)
		if err != nil {
			return catalog.Meter{}, nil, err
		}
		if inserted {
			return m, &env, nil
		}
		// The code was defined meanwhile (read again), or the eventType
		// feeds another meter (try the next).
	}
	return catalog.Meter{}, nil, fmt.Errorf("imply meter %s: no free event type in %d attempts", code, maxImpliedAttempts)
}

// GetMeter reads one catalog meter: domain.MeterNotFound when there is none.
func (a *App) GetMeter(ctx context.Context, code string) (Meter, error) {
	r, err := db.New(a.pool).GetMeter(ctx, code)
	if errors.Is(err, pgx.ErrNoRows) {
		return Meter{}, domain.MeterNotFound(code)
	}
	if err != nil {
		return Meter{}, fmt.Errorf("read meter %s: %w", code, err)
	}
	return meterOf(r), nil
}

// ListMeters reads at most limit meters after the code after ("": from the
// first), in code order.
func (a *App) ListMeters(ctx context.Context, after string, limit int32) ([]Meter, error) {
	rows, err := db.New(a.pool).ListMeters(ctx, db.ListMetersParams{AfterCode: after, MaxRows: limit})
	if err != nil {
		return nil, fmt.Errorf("list meters: %w", err)
	}
	out := make([]Meter, len(rows))
	for i, r := range rows {
		out[i] = meterOf(r)
	}
	return out, nil
}

// pendingMeterBatch bounds the meters one PublishPendingMeters transaction
// publishes.
const pendingMeterBatch = 500

// PublishPendingMeters publishes the MeterDefined of every meter defined
// without one, and returns how many it published. Those are the meters the
// catalog migration (0004) implied from the prices activated before it: a
// migration cannot build envelopes (UUIDv7 ids, digests), so it defines them
// unpublished and the service's background loop (Run) publishes them, each
// with its row in one transaction, a batch at a time. Every other meter is
// published in the transaction that defines it (DefineMeter, and the
// activation that implies one).
func (a *App) PublishPendingMeters(ctx context.Context) (int, error) {
	total := 0
	for {
		n, err := a.publishPendingMeters(ctx)
		total += n
		if err != nil || n < pendingMeterBatch {
			return total, err
		}
	}
}

func (a *App) publishPendingMeters(ctx context.Context) (int, error) {
	n := 0
	err := pgx.BeginFunc(ctx, a.pool, func(tx pgx.Tx) error {
		q := db.New(tx)
		rows, err := q.LockUnpublishedMeters(ctx, pendingMeterBatch)
		if err != nil {
			return fmt.Errorf("lock unpublished meters: %w", err)
		}
		envs := make([]envelope.Envelope, 0, len(rows))
		for _, r := range rows {
			m := meterOf(r)
			env, err := events.New(events.MeterDefined{
				Code: m.Code, Name: m.Name, Aggregation: m.Aggregation, ValueProperty: m.ValueProperty,
				Dimensions: m.Dimensions, EventType: m.EventType, DefinedAt: m.DefinedAt, Implied: m.Implied,
				Actor: r.Actor.String,
			}, events.Meta{Producer: Producer, TenantID: events.CatalogTenant, AggregateID: m.Code, OccurredAt: m.DefinedAt})
			if err != nil {
				return err
			}
			set, err := q.SetMeterEventID(ctx, db.SetMeterEventIDParams{EventID: &env.EventID, Code: m.Code})
			if err != nil {
				return fmt.Errorf("record the MeterDefined of %s: %w", m.Code, err)
			}
			if set != 1 {
				return fmt.Errorf("record the MeterDefined of %s: published meanwhile", m.Code)
			}
			envs = append(envs, env)
		}
		n = len(envs)
		if n == 0 {
			return nil
		}
		return events.Append(ctx, tx, envs...)
	})
	if err != nil {
		return 0, err
	}
	return n, nil
}

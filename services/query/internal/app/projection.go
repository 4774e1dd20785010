package app

import (
	"context"
	"fmt"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/shopspring/decimal"

	"github.com/usagebilling/billing/pkg/envelope"
	"github.com/usagebilling/billing/pkg/inbox"
	"github.com/usagebilling/billing/services/query/internal/db"
	"github.com/usagebilling/billing/services/query/internal/domain"
)

// absorb applies events of payload type T without effect.
func absorb[T any](_ context.Context, _ pgx.Tx, ds []*envelope.Decoded, _ []T) ([]inbox.Outcome, error) {
	return make([]inbox.Outcome, len(ds)), nil
}

// project records the events and their summary deltas in one statement. The
// inbox dedups by event id; an event projected anyway (its projected_event
// row exists) is a duplicate. Every projected payload type T takes the same
// path (domain.Project tells them apart).
func project[T any](ctx context.Context, tx pgx.Tx, ds []*envelope.Decoded, _ []T) ([]inbox.Outcome, error) {
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
	if err := projectFacts(ctx, tx, ds); err != nil {
		return nil, err
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

// Package invoicetest helps the invoice service's tests: a migrated database
// template, billing events built the way billing builds them (envelope.New,
// gap-free billing_period versions), and deciding them through the real
// inbox path (Marshal, registry decode, inbox.Decide in a transaction).
package invoicetest

import (
	"context"
	"log/slog"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/shopspring/decimal"

	"github.com/usagebilling/billing/pkg/envelope"
	"github.com/usagebilling/billing/pkg/events"
	"github.com/usagebilling/billing/pkg/inbox"
	"github.com/usagebilling/billing/pkg/pgmigrate"
	"github.com/usagebilling/billing/pkg/pgtest"
	"github.com/usagebilling/billing/pkg/service"
	"github.com/usagebilling/billing/services/invoice/internal/app"
	"github.com/usagebilling/billing/services/invoice/migrations"
)

// Spec is the invoice service's spec without its build (enough for Sets).
var Spec = service.Spec{Name: "invoice", Migrations: []pgmigrate.Set{migrations.Set}}

// Template is the invoice database, migrated once per test process.
var Template = pgtest.Template{
	Name: "invoice",
	Migrate: func(_ context.Context, databaseURL string) error {
		return pgmigrate.Up(databaseURL, Spec.Sets()...)
	},
}

// D parses a decimal.
func D(s string) decimal.Decimal { return decimal.RequireFromString(s) }

// Period builds the events of one tenant's billing period, numbering them as
// billing does: every charge, adjustment and close is the next version of
// aggregate billing_period/<period>.
type Period struct {
	t       testing.TB
	Tenant  string
	Period  string
	version int64
	// Counted are the charges and adjustments built so far, and their
	// totals, for Close.
	charges, adjustments int64
	totals               map[string]decimal.Decimal
}

// NewPeriod starts the events of tenant's period.
func NewPeriod(t testing.TB, tenant, period string) *Period {
	return &Period{t: t, Tenant: tenant, Period: period, totals: map[string]decimal.Decimal{}}
}

func (p *Period) next(eventType string, payload any) envelope.Envelope {
	p.t.Helper()
	p.version++
	e, err := envelope.New(envelope.Meta{
		EventType: eventType, SchemaVersion: 1, TenantID: p.Tenant,
		AggregateType: events.AggregateBillingPeriod, AggregateID: p.Period, AggregateVersion: p.version,
		OccurredAt: time.Now(), Producer: "billing", CorrelationID: "test-" + p.Tenant,
	}, payload)
	if err != nil {
		p.t.Fatalf("build %s: %v", eventType, err)
	}
	return e
}

// Charge builds a ChargeRated of quantity x unitPrice in currency.
func (p *Period) Charge(currency, quantity, unitPrice string) envelope.Envelope {
	p.t.Helper()
	q, u := D(quantity), D(unitPrice)
	amount := q.Mul(u)
	p.charges++
	p.totals[currency] = p.totals[currency].Add(amount)
	return p.next(events.TypeChargeRated, events.ChargeRated{
		ChargeID: uuid.New(), UsageEventID: uuid.New(), UsageID: uuid.New(), MeterCode: "api_calls",
		Currency: currency, Quantity: q, UnitPrice: u, PriceVersion: 1, Amount: amount,
		Period: p.Period, OccurredAt: time.Now().UTC(),
	})
}

// Adjustment builds an AdjustmentPosted of amount in currency. Before Close
// it counts towards the close.
func (p *Period) Adjustment(currency, amount string) envelope.Envelope {
	p.t.Helper()
	a := D(amount)
	p.adjustments++
	p.totals[currency] = p.totals[currency].Add(a)
	return p.next(events.TypeAdjustmentPosted, events.AdjustmentPosted{
		AdjustmentID: uuid.New(), CorrectionOf: uuid.New(), Amount: a, Currency: currency,
		Reason: "test", Period: p.Period,
	})
}

// Close builds the BillingPeriodClosed counting every charge and adjustment
// built so far.
func (p *Period) Close() envelope.Envelope {
	p.t.Helper()
	totals := make(map[string]decimal.Decimal, len(p.totals))
	for c, a := range p.totals {
		totals[c] = a
	}
	return p.CloseWith(p.charges, p.adjustments, totals)
}

// CloseWith builds a BillingPeriodClosed with the given counts and totals.
func (p *Period) CloseWith(charges, adjustments int64, totals map[string]decimal.Decimal) envelope.Envelope {
	p.t.Helper()
	return p.next(events.TypeBillingPeriodClosed, events.BillingPeriodClosed{
		Period: p.Period, ClosedAt: time.Now().UTC(), Charges: charges, Adjustments: adjustments, Totals: totals,
	})
}

// Skip uses up a version without building an event.
func (p *Period) Skip() { p.version++ }

// NewInbox returns an inbox deciding with the invoice service's handlers.
func NewInbox(t testing.TB) *inbox.Inbox {
	t.Helper()
	reg := envelope.NewRegistry()
	events.Register(reg)
	ib, err := inbox.New(reg, app.NewConsumer(discard()).Handlers(), inbox.Options{Service: "invoice"})
	if err != nil {
		t.Fatal(err)
	}
	return ib
}

// Raw marshals envelopes as the relay sends them.
func Raw(t testing.TB, envs ...envelope.Envelope) [][]byte {
	t.Helper()
	out := make([][]byte, len(envs))
	for i, e := range envs {
		b, err := e.Marshal()
		if err != nil {
			t.Fatalf("marshal %s: %v", e.EventType, err)
		}
		out[i] = b
	}
	return out
}

// Decide decides envs in order, as one batch in one transaction, and returns
// the decisions (those of woken deferred events last).
func Decide(t testing.TB, pool *pgxpool.Pool, ib *inbox.Inbox, envs ...envelope.Envelope) []inbox.Decision {
	t.Helper()
	return DecideRaw(t, pool, ib, Raw(t, envs...)...)
}

// DecideRaw is Decide for raw messages.
func DecideRaw(t testing.TB, pool *pgxpool.Pool, ib *inbox.Inbox, raws ...[]byte) []inbox.Decision {
	t.Helper()
	msgs := make([]inbox.Message, len(raws))
	for i, r := range raws {
		msgs[i] = inbox.Message{Raw: r, Topic: events.TopicBilling, Partition: 0, Offset: int64(i)}
	}
	var ds []inbox.Decision
	err := pgx.BeginFunc(context.Background(), pool, func(tx pgx.Tx) error {
		var err error
		ds, err = ib.Decide(context.Background(), tx, msgs)
		return err
	})
	if err != nil {
		t.Fatalf("decide: %v", err)
	}
	return ds
}

// Published returns the events this service appended to its outbox, in order.
func Published(t testing.TB, pool *pgxpool.Pool) []*envelope.Decoded {
	t.Helper()
	rows, err := pool.Query(context.Background(), `SELECT topic, envelope FROM outbox_event ORDER BY id`)
	if err != nil {
		t.Fatalf("read outbox: %v", err)
	}
	defer rows.Close()
	reg := envelope.NewRegistry()
	events.Register(reg)
	var out []*envelope.Decoded
	for rows.Next() {
		var topic string
		var raw []byte
		if err := rows.Scan(&topic, &raw); err != nil {
			t.Fatal(err)
		}
		if topic != events.TopicInvoice {
			t.Fatalf("outbox row on topic %s, want %s", topic, events.TopicInvoice)
		}
		d, err := reg.Decode(raw)
		if err != nil {
			t.Fatalf("decode outbox row: %v", err)
		}
		out = append(out, d)
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

func discard() *slog.Logger { return slog.New(slog.DiscardHandler) }

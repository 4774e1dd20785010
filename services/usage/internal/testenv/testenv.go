// Package testenv gives tests a usage service on a throwaway PostgreSQL
// database with its real wiring (usage.Build), and feeds it price evidence
// the way production does: PriceActivated envelopes decided by the inbox.
package testenv

import (
	"context"
	"log/slog"
	"testing"
	"time"

	"github.com/go-chi/chi/v5"
	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/shopspring/decimal"

	"github.com/usagebilling/billing/pkg/auth/authtest"
	"github.com/usagebilling/billing/pkg/envelope"
	"github.com/usagebilling/billing/pkg/events"
	"github.com/usagebilling/billing/pkg/inbox"
	"github.com/usagebilling/billing/pkg/pgmigrate"
	"github.com/usagebilling/billing/pkg/pgtest"
	"github.com/usagebilling/billing/pkg/service"
	"github.com/usagebilling/billing/services/usage"
)

// Template is the migrated usage database tests clone.
var Template = pgtest.Template{
	Name: "usage",
	Migrate: func(_ context.Context, url string) error {
		return pgmigrate.Up(url, usage.Spec.Sets()...)
	},
}

// Env is a usage service on its own database.
type Env struct {
	Pool     *pgxpool.Pool
	Router   chi.Router
	Inbox    *inbox.Inbox
	Registry *envelope.Registry
}

// New builds the service on a new database.
func New(t testing.TB) *Env {
	t.Helper()
	return NewOn(t, pgtest.NewPool(t, Template))
}

// NewOn builds the service on pool.
func NewOn(t testing.TB, pool *pgxpool.Pool) *Env {
	t.Helper()
	reg := envelope.NewRegistry()
	events.Register(reg)
	log := slog.New(slog.DiscardHandler)
	parts, err := usage.Build(context.Background(), service.Deps{
		Config: service.Config{Name: usage.Spec.Name}, Logger: log, Pool: pool,
		Metrics: prometheus.NewRegistry(), Registry: reg,
	})
	if err != nil {
		t.Fatalf("build usage: %v", err)
	}
	r := chi.NewRouter()
	r.Use(authtest.SignedIn("ingest@acme.example", "ingest"))
	parts.Routes(r)
	ib, err := inbox.New(reg, parts.Handlers, inbox.Options{Service: usage.Spec.Name, Logger: log})
	if err != nil {
		t.Fatalf("new inbox: %v", err)
	}
	return &Env{Pool: pool, Router: r, Inbox: ib, Registry: reg}
}

// Price describes a PriceActivated event.
type Price struct {
	Tenant, Meter, Currency string
	Version                 int64
	UnitPrice               string
	EffectiveAt             time.Time
}

// PriceEvent returns the marshalled PriceActivated envelope the meter
// would publish for p.
func PriceEvent(t testing.TB, p Price) []byte {
	t.Helper()
	e, err := envelope.New(envelope.Meta{
		EventType: events.TypePriceActivated, SchemaVersion: 1, TenantID: p.Tenant,
		AggregateType: events.AggregatePrice, AggregateID: events.PriceSeriesID(p.Meter, p.Currency),
		AggregateVersion: p.Version, OccurredAt: time.Now(), Producer: "meter",
	}, events.PriceActivated{
		PriceID: uuid.Must(uuid.NewV7()), MeterCode: p.Meter, Currency: p.Currency,
		UnitPrice: decimal.RequireFromString(p.UnitPrice), EffectiveAt: p.EffectiveAt, Version: p.Version,
	})
	if err != nil {
		t.Fatalf("build PriceActivated: %v", err)
	}
	raw, err := e.Marshal()
	if err != nil {
		t.Fatalf("marshal PriceActivated: %v", err)
	}
	return raw
}

// Deliver decides raw messages through the inbox in one committed
// transaction, as the consumer does with a batch of one partition.
func (e *Env) Deliver(t testing.TB, raws ...[]byte) []inbox.Decision {
	t.Helper()
	msgs := make([]inbox.Message, len(raws))
	for i, r := range raws {
		msgs[i] = inbox.Message{Raw: r, Topic: events.TopicMeter, Partition: 0, Offset: int64(i)}
	}
	ctx := context.Background()
	var ds []inbox.Decision
	err := pgx.BeginFunc(ctx, e.Pool, func(tx pgx.Tx) error {
		var err error
		ds, err = e.Inbox.Decide(ctx, tx, msgs)
		return err
	})
	if err != nil {
		t.Fatalf("decide: %v", err)
	}
	return ds
}

// ApplyPrices delivers price events and fails unless each is applied.
func (e *Env) ApplyPrices(t testing.TB, ps ...Price) {
	t.Helper()
	raws := make([][]byte, len(ps))
	for i, p := range ps {
		raws[i] = PriceEvent(t, p)
	}
	for i, d := range e.Deliver(t, raws...) {
		if d.Outcome != inbox.OutcomeApplied {
			t.Fatalf("price event %d: %s %s, want applied", i, d.Outcome, d.Reason)
		}
	}
}

// Count runs a count query.
func (e *Env) Count(t testing.TB, sql string, args ...any) int {
	t.Helper()
	var n int
	if err := e.Pool.QueryRow(context.Background(), sql, args...).Scan(&n); err != nil {
		t.Fatalf("%s: %v", sql, err)
	}
	return n
}

// OutboxEvents decodes the outbox rows, in append order.
func (e *Env) OutboxEvents(t testing.TB) []*envelope.Decoded {
	t.Helper()
	rows, err := e.Pool.Query(context.Background(), `SELECT topic, envelope FROM outbox_event ORDER BY id`)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	var out []*envelope.Decoded
	for rows.Next() {
		var topic string
		var raw []byte
		if err := rows.Scan(&topic, &raw); err != nil {
			t.Fatal(err)
		}
		if topic != events.TopicUsage {
			t.Fatalf("outbox topic %s, want %s", topic, events.TopicUsage)
		}
		d, err := e.Registry.Decode(raw)
		if err != nil {
			t.Fatalf("decode outbox envelope: %v", err)
		}
		out = append(out, d)
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

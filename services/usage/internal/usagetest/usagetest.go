// Package usagetest gives tests a usage service on a throwaway PostgreSQL
// database with its real wiring (usage.Build, and the inbox service.NewInbox
// builds for usage.Spec, through package servicetest), and feeds it price
// evidence the way production does: PriceActivated envelopes decided by the
// inbox.
package usagetest

import (
	"context"
	"net/http"
	"testing"
	"time"

	"github.com/go-chi/chi/v5"
	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/shopspring/decimal"

	"github.com/usagebilling/billing/pkg/auth"
	"github.com/usagebilling/billing/pkg/catalog"
	"github.com/usagebilling/billing/pkg/envelope"
	"github.com/usagebilling/billing/pkg/events"
	"github.com/usagebilling/billing/pkg/inbox"
	"github.com/usagebilling/billing/services/usage"
	"github.com/usagebilling/billing/testkit/authtest"
	"github.com/usagebilling/billing/testkit/servicetest"
)

// Template is the migrated usage database tests clone
// (servicetest.Template of usage.Spec).
var Template = servicetest.Template(usage.Spec)

// Env is a usage service on its own database.
type Env struct {
	Pool     *pgxpool.Pool
	Router   chi.Router
	Inbox    *inbox.Inbox
	Registry *envelope.Registry
	routes   func(chi.Router)
}

// New builds the service on a new database.
func New(t testing.TB) *Env {
	t.Helper()
	return NewOn(t, servicetest.NewPool(t, usage.Spec))
}

// NewOn builds the service on pool.
func NewOn(t testing.TB, pool *pgxpool.Pool) *Env {
	t.Helper()
	deps := servicetest.Deps(usage.Spec, pool)
	parts, err := usage.Build(t.Context(), deps)
	if err != nil {
		t.Fatalf("build usage: %v", err)
	}
	r := chi.NewRouter()
	r.Use(authtest.SignedIn("ingest@acme.example", "ingest"))
	parts.Routes(r)
	ib := servicetest.NewInbox(t, usage.Spec, parts)
	return &Env{Pool: pool, Router: r, Inbox: ib, Registry: deps.Registry, routes: parts.Routes}
}

// RouterAs is the service's router with every request carrying claims c,
// as auth.Middleware would put them for a verified token (none when c has
// no subject).
func (e *Env) RouterAs(c auth.Claims) chi.Router {
	r := chi.NewRouter()
	r.Use(func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
			if c.Subject != "" {
				req = req.WithContext(auth.WithClaims(req.Context(), c))
			}
			next.ServeHTTP(w, req)
		})
	})
	e.routes(r)
	return r
}

// MeterEvent returns the marshalled MeterDefined envelope the meter would
// publish for m.
func MeterEvent(t testing.TB, m catalog.Meter) []byte {
	t.Helper()
	m = m.Normalized()
	e, err := envelope.New(envelope.Meta{
		EventType: events.TypeMeterDefined, SchemaVersion: 1, TenantID: events.CatalogTenant,
		AggregateType: events.AggregateMeter, AggregateID: m.Code, AggregateVersion: 1,
		OccurredAt: time.Now(), Producer: "meter",
	}, events.MeterDefined{
		Code: m.Code, Name: m.Name, Aggregation: m.Aggregation, ValueProperty: m.ValueProperty,
		Dimensions: m.Dimensions, EventType: m.EventType, DefinedAt: time.Now(),
	})
	if err != nil {
		t.Fatalf("build MeterDefined: %v", err)
	}
	raw, err := e.Marshal()
	if err != nil {
		t.Fatalf("marshal MeterDefined: %v", err)
	}
	return raw
}

// ApplyMeters delivers MeterDefined events and fails unless each is
// applied.
func (e *Env) ApplyMeters(t testing.TB, ms ...catalog.Meter) {
	t.Helper()
	raws := make([][]byte, len(ms))
	for i, m := range ms {
		raws[i] = MeterEvent(t, m)
	}
	for i, d := range e.Deliver(t, raws...) {
		if d.Outcome != inbox.OutcomeApplied {
			t.Fatalf("meter event %d: %s %s, want applied", i, d.Outcome, d.Reason)
		}
	}
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
	return servicetest.Decide(t, e.Pool, e.Inbox, servicetest.Messages(events.TopicMeter, raws...)...)
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

// OutboxEvents decodes the outbox rows of usage's events, in append order;
// the announcements of quarantines on ops.events.v1 are left out.
func (e *Env) OutboxEvents(t testing.TB) []*envelope.Decoded {
	t.Helper()
	return servicetest.Events(t, usage.Spec, e.Pool, events.TopicUsage)
}

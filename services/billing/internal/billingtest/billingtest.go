// Package billingtest helps billing's tests: a migrated database per test
// and the inbox over billing's handlers, both built from billing.Spec by
// package servicetest as the service builds them, and envelopes of the
// events billing consumes, built and marshalled as their producers do.
package billingtest

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/shopspring/decimal"

	"github.com/usagebilling/billing/pkg/digest"
	"github.com/usagebilling/billing/pkg/envelope"
	"github.com/usagebilling/billing/pkg/events"
	"github.com/usagebilling/billing/pkg/inbox"
	"github.com/usagebilling/billing/pkg/pricing"
	"github.com/usagebilling/billing/pkg/service"
	"github.com/usagebilling/billing/services/billing"
	"github.com/usagebilling/billing/services/billing/internal/app"
	"github.com/usagebilling/billing/testkit/servicetest"
)

// Template is billing's migrated template database (servicetest.Template
// of billing.Spec).
var Template = servicetest.Template(billing.Spec)

// NewPool returns a pool on a fresh, migrated database.
func NewPool(t testing.TB) *pgxpool.Pool {
	t.Helper()
	return servicetest.NewPool(t, billing.Spec)
}

// NewPoolConns is NewPool with at most maxConns connections, for tests that
// run more transactions at once than the default pool size allows.
func NewPoolConns(t testing.TB, maxConns int32) *pgxpool.Pool {
	t.Helper()
	return servicetest.NewPoolConns(t, billing.Spec, maxConns)
}

// Registry returns billing's event registry.
func Registry() *envelope.Registry { return servicetest.Registry(billing.Spec) }

// NewInbox returns the inbox over svc's handlers as service.Main builds it
// (service.NewInbox with billing.Spec: its OriginConstraints, the redriver
// and the quarantine announcements).
func NewInbox(t testing.TB, svc *app.App) *inbox.Inbox {
	t.Helper()
	return NewRelease(t, svc, nil)
}

// NewRelease is NewInbox for a release of billing whose Spec.Register
// registers more (a new schema version of an event).
func NewRelease(t testing.TB, svc *app.App, register func(*envelope.Registry)) *inbox.Inbox {
	t.Helper()
	spec := billing.Spec
	spec.Register = register
	return servicetest.NewInbox(t, spec, service.Parts{
		Topics: app.Topics, Handlers: svc.Handlers(), BatchHandlers: svc.BatchHandlers(),
	})
}

// Decide decides raws in one transaction through ib and commits it, each
// delivered on its type's topic.
func Decide(t testing.TB, pool *pgxpool.Pool, ib *inbox.Inbox, raws ...[]byte) []inbox.Decision {
	t.Helper()
	return servicetest.Decide(t, pool, ib, servicetest.Delivered(raws...)...)
}

// TryDecide is Decide returning its error.
func TryDecide(ctx context.Context, pool *pgxpool.Pool, ib *inbox.Inbox, raws ...[]byte) ([]inbox.Decision, error) {
	return servicetest.TryDecide(ctx, pool, ib, servicetest.Delivered(raws...)...)
}

func marshal(t testing.TB, m envelope.Meta, payload any) (envelope.Envelope, []byte) {
	t.Helper()
	env, err := envelope.New(m, payload)
	if err != nil {
		t.Fatalf("new envelope: %v", err)
	}
	raw, err := env.Marshal()
	if err != nil {
		t.Fatalf("marshal envelope: %v", err)
	}
	return env, raw
}

// Dec parses a decimal or fails the test.
func Dec(t testing.TB, s string) decimal.Decimal {
	t.Helper()
	d, err := decimal.NewFromString(s)
	if err != nil {
		t.Fatal(err)
	}
	return d
}

// Meter is a MeterDefined as meter publishes it: a catalog meter, or with
// Implied the sum meter a price for a code not in the catalog defines.
type Meter struct {
	Code, Aggregation, ValueProperty string
	Dimensions                       []string
	Implied                          bool
}

// SumMeter is the meter a price for code implies: sum, no dimensions.
func SumMeter(code string) Meter { return Meter{Code: code, Aggregation: "sum", Implied: true} }

// Raw returns the marshalled envelope of m.
func (m Meter) Raw(t testing.TB) []byte {
	t.Helper()
	definedAt := time.Date(2025, 12, 1, 0, 0, 0, 0, time.UTC)
	_, raw := marshal(t, envelope.Meta{
		EventType: events.TypeMeterDefined, SchemaVersion: 1, TenantID: events.CatalogTenant,
		AggregateType: events.AggregateMeter, AggregateID: m.Code, AggregateVersion: 1,
		OccurredAt: definedAt, Producer: "meter",
	}, events.MeterDefined{Code: m.Code, Name: m.Code, Aggregation: m.Aggregation, ValueProperty: m.ValueProperty,
		Dimensions: m.Dimensions, EventType: m.Code, DefinedAt: definedAt, Implied: m.Implied})
	return raw
}

// TestMeters are the meters the tests price, all implied sum meters.
var TestMeters = []string{"api_calls", "sms", "storage"}

// ImpliedMeters returns the MeterDefined of the implied sum meters of codes
// (TestMeters when none are named), as meter publishes them with their
// first prices: what a test of usage from before the catalog delivers
// first, since billing rates a fact only once it holds its meter.
func ImpliedMeters(t testing.TB, codes ...string) [][]byte {
	t.Helper()
	if len(codes) == 0 {
		codes = TestMeters
	}
	raws := make([][]byte, len(codes))
	for i, c := range codes {
		raws[i] = SumMeter(c).Raw(t)
	}
	return raws
}

// DefineMeters decides ImpliedMeters(codes...) through ib.
func DefineMeters(t testing.TB, pool *pgxpool.Pool, ib *inbox.Inbox, codes ...string) {
	t.Helper()
	for _, d := range Decide(t, pool, ib, ImpliedMeters(t, codes...)...) {
		if d.Outcome != inbox.OutcomeApplied && d.Outcome != inbox.OutcomeDuplicate {
			t.Fatalf("MeterDefined: %s %s", d.Outcome, d.Reason)
		}
	}
}

// Price is a PriceActivated as meter publishes it.
type Price struct {
	Tenant, Meter, Currency string
	Version                 int64
	UnitPrice               string
	EffectiveAt             time.Time
	// Seq is the activation's place in its tenant's schedule shard; zero
	// means Version (right while a test's shard holds one series).
	Seq int64
	// KnownThrough is the shard's watermark the event carries; zero means
	// FarFuture (the schedule is final), Unknown none at all.
	KnownThrough time.Time
	// Pricing, when set, is the version's pricing under another model than
	// unit (UnitPrice is then ignored).
	Pricing *pricing.Pricing
	// Dimensions are the property values the version prices (none: the
	// series' default).
	Dimensions map[string]string
}

// FarFuture is the default watermark of a Price: tests that are not about
// the schedule's watermark see every fact's schedule known.
var FarFuture = time.Date(2100, 1, 1, 0, 0, 0, 0, time.UTC)

// Unknown, as a Price's KnownThrough, publishes no watermark with it.
var Unknown = time.Unix(0, 1).UTC()

// Raw returns the marshalled envelope of p.
func (p Price) Raw(t testing.TB) []byte {
	t.Helper()
	_, raw := p.Envelope(t, 1)
	return raw
}

// Envelope returns the envelope of p at a schema version, and its bytes.
func (p Price) Envelope(t testing.TB, schemaVersion int) (envelope.Envelope, []byte) {
	t.Helper()
	pa := events.PriceActivated{
		PriceID: uuid.Must(uuid.NewV7()), MeterCode: p.Meter, Currency: p.Currency,
		EffectiveAt: p.EffectiveAt, Version: p.Version, ScheduleSeq: p.seq(), KnownThrough: p.knownThrough(), Dimensions: p.Dimensions,
	}
	if p.Pricing != nil {
		pa.Model, pa.Tiers, pa.PackageSize, pa.PackagePrice = p.Pricing.Model, p.Pricing.Tiers, p.Pricing.PackageSize, p.Pricing.PackagePrice
	} else {
		pa.UnitPrice = Dec(t, p.UnitPrice)
	}
	return marshal(t, envelope.Meta{
		EventType: events.TypePriceActivated, SchemaVersion: schemaVersion, TenantID: p.Tenant,
		AggregateType: events.AggregatePrice, AggregateID: events.PriceSeriesID(p.Meter, p.Currency),
		AggregateVersion: p.Version, OccurredAt: p.EffectiveAt, Producer: "meter",
	}, pa)
}

func (p Price) seq() int64 {
	if p.Seq == 0 {
		return p.Version
	}
	return p.Seq
}

func (p Price) knownThrough() time.Time {
	switch {
	case p.KnownThrough.IsZero():
		return FarFuture
	case p.KnownThrough.Equal(Unknown):
		return time.Time{}
	}
	return p.KnownThrough
}

// Watermark is a PriceScheduleWatermark as meter publishes it, for the
// schedule shard of Tenant: activations 1 to Seq of the shard are every
// version taking effect at or before KnownThrough.
type Watermark struct {
	Tenant       string
	Seq          int64
	KnownThrough time.Time
	// Plans makes it the plans' shard's (events.PlanShard); Tenant is then
	// ignored.
	Plans bool
}

// Raw returns the marshalled envelope of w.
func (w Watermark) Raw(t testing.TB) []byte {
	t.Helper()
	shard := events.ScheduleShard(w.Tenant)
	if w.Plans {
		shard = events.PlanShard
	}
	_, raw := marshal(t, envelope.Meta{
		EventType: events.TypePriceScheduleWatermark, SchemaVersion: 1, TenantID: events.ScheduleTenant,
		AggregateType: events.AggregatePriceSchedule, AggregateID: events.PriceScheduleID(shard, w.KnownThrough),
		AggregateVersion: 1, OccurredAt: w.KnownThrough, Producer: "meter",
	}, events.PriceScheduleWatermark{Shard: shard, Shards: events.ScheduleShards, Seq: w.Seq, KnownThrough: w.KnownThrough})
	return raw
}

// Plan is a PlanPublished as meter publishes it.
type Plan struct {
	Code, Currency string
	Version        int64
	EffectiveAt    time.Time
	// Seq is the version's place in the plans' shard; zero means Version.
	Seq int64
	// KnownThrough is the plans' watermark the event carries; zero means
	// FarFuture, Unknown none.
	KnownThrough time.Time
	Charges      []events.PlanCharge
	FixedFees    []events.PlanFee
	MinimumSpend *decimal.Decimal
}

// Raw returns the marshalled envelope of p.
func (p Plan) Raw(t testing.TB) []byte {
	t.Helper()
	seq := p.Seq
	if seq == 0 {
		seq = p.Version
	}
	known := Price{KnownThrough: p.KnownThrough}.knownThrough()
	_, raw := marshal(t, envelope.Meta{
		EventType: events.TypePlanPublished, SchemaVersion: 1, TenantID: events.CatalogTenant,
		AggregateType: events.AggregatePlan, AggregateID: p.Code, AggregateVersion: p.Version,
		OccurredAt: p.EffectiveAt, Producer: "meter",
	}, events.PlanPublished{
		PlanID: uuid.Must(uuid.NewV7()), Code: p.Code, Name: p.Code, Currency: p.Currency, Version: p.Version,
		FixedFees: p.FixedFees, Charges: p.Charges, MinimumSpend: p.MinimumSpend, EffectiveAt: p.EffectiveAt,
		ScheduleSeq: seq, KnownThrough: known,
	})
	return raw
}

// Usage is a UsageAccepted as usage publishes it.
type Usage struct {
	Tenant, Meter, Currency string
	// PriceVersion is what usage attached before decision 0011; billing
	// ignores it (0: absent, as usage sends today).
	PriceVersion int64
	Quantity     string
	OccurredAt   time.Time
	// Properties are the fact's; SourceSystem and SourceEventID its
	// identity (default "test" and the usage id).
	Properties                  map[string]string
	SourceSystem, SourceEventID string
}

// Envelope returns the envelope of u and its marshalled bytes; every call
// makes a new usage fact.
func (u Usage) Envelope(t testing.TB) (envelope.Envelope, []byte) {
	t.Helper()
	usageID := uuid.Must(uuid.NewV7())
	source, sourceID := cmp.Or(u.SourceSystem, "test"), cmp.Or(u.SourceEventID, usageID.String())
	return marshal(t, envelope.Meta{
		EventType: events.TypeUsageAccepted, SchemaVersion: 1, TenantID: u.Tenant,
		AggregateType: events.AggregateUsage, AggregateID: usageID.String(), AggregateVersion: 1,
		OccurredAt: u.OccurredAt, Producer: "usage", CorrelationID: "corr-" + usageID.String()[:8],
	}, events.UsageAccepted{
		UsageID: usageID, SourceSystem: source, SourceEventID: sourceID, MeterCode: u.Meter,
		Quantity: Dec(t, u.Quantity), OccurredAt: u.OccurredAt, Currency: u.Currency, PriceVersion: u.PriceVersion,
		Properties: u.Properties,
	})
}

// Raw returns the marshalled envelope of a new usage fact.
func (u Usage) Raw(t testing.TB) []byte {
	t.Helper()
	_, raw := u.Envelope(t)
	return raw
}

// Published is an event billing appended to its outbox.
type Published struct {
	Topic    string
	Envelope envelope.Envelope
	Payload  any
}

// Outbox returns the events in billing's outbox, in append order, decoded.
func Outbox(t testing.TB, pool *pgxpool.Pool) []Published {
	t.Helper()
	var out []Published
	for _, p := range servicetest.Outbox(t, billing.Spec, pool) {
		out = append(out, Published{Topic: p.Topic, Envelope: p.Envelope, Payload: p.Payload})
	}
	return out
}

// OfType returns the payloads of type T among ps.
func OfType[T any](ps []Published) []T {
	var out []T
	for _, p := range ps {
		if v, ok := p.Payload.(T); ok {
			out = append(out, v)
		}
	}
	return out
}

// Count returns the result of a count(*) query.
func Count(t testing.TB, pool *pgxpool.Pool, sql string, args ...any) int {
	t.Helper()
	var n int
	if err := pool.QueryRow(context.Background(), sql, args...).Scan(&n); err != nil {
		t.Fatalf("%s: %v", sql, err)
	}
	return n
}

// JSON renders v for failure messages.
func JSON(v any) string {
	b, _ := json.MarshalIndent(v, "", "  ")
	return string(b)
}

// Tallies computes in Go, from billing's rows, what the close of a tenant's
// period must count per currency: its charges and the adjustments not
// marked after_close, each counted, summed exactly and digested with
// package digest over their event ids. Comparing a BillingPeriodClosed's
// Currencies with it checks the close's SQL against the Go digest.
func Tallies(t testing.TB, pool *pgxpool.Pool, tenant, period string) map[string]events.CloseTally {
	t.Helper()
	type acc struct {
		charges, adjustments         int64
		chargeAmount, adjustmentAmnt decimal.Decimal
		chargeDigest, adjustmentDig  digest.Set
	}
	accs := map[string]*acc{}
	get := func(cur string) *acc {
		if accs[cur] == nil {
			accs[cur] = &acc{}
		}
		return accs[cur]
	}
	rows, err := pool.Query(context.Background(), `
		SELECT 'charge', event_id, currency, amount FROM charge WHERE tenant_id = $1 AND period = $2
		UNION ALL
		SELECT 'adjustment', event_id, currency, amount FROM adjustment
		WHERE tenant_id = $1 AND period = $2 AND NOT after_close`, tenant, period)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	for rows.Next() {
		var kind, cur string
		var id uuid.UUID
		var amount decimal.Decimal
		if err := rows.Scan(&kind, &id, &cur, &amount); err != nil {
			t.Fatal(err)
		}
		a := get(cur)
		if kind == "charge" {
			a.charges++
			a.chargeAmount = a.chargeAmount.Add(amount)
			a.chargeDigest.Add(id)
		} else {
			a.adjustments++
			a.adjustmentAmnt = a.adjustmentAmnt.Add(amount)
			a.adjustmentDig.Add(id)
		}
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	out := make(map[string]events.CloseTally, len(accs))
	for cur, a := range accs {
		out[cur] = events.CloseTally{
			Charges: a.charges, ChargeAmount: a.chargeAmount, ChargeDigest: a.chargeDigest.String(),
			Adjustments: a.adjustments, AdjustmentAmount: a.adjustmentAmnt, AdjustmentDigest: a.adjustmentDig.String(),
		}
	}
	return out
}

// SameTallies reports whether two sets of tallies are equal, amounts
// compared as numbers, and if not, why.
func SameTallies(got, want map[string]events.CloseTally) (bool, string) {
	if len(got) != len(want) {
		return false, fmt.Sprintf("%d currencies, want %d:\n%s\nwant\n%s", len(got), len(want), JSON(got), JSON(want))
	}
	for cur, w := range want {
		g, ok := got[cur]
		if !ok || g.Charges != w.Charges || !g.ChargeAmount.Equal(w.ChargeAmount) || g.ChargeDigest != w.ChargeDigest ||
			g.Adjustments != w.Adjustments || !g.AdjustmentAmount.Equal(w.AdjustmentAmount) ||
			g.AdjustmentDigest != w.AdjustmentDigest {
			return false, fmt.Sprintf("%s: %s, want %s", cur, JSON(g), JSON(w))
		}
	}
	return true, ""
}

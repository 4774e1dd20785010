package app_test

import (
	"cmp"
	"encoding/json"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/shopspring/decimal"

	"github.com/usagebilling/billing/pkg/catalog"
	"github.com/usagebilling/billing/pkg/events"
	"github.com/usagebilling/billing/pkg/inbox"
	"github.com/usagebilling/billing/pkg/pricing"
	"github.com/usagebilling/billing/services/billing/internal/app"
	bt "github.com/usagebilling/billing/services/billing/internal/billingtest"
)

// tokens is a catalog meter priced by model and region.
var tokens = bt.Meter{Code: "tokens", Aggregation: catalog.Sum, Dimensions: []string{"model", "region"}}

func catalogFixture(t *testing.T, maxConns int32) (*pgxpool.Pool, *app.App, *inbox.Inbox) {
	t.Helper()
	pool := bt.NewPoolConns(t, maxConns)
	svc := app.New(app.Deps{Pool: pool, Clock: func() time.Time { return jan20 }}, app.Config{}) // January in progress
	ib := bt.NewInbox(t, svc)
	bt.DefineMeters(t, pool, ib) // the implied meters of the plain tests' prices
	return pool, svc, ib
}

func fact(tenant, meter, currency, qty string, at time.Time, props map[string]string) bt.Usage {
	return bt.Usage{Tenant: tenant, Meter: meter, Currency: currency, Quantity: qty, OccurredAt: at, Properties: props}
}

// ratedBy returns billing's ChargeRated events by the usage event they rate.
func ratedBy(t *testing.T, pool *pgxpool.Pool) map[uuid.UUID]events.ChargeRated {
	t.Helper()
	out := map[uuid.UUID]events.ChargeRated{}
	for _, c := range bt.OfType[events.ChargeRated](bt.Outbox(t, pool)) {
		if _, dup := out[c.UsageEventID]; dup {
			t.Fatalf("two charges of usage event %s", c.UsageEventID)
		}
		out[c.UsageEventID] = c
	}
	return out
}

func estimateOf(t *testing.T, svc *app.App, tenant string) map[string]decimal.Decimal {
	t.Helper()
	est, err := svc.PeriodEstimate(t.Context(), tenant, "2026-01")
	if err != nil {
		t.Fatal(err)
	}
	return est.Estimate
}

// A usage fact of a meter billing holds no definition of waits for the
// meter's MeterDefined (its aggregation decides the charge), even when its
// price is known; the MeterDefined wakes it in the same transaction. A
// MeterDefined delivered again is a duplicate.
func TestUsageWaitsForItsMetersDefinition(t *testing.T) {
	t.Parallel()
	pool, _, ib := catalogFixture(t, 4)
	seats := bt.Meter{Code: "peak_seats", Aggregation: catalog.Max}
	price := bt.Price{Tenant: "t1", Meter: "peak_seats", Currency: "USD", Version: 1, UnitPrice: "4", EffectiveAt: jan1}
	usageEnv, usageRaw := fact("t1", "peak_seats", "USD", "12", jan10, nil).Envelope(t)
	ds := bt.Decide(t, pool, ib, price.Raw(t), usageRaw)
	wantOutcomes(t, ds, "applied", "deferred:missing_fact")
	if want := app.MeterKey("peak_seats"); ds[1].WaitKey != want {
		t.Fatalf("wait key %q, want %q", ds[1].WaitKey, want)
	}
	if n := bt.Count(t, pool, `SELECT count(*) FROM charge`); n != 0 {
		t.Fatalf("%d charges before the meter's definition", n)
	}

	meterRaw := seats.Raw(t)
	ds = bt.Decide(t, pool, ib, meterRaw)
	wantOutcomes(t, ds, "applied", "applied")
	if !ds[1].Woken || ds[1].EventID != usageEnv.EventID {
		t.Fatalf("decisions %+v: want the usage woken by the definition", ds)
	}
	c := ratedBy(t, pool)[usageEnv.EventID]
	if c.Aggregation != catalog.Max || !c.Amount.IsZero() || !c.UnitPrice.IsZero() || c.Pricing == nil ||
		c.Pricing.Model != pricing.Unit || !c.Pricing.UnitPrice.Equal(bt.Dec(t, "4")) || c.PriceVersion != 1 || c.Unpriced {
		t.Fatalf("charge %s: want a max charge without an amount, carrying unit pricing at 4", bt.JSON(c))
	}
	wantOutcomes(t, bt.Decide(t, pool, ib, meterRaw), "duplicate")
	if n := bt.Count(t, pool, `SELECT count(*) FROM meters WHERE code = 'peak_seats' AND aggregation = 'max'`); n != 1 {
		t.Fatalf("%d meter rows", n)
	}
}

// Each aggregation's line quantity and the estimate over it, under unit and
// graduated pricing, the same whatever order the facts come in. One tenant
// per aggregation; USD is unit pricing at 0.5, EUR graduated (the first 2
// free, then 1 each). The facts: 5 (user a), 9 (b), 3 (a) and 7 (c), the
// last two at the same latest instant (7's source event id is the larger).
func TestEstimateOfEveryAggregation(t *testing.T) {
	t.Parallel()
	upTo2 := bt.Dec(t, "2")
	grad := &pricing.Pricing{Model: pricing.Graduated, Tiers: []pricing.Tier{
		{UpTo: &upTo2, UnitPrice: decimal.Zero}, {UnitPrice: bt.Dec(t, "1")}}}
	type obs struct {
		qty, user, id string
		at            time.Time
	}
	facts := []obs{{"5", "a", "e1", jan10}, {"9", "b", "e2", jan10.Add(time.Hour)}, {"3", "a", "e3", jan15}, {"7", "c", "e4", jan15}}
	cases := []struct {
		agg, valueProperty string
		quantity           string // the line's, by hand
		usd, eur           string // unit at 0.5; graduated
	}{
		{catalog.Sum, "", "24", "12", "22"},
		{catalog.Count, "", "4", "2", "2"},
		{catalog.Max, "", "9", "4.5", "7"},
		{catalog.Latest, "", "7", "3.5", "5"},
		{catalog.UniqueCount, "user", "3", "1.5", "1"},
	}
	var raws [][]byte
	for _, c := range cases {
		meter := "m_" + c.agg
		raws = append(raws, bt.Meter{Code: meter, Aggregation: c.agg, ValueProperty: c.valueProperty}.Raw(t),
			bt.Price{Tenant: c.agg, Meter: meter, Currency: "USD", Version: 1, UnitPrice: "0.5", EffectiveAt: jan1}.Raw(t),
			bt.Price{Tenant: c.agg, Meter: meter, Currency: "EUR", Version: 1, EffectiveAt: jan1, Pricing: grad}.Raw(t))
		// The independent model: catalog.Aggregate over the facts.
		agg := catalog.NewAggregate(c.agg)
		for _, f := range facts {
			agg.Add(catalog.Observation{Quantity: bt.Dec(t, f.qty), OccurredAt: f.at, SourceSystem: "src", SourceEventID: f.id, Value: f.user})
		}
		if !agg.Quantity().Equal(bt.Dec(t, c.quantity)) {
			t.Fatalf("%s: the model says %s, the case %s", c.agg, agg.Quantity(), c.quantity)
		}
		if want := pricing.UnitPricing(bt.Dec(t, "0.5")).Amount(agg.Quantity()); !want.Equal(bt.Dec(t, c.usd)) {
			t.Fatalf("%s: unit pricing gives %s, the case %s", c.agg, want, c.usd)
		}
		if want := grad.Amount(agg.Quantity()); !want.Equal(bt.Dec(t, c.eur)) {
			t.Fatalf("%s: graduated pricing gives %s, the case %s", c.agg, want, c.eur)
		}
	}
	usage := func(reverse bool) [][]byte {
		var out [][]byte
		for _, c := range cases {
			for _, cur := range []string{"USD", "EUR"} {
				for i := range facts {
					f := facts[i]
					if reverse {
						f = facts[len(facts)-1-i]
					}
					u := fact(c.agg, "m_"+c.agg, cur, f.qty, f.at, map[string]string{"user": f.user, "plan": "pro"})
					u.SourceSystem, u.SourceEventID = "src", f.id
					out = append(out, u.Raw(t))
				}
			}
		}
		return out
	}
	for _, reverse := range []bool{false, true} {
		pool, svc, ib := catalogFixture(t, 4)
		for _, d := range bt.Decide(t, pool, ib, append(raws, usage(reverse)...)...) {
			if d.Outcome != inbox.OutcomeApplied {
				t.Fatalf("decision %+v", d)
			}
		}
		for _, c := range cases {
			est := estimateOf(t, svc, c.agg)
			if len(est) != 2 || !est["USD"].Equal(bt.Dec(t, c.usd)) || !est["EUR"].Equal(bt.Dec(t, c.eur)) {
				t.Errorf("%s (reversed %v): estimate %s, want USD %s, EUR %s", c.agg, reverse, bt.JSON(est), c.usd, c.eur)
			}
		}
		for _, ch := range ratedBy(t, pool) {
			perCharge := ch.Aggregation == catalog.Sum || ch.Aggregation == catalog.Count
			unit := ch.Currency == "USD"
			switch {
			case ch.Aggregation != strings.TrimPrefix(ch.MeterCode, "m_") || ch.SourceSystem != "src" || ch.Properties["user"] == "":
				t.Errorf("charge %s: want its meter's aggregation, the fact's identity and properties", bt.JSON(ch))
			case perCharge && unit && (!ch.UnitPrice.Equal(bt.Dec(t, "0.5")) || !ch.Amount.Equal(ch.Counted().Mul(ch.UnitPrice)) || ch.Pricing != nil):
				t.Errorf("charge %s: want its own amount at 0.5", bt.JSON(ch))
			case (!perCharge || !unit) && (!ch.Amount.IsZero() || !ch.UnitPrice.IsZero() || ch.Pricing == nil):
				t.Errorf("charge %s: want no amount and the version's pricing", bt.JSON(ch))
			case ch.Aggregation == catalog.UniqueCount && ch.Value != ch.Properties["user"]:
				t.Errorf("charge %s: want its value the user", bt.JSON(ch))
			case ch.Aggregation != catalog.UniqueCount && ch.Value != "":
				t.Errorf("charge %s: a value outside unique_count", bt.JSON(ch))
			}
		}
		if reverse {
			continue
		}
		// A count charge's own amount is its unit price: 4 x 0.5.
		if c := bt.Count(t, pool, `SELECT count(*) FROM charge WHERE aggregation = 'count' AND currency = 'USD' AND amount = 0.5`); c != 4 {
			t.Errorf("%d count charges of 0.5, want 4", c)
		}
		// The close tallies the charges' own amounts (decision 0012): 12 for
		// sum, 2 for count, nothing for the lines priced as a whole.
		for _, c := range cases {
			closePeriod(t, svc, c.agg, "2026-01", "close-"+c.agg)
			closes := bt.OfType[events.BillingPeriodClosed](bt.Outbox(t, pool))
			got := closes[len(closes)-1]
			if ok, why := bt.SameTallies(got.Currencies, bt.Tallies(t, pool, c.agg, "2026-01")); !ok {
				t.Errorf("%s close: %s", c.agg, why)
			}
			want := map[string]string{catalog.Sum: "12", catalog.Count: "2"}[c.agg]
			if !got.Currencies["USD"].ChargeAmount.Equal(decimal.RequireFromString(cmp.Or(want, "0"))) ||
				!got.Currencies["EUR"].ChargeAmount.IsZero() {
				t.Errorf("%s close tallies %s, want USD charge amount %s", c.agg, bt.JSON(got.Currencies), cmp.Or(want, "0"))
			}
		}
	}
}

// A fact takes the most specific price-sheet entry in effect whose
// dimensions all equal its properties: per dimension set the latest
// version in effect, the default when nothing more specific matches. Each
// entry is a line of its own.
func TestMostSpecificDimensionPriceWins(t *testing.T) {
	t.Parallel()
	pool, svc, ib := catalogFixture(t, 4)
	price := func(v int64, unit string, at time.Time, dims map[string]string) []byte {
		return bt.Price{Tenant: "t1", Meter: "tokens", Currency: "USD", Version: v, UnitPrice: unit, EffectiveAt: at, Dimensions: dims}.Raw(t)
	}
	gpt4, gpt4eu := map[string]string{"model": "gpt-4"}, map[string]string{"model": "gpt-4", "region": "eu"}
	raws := [][]byte{tokens.Raw(t),
		price(1, "0.002", jan1, nil), price(2, "0.03", jan1, gpt4), price(3, "0.05", jan1, gpt4eu),
		price(4, "0.001", jan15, nil)} // a new default from the 15th; gpt-4 keeps its own
	cases := []struct {
		at      time.Time
		props   map[string]string
		version int64
		amount  string
	}{
		{jan10, map[string]string{"model": "gpt-3", "region": "us"}, 1, "0.2"},
		{jan10, map[string]string{"model": "gpt-4", "region": "us"}, 2, "3"},
		{jan10, map[string]string{"model": "gpt-4", "region": "eu"}, 3, "5"},
		{jan10, nil, 1, "0.2"},
		{jan10, map[string]string{"region": "eu"}, 1, "0.2"},
		{jan20, map[string]string{"model": "gpt-3"}, 4, "0.1"},
		{jan20, map[string]string{"model": "gpt-4", "region": "us"}, 2, "3"},
	}
	var envs []uuid.UUID
	for _, c := range cases {
		env, raw := fact("t1", "tokens", "USD", "100", c.at, c.props).Envelope(t)
		envs, raws = append(envs, env.EventID), append(raws, raw)
	}
	for _, d := range bt.Decide(t, pool, ib, raws...) {
		if d.Outcome != inbox.OutcomeApplied {
			t.Fatalf("decision %+v", d)
		}
	}
	rated := ratedBy(t, pool)
	total := decimal.Zero
	for i, c := range cases {
		ch := rated[envs[i]]
		var wantDims map[string]string
		switch c.version {
		case 2:
			wantDims = gpt4
		case 3:
			wantDims = gpt4eu
		}
		if ch.PriceVersion != c.version || !ch.Amount.Equal(bt.Dec(t, c.amount)) || !catalog.Same(ch.Dimensions, wantDims) ||
			(wantDims == nil) != (ch.Dimensions == nil) || ch.Unpriced {
			t.Errorf("fact %d %v: charge %s, want v%d %s with dimensions %v", i, c.props, bt.JSON(ch), c.version, c.amount, wantDims)
		}
		total = total.Add(bt.Dec(t, c.amount))
	}
	if est := estimateOf(t, svc, "t1"); !est["USD"].Equal(total) {
		t.Fatalf("estimate %s, want %s", bt.JSON(est), total)
	}
	// The charges list shows each charge's price dimensions and properties.
	list := charges(t, svc, "t1", "2026-01")
	if len(list) != len(cases) {
		t.Fatalf("%d charges", len(list))
	}
	for _, c := range list {
		raw, _ := json.Marshal(c)
		if c.PriceVersion == 3 && !strings.Contains(string(raw), `"dimensions":{"model":"gpt-4","region":"eu"}`) ||
			!strings.Contains(string(raw), `"aggregation":"sum"`) || !strings.Contains(string(raw), `"unpriced":false`) {
			t.Errorf("charge shown as %s", raw)
		}
	}
}

// Two equally specific entries that both match (evidence from before
// activation refused such overlaps) are chosen as catalog.Choose chooses:
// the smaller catalog.Key, in byte order ("Zone=..." before "model=...",
// which a case-insensitive collation would reverse).
func TestEquallySpecificEntriesChooseAsCatalogChoose(t *testing.T) {
	t.Parallel()
	pool, _, ib := catalogFixture(t, 4)
	meter := bt.Meter{Code: "calls", Aggregation: catalog.Sum, Dimensions: []string{"model", "Zone"}}
	sheet := []map[string]string{{"model": "gpt-4"}, {"Zone": "us"}}
	props := map[string]string{"model": "gpt-4", "Zone": "us"}
	raws := [][]byte{meter.Raw(t)}
	for i, d := range sheet {
		raws = append(raws, bt.Price{Tenant: "t1", Meter: "calls", Currency: "USD", Version: int64(i + 1),
			UnitPrice: fmt.Sprint(i + 1), EffectiveAt: jan1, Dimensions: d}.Raw(t))
	}
	env, raw := fact("t1", "calls", "USD", "1", jan10, props).Envelope(t)
	bt.Decide(t, pool, ib, append(raws, raw)...)
	want := catalog.Choose(sheet, props)
	if got := ratedBy(t, pool)[env.EventID]; got.PriceVersion != int64(want+1) || !catalog.Same(got.Dimensions, sheet[want]) {
		t.Fatalf("charge %s, want version %d (%v) as catalog.Choose", bt.JSON(got), want+1, sheet[want])
	}
}

// Once the schedule is known through a fact's occurrence, a fact of a
// series with no entry in effect then (before its first version) or none
// matching its properties is rated unpriced: version 0, no price, no amount,
// its meter's unpriced line, nothing in the estimate.
func TestUnpricedBeforeTheFirstVersionAndWhenNoEntryMatches(t *testing.T) {
	t.Parallel()
	pool, svc, ib := catalogFixture(t, 4)
	early := priceV1("early")
	early.EffectiveAt = jan10
	before, beforeRaw := usageAt("early", 0, "2", jan1).Envelope(t)
	after, afterRaw := usageAt("early", 0, "2", jan15).Envelope(t)
	gpt4Only := bt.Price{Tenant: "dims", Meter: "tokens", Currency: "USD", Version: 1, UnitPrice: "0.03", EffectiveAt: jan1,
		Dimensions: map[string]string{"model": "gpt-4"}}
	gpt3, gpt3Raw := fact("dims", "tokens", "USD", "100", jan10, map[string]string{"model": "gpt-3"}).Envelope(t)
	gpt4, gpt4Raw := fact("dims", "tokens", "USD", "100", jan10, map[string]string{"model": "gpt-4"}).Envelope(t)
	ds := bt.Decide(t, pool, ib, early.Raw(t), tokens.Raw(t), gpt4Only.Raw(t), beforeRaw, afterRaw, gpt3Raw, gpt4Raw)
	wantOutcomes(t, ds, "applied", "applied", "applied", "applied", "applied", "applied", "applied")

	rated := ratedBy(t, pool)
	for _, id := range []uuid.UUID{before.EventID, gpt3.EventID} {
		c := rated[id]
		if !c.Unpriced || c.PriceVersion != 0 || !c.Amount.IsZero() || !c.UnitPrice.IsZero() || c.Pricing != nil ||
			c.Dimensions != nil || c.Model != "" {
			t.Errorf("charge %s: want unpriced", bt.JSON(c))
		}
	}
	if c := rated[after.EventID]; c.Unpriced || c.PriceVersion != 1 || !c.Amount.Equal(bt.Dec(t, "0.025")) {
		t.Errorf("charge %s: want v1", bt.JSON(c))
	}
	if c := rated[gpt4.EventID]; c.Unpriced || c.PriceVersion != 1 || !c.Amount.Equal(bt.Dec(t, "3")) {
		t.Errorf("charge %s: want the gpt-4 price", bt.JSON(c))
	}
	if est := estimateOf(t, svc, "early"); !est["USD"].Equal(bt.Dec(t, "0.025")) {
		t.Errorf("estimate %s, want 0.025 (the unpriced fact costs nothing)", bt.JSON(est))
	}
	if est := estimateOf(t, svc, "dims"); !est["USD"].Equal(bt.Dec(t, "3")) {
		t.Errorf("estimate %s, want 3", bt.JSON(est))
	}
	for _, c := range charges(t, svc, "dims", "2026-01") {
		raw, _ := json.Marshal(c)
		if c.Unpriced != (c.UsageEventID == gpt3.EventID) ||
			c.Unpriced && (strings.Contains(string(raw), `"amount"`) || strings.Contains(string(raw), `"unitPrice"`)) {
			t.Errorf("charge shown as %s", raw)
		}
	}
	// The unpriced charges are a line of their own (version 0).
	if n := bt.Count(t, pool, `SELECT count(*) FROM charge WHERE unpriced AND price_version = 0 AND amount = 0`); n != 2 {
		t.Errorf("%d unpriced charges, want 2", n)
	}
}

// No unpriced decision before the schedule is proven through the fact's
// occurrence: a later version could still take effect at or before it (a
// default price, or one of the fact's dimensions). The fact waits like a
// priced one, and is rated unpriced once a watermark passes it.
func TestUnpricedWaitsForTheWatermark(t *testing.T) {
	t.Parallel()
	pool, svc, ib := catalogFixture(t, 4)
	v1 := priceV1("t1")
	v1.EffectiveAt, v1.KnownThrough = jan20, jan10 // from the 20th; known through the 10th
	gpt4 := bt.Price{Tenant: "t1", Meter: "tokens", Currency: "USD", Version: 1, Seq: 2, UnitPrice: "0.03", EffectiveAt: jan1,
		KnownThrough: jan10, Dimensions: map[string]string{"model": "gpt-4"}}
	jan12 := jan10.Add(48 * time.Hour)
	known, knownRaw := usageAt("t1", 0, "2", jan1).Envelope(t)
	waits, waitsRaw := usageAt("t1", 0, "2", jan12).Envelope(t)
	gpt3, gpt3Raw := fact("t1", "tokens", "USD", "100", jan12, map[string]string{"model": "gpt-3"}).Envelope(t)
	ds := bt.Decide(t, pool, ib, v1.Raw(t), tokens.Raw(t), gpt4.Raw(t), knownRaw, waitsRaw, gpt3Raw)
	wantOutcomes(t, ds, "applied", "applied", "applied", "applied", "deferred:missing_fact", "deferred:missing_fact")
	if key := app.ScheduleKey(events.ScheduleShard("t1"), jan12); ds[4].WaitKey != key || ds[5].WaitKey != key {
		t.Fatalf("wait keys %q, %q", ds[4].WaitKey, ds[5].WaitKey)
	}
	if c := ratedBy(t, pool); len(c) != 1 || !c[known.EventID].Unpriced {
		t.Fatalf("charges %s: want only the fact known before v1, unpriced", bt.JSON(c))
	}
	// A watermark through the very instant does not pass them (one for the
	// tenant's shard, whatever the meter): it does not wake them, and they
	// still wait.
	at := func(through time.Time) []byte {
		return bt.Watermark{Tenant: "t1", Seq: 2, KnownThrough: through}.Raw(t)
	}
	wantOutcomes(t, bt.Decide(t, pool, ib, at(jan12)), "applied")
	if n := bt.Count(t, pool, `SELECT count(*) FROM inbox_deferred WHERE event_type = 'UsageAccepted'`); n != 2 {
		t.Fatalf("%d facts waiting, want 2", n)
	}
	if n := bt.Count(t, pool, `SELECT count(*) FROM charge`); n != 1 {
		t.Fatalf("%d charges before the schedule passed the facts", n)
	}
	wantOutcomes(t, bt.Decide(t, pool, ib, at(jan12.Add(30*time.Minute))), "applied", "applied", "applied")
	rated := ratedBy(t, pool)
	for _, id := range []uuid.UUID{waits.EventID, gpt3.EventID} {
		if c := rated[id]; !c.Unpriced || c.PriceVersion != 0 {
			t.Errorf("charge %s: want unpriced once known", bt.JSON(c))
		}
	}
	if est := estimateOf(t, svc, "t1"); !est["USD"].IsZero() {
		t.Errorf("estimate %s, want 0", bt.JSON(est))
	}
}

// A tenant with no price at all for a catalog meter (decision 0019): its
// fact waits until the tenant's schedule shard is known through its
// occurrence (a first price could still take effect at or before it), then
// is rated unpriced in the currency it names; another tenant's watermark,
// of another shard, proves nothing for it.
func TestUnpricedWithoutAnySeriesOnceTheShardIsKnown(t *testing.T) {
	t.Parallel()
	pool, _, ib := catalogFixture(t, 4)
	if events.ScheduleShard("t3") == events.ScheduleShard("t1") {
		t.Fatal("t1 and t3 share a shard: pick other tenants")
	}
	f, raw := fact("t3", "tokens", "EUR", "100", jan10, map[string]string{"model": "gpt-4"}).Envelope(t)
	wantOutcomes(t, bt.Decide(t, pool, ib, tokens.Raw(t), raw), "applied", "deferred:missing_fact")
	other := bt.Watermark{Tenant: "t1", KnownThrough: jan20}
	wantOutcomes(t, bt.Decide(t, pool, ib, other.Raw(t)), "applied")
	at := func(through time.Time) []byte { return bt.Watermark{Tenant: "t3", KnownThrough: through}.Raw(t) }
	wantOutcomes(t, bt.Decide(t, pool, ib, at(jan10)), "applied")
	if n := bt.Count(t, pool, `SELECT count(*) FROM charge`); n != 0 {
		t.Fatalf("%d charges before t3's schedule passed the fact", n)
	}
	wantOutcomes(t, bt.Decide(t, pool, ib, at(jan10.Add(30*time.Minute))), "applied", "applied")
	c, ok := ratedBy(t, pool)[f.EventID]
	if !ok || !c.Unpriced || c.PriceVersion != 0 || c.Currency != "EUR" {
		t.Fatalf("charge %s: want unpriced in EUR", bt.JSON(c))
	}
}

// A dimension price racing usage misprices nothing (decision 0011, for the
// price sheet): the default price is known through the 15th; while gpt-4
// facts from the 10th to the 20th are rated by several consumers at once,
// meter activates a model=gpt-4 version from the 17th (after the
// watermark, as meter must). Facts beyond the known schedule wait; in the
// end each fact is at the entry in effect at its occurrence: the default
// before the 17th, gpt-4's from it.
func TestDimensionPriceRacingUsageMispricesNothing(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	pool, _, ib := catalogFixture(t, 8)
	jan17 := jan15.Add(48 * time.Hour)
	v1 := bt.Price{Tenant: "t1", Meter: "tokens", Currency: "USD", Version: 1, UnitPrice: "0.002", EffectiveAt: jan1, KnownThrough: jan15}
	v2 := bt.Price{Tenant: "t1", Meter: "tokens", Currency: "USD", Version: 2, UnitPrice: "0.03", EffectiveAt: jan17,
		Dimensions: map[string]string{"model": "gpt-4"}}
	bt.Decide(t, pool, ib, tokens.Raw(t), v1.Raw(t))

	const workers, perWorker = 4, 15
	occurred := map[uuid.UUID]time.Time{}
	batches := make([][][]byte, workers)
	for w := range workers {
		for i := range perWorker {
			at := jan10.Add(time.Duration(w*perWorker+i) * 3 * time.Hour) // the 10th to the 17th's evening
			env, raw := fact("t1", "tokens", "USD", "10", at, map[string]string{"model": "gpt-4"}).Envelope(t)
			occurred[env.EventID] = at
			batches[w] = append(batches[w], raw)
		}
	}
	var wg sync.WaitGroup
	errs := make(chan error, workers+1)
	start := make(chan struct{})
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			for _, raw := range batches[w] {
				if _, err := bt.TryDecide(ctx, pool, ib, raw); err != nil {
					errs <- err
					return
				}
			}
		}()
	}
	wg.Add(1)
	go func() {
		defer wg.Done()
		<-start
		if _, err := bt.TryDecide(ctx, pool, ib, v2.Raw(t)); err != nil {
			errs <- err
		}
	}()
	close(start)
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	// What waited while v2 committed beside it is decided by the sweep.
	for range 20 {
		if bt.Count(t, pool, `SELECT count(*) FROM inbox_deferred`) == 0 {
			break
		}
		if _, err := ib.Sweep(ctx, pool, 1000); err != nil {
			t.Fatal(err)
		}
	}
	rated := ratedBy(t, pool)
	if len(rated) != len(occurred) {
		t.Fatalf("%d charges of %d facts (%d deferred)", len(rated), len(occurred), bt.Count(t, pool, `SELECT count(*) FROM inbox_deferred`))
	}
	for id, at := range occurred {
		c := rated[id]
		want := int64(1)
		if !at.Before(jan17) {
			want = 2
		}
		if c.PriceVersion != want || c.Unpriced || (want == 2) != (c.Dimensions["model"] == "gpt-4") {
			t.Errorf("fact at %s: charge %s, want v%d", at.Format(time.RFC3339), bt.JSON(c), want)
		}
	}
}

// A unique_count fact without the value it counts (usage refuses those) is
// quarantined, not counted as an empty value.
func TestUniqueCountFactWithoutItsValueIsQuarantined(t *testing.T) {
	t.Parallel()
	pool, _, ib := catalogFixture(t, 4)
	users := bt.Meter{Code: "active_users", Aggregation: catalog.UniqueCount, ValueProperty: "user"}
	price := bt.Price{Tenant: "t1", Meter: "active_users", Currency: "USD", Version: 1, UnitPrice: "1", EffectiveAt: jan1}
	wantOutcomes(t, bt.Decide(t, pool, ib, users.Raw(t), price.Raw(t),
		fact("t1", "active_users", "USD", "1", jan10, map[string]string{"plan": "pro"}).Raw(t),
		fact("t1", "active_users", "USD", "1", jan10, map[string]string{"user": "u1"}).Raw(t)),
		"applied", "applied", "quarantined:"+catalog.CodeMissingValue, "applied")
	if n := bt.Count(t, pool, `SELECT count(*) FROM charge WHERE value = 'u1'`); n != 1 {
		t.Fatalf("%d charges", n)
	}
}

// Credits are bounded by the least a line can come to (decision 0010): a
// max line only grows, so its amount today can be credited in full; a
// latest line can fall to nothing with the next fact, so it backs no
// credit; an unpriced line costs nothing.
func TestCreditsAgainstAggregatedLines(t *testing.T) {
	t.Parallel()
	pool, svc, ib := catalogFixture(t, 4)
	var raws [][]byte
	ids := map[string]uuid.UUID{}
	for _, agg := range []string{catalog.Max, catalog.Latest} {
		meter := "c_" + agg
		raws = append(raws, bt.Meter{Code: meter, Aggregation: agg}.Raw(t),
			bt.Price{Tenant: agg, Meter: meter, Currency: "USD", Version: 1, UnitPrice: "1", EffectiveAt: jan1}.Raw(t))
		env, raw := fact(agg, meter, "USD", "10", jan10, nil).Envelope(t)
		raws, ids[agg] = append(raws, raw), env.EventID
	}
	bt.Decide(t, pool, ib, raws...)
	rated := ratedBy(t, pool)
	for agg, want := range map[string]string{catalog.Max: "10", catalog.Latest: "10"} {
		if est := estimateOf(t, svc, agg); !est["USD"].Equal(bt.Dec(t, want)) {
			t.Fatalf("%s estimate %s, want %s", agg, bt.JSON(est), want)
		}
	}
	if _, err := post(t, svc, catalog.Max, rated[ids[catalog.Max]].ChargeID, "-10.00", "USD", "admin@test"); err != nil {
		t.Fatalf("credit of a max line's amount: %v", err)
	}
	_, err := post(t, svc, catalog.Latest, rated[ids[catalog.Latest]].ChargeID, "-0.01", "USD", "admin@test")
	wantCode(t, err, "credit_exceeds_charges")
}

package app

// The usage analytics' projection (DESIGN.md section 3a).
//
// Design: every accepted fact (UsageAccepted, priced or not) is one
// usage_fact row, unique by its identity (tenant, sourceSystem,
// sourceEventId) within the month of its event id (the table is
// partitioned by it, decision 0025 (facts by month)), plus one rollup row
// it adds itself to:
//
//   - sum, count, max, latest: usage_hourly, per tenant, meter, UTC hour of
//     occurredAt and full dimension values, the count, sum, max and latest
//     (the latest fact's quantity with catalog's tie-break) of its facts.
//     Any window of a zone whose offset is a whole number of hours over the
//     range (UTC, Europe/*, America/*, ...) is a union of hours: a page of a
//     month at hour windows grouped by one dimension reads the hours its
//     rows come from (index range per window, grouped by the dimension);
//   - unique_count: usage_distinct_day, per tenant, meter, UTC day and value,
//     the bit set of the UTC hours the value occurred in. Distinct counts are
//     not unions of partial counts, but sets are: a UTC day window counts its
//     rows (the key is unique per value), any other window of whole hours
//     counts the distinct values of its days' rows whose hours meet it.
//     Exact; it reads distinct (day, value) pairs, not facts. Grouped or
//     filtered unique_count counts distinct values over the fact rows of
//     each window (usage_fact_window holds occurredAt, dims and value);
//   - zones whose offset is not whole hours (Asia/Kolkata) and ranges not on
//     whole hours read the fact rows, for every aggregation.
//
// Facts of a meter query does not know yet (its MeterDefined on another
// topic, not arrived yet) are kept with their properties and no dimension
// values; the MeterDefined that arrives rolls them up. A shared advisory
// lock per meter code held by fact batches, exclusive by the MeterDefined,
// makes sure no fact falls between the two. Duplicates: the inbox dedups by
// event id, projected_event's key and its archived months catch what it
// missed (the batch rolls back), and usage_fact's key by identity in the
// event's month makes the same event delivered again add nothing (only the
// facts inserted roll up). A month's facts are archived with its events
// (projected_event_archive): the rollups keep them, and a read of fact rows
// over an archived month's span is refused (factsKept, usage.go).

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"
	"github.com/shopspring/decimal"

	"github.com/usagebilling/billing/pkg/catalog"
	"github.com/usagebilling/billing/pkg/envelope"
	"github.com/usagebilling/billing/pkg/events"
	"github.com/usagebilling/billing/pkg/inbox"
	"github.com/usagebilling/billing/services/query/internal/db"
	"github.com/usagebilling/billing/services/query/internal/domain"
)

// rollChunk is how many facts of a meter defined late one statement rolls up.
const rollChunk = 5000

// fact is one accepted fact as the analytics keep it.
type fact struct {
	tenantID      string
	meterCode     string
	occurredAt    time.Time
	sourceSystem  string
	sourceEventID string
	quantity      decimal.Decimal
	dims          []string
	value         string // unique_count's; "" for other meters
	unique        bool   // of a unique_count meter: no hourly rollup (nothing reads it)
}

// identity is a fact's identity.
type identity struct{ tenant, system, event string }

// ProjectFacts is projectFacts, the analytics' part of the projection's
// batch handler, for measurements that load facts without the per-event
// rows (bench tests).
func ProjectFacts(ctx context.Context, tx pgx.Tx, ds []*envelope.Decoded) error {
	return projectFacts(ctx, tx, ds)
}

// projectFacts records the accepted facts of ds in usage_fact and, for
// meters already known, in their hourly rollups. Call it in the batch's
// transaction after the events' own rows.
func projectFacts(ctx context.Context, tx pgx.Tx, ds []*envelope.Decoded) error {
	var us []events.UsageAccepted
	var evs []*envelope.Decoded
	for _, d := range ds {
		if u, ok := d.Payload.(events.UsageAccepted); ok {
			us, evs = append(us, u), append(evs, d)
		}
	}
	if len(us) == 0 {
		return nil
	}
	q := db.New(tx)
	codes := slices.Sorted(maps.Keys(func() map[string]bool {
		m := map[string]bool{}
		for _, u := range us {
			m[u.MeterCode] = true
		}
		return m
	}()))
	if err := q.LockMetersShared(ctx, codes); err != nil {
		return fmt.Errorf("lock meters %v: %w", codes, err)
	}
	meters, err := meterDefinitions(ctx, q, codes)
	if err != nil {
		return err
	}
	n := len(us)
	p := db.InsertUsageFactsParams{TenantIds: make([]string, n), SourceSystems: make([]string, n),
		SourceEventIds: make([]string, n), MeterCodes: make([]string, n), OccurredAts: make([]time.Time, n),
		EventIds: make([]uuid.UUID, n), Quantities: make([]decimal.Decimal, n), Properties: make([][]byte, n),
		Dims: make([][]byte, n), Known: make([]bool, n), Values: make([]string, n)}
	pending := map[identity]fact{}
	for i, u := range us {
		tenant := evs[i].Envelope.TenantID
		p.TenantIds[i], p.SourceSystems[i], p.SourceEventIds[i] = tenant, u.SourceSystem, u.SourceEventID
		p.MeterCodes[i], p.OccurredAts[i], p.EventIds[i], p.Quantities[i] = u.MeterCode, u.OccurredAt, evs[i].Envelope.EventID, u.Quantity
		p.Properties[i] = mustJSON(orEmpty(u.Properties))
		p.Dims[i] = []byte("[]")
		m, known := meters[u.MeterCode]
		if known {
			dims, value := domain.DimensionValues(m, u.Properties), domain.UniqueValue(m, u.Properties)
			p.Dims[i], p.Known[i], p.Values[i] = mustJSON(dims), true, value
			pending[identity{tenant, u.SourceSystem, u.SourceEventID}] = fact{tenantID: tenant, meterCode: u.MeterCode,
				occurredAt: u.OccurredAt, sourceSystem: u.SourceSystem, sourceEventID: u.SourceEventID, quantity: u.Quantity,
				dims: dims, value: value, unique: m.Aggregation == catalog.UniqueCount}
		}
	}
	inserted, err := q.InsertUsageFacts(ctx, p)
	if err != nil {
		return fmt.Errorf("record %d usage facts: %w", n, err)
	}
	// Only the facts inserted now roll up: one recorded before (another
	// event of the same fact) already did.
	var roll []fact
	for _, r := range inserted {
		if f, ok := pending[identity{r.TenantID, r.SourceSystem, r.SourceEventID}]; ok {
			roll = append(roll, f)
		}
	}
	return addRollups(ctx, q, roll)
}

// hourKey names one usage_hourly row.
type hourKey struct {
	tenantID, meterCode string
	hour                time.Time
	dims                string // the JSON array of the dimension values
}

// addRollups adds facts to their hourly rollups (sum, count, max and latest
// meters) and their distinct days (unique_count meters): one entry per row,
// merged here first (a statement may not touch a row twice), in key order.
func addRollups(ctx context.Context, q *db.Queries, facts []fact) error {
	if len(facts) == 0 {
		return nil
	}
	type acc struct {
		facts  int64
		sum    decimal.Decimal
		max    decimal.Decimal
		latest catalog.Observation
	}
	rows := map[hourKey]*acc{}
	for _, f := range facts {
		if f.unique {
			continue
		}
		k := hourKey{f.tenantID, f.meterCode, f.occurredAt.UTC().Truncate(time.Hour), string(mustJSON(f.dims))}
		o := catalog.Observation{Quantity: f.quantity, OccurredAt: f.occurredAt, SourceSystem: f.sourceSystem, SourceEventID: f.sourceEventID}
		a := rows[k]
		if a == nil {
			rows[k] = &acc{facts: 1, sum: f.quantity, max: f.quantity, latest: o}
			continue
		}
		a.facts++
		a.sum = a.sum.Add(f.quantity)
		if f.quantity.GreaterThan(a.max) {
			a.max = f.quantity
		}
		if o.After(a.latest) {
			a.latest = o
		}
	}
	if len(rows) == 0 {
		return addDistinctDays(ctx, q, facts)
	}
	keys := slices.SortedFunc(maps.Keys(rows), func(a, b hourKey) int {
		return cmp.Or(cmp.Compare(a.tenantID, b.tenantID), cmp.Compare(a.meterCode, b.meterCode),
			a.hour.Compare(b.hour), cmp.Compare(a.dims, b.dims))
	})
	var p db.AddUsageHourlyParams
	for _, k := range keys {
		a := rows[k]
		p.TenantIds, p.MeterCodes, p.Hours, p.Dims = append(p.TenantIds, k.tenantID), append(p.MeterCodes, k.meterCode),
			append(p.Hours, k.hour), append(p.Dims, []byte(k.dims))
		p.Facts, p.Sums, p.Maxes = append(p.Facts, a.facts), append(p.Sums, a.sum), append(p.Maxes, a.max)
		p.LatestAts, p.LatestSourceSystems = append(p.LatestAts, a.latest.OccurredAt), append(p.LatestSourceSystems, a.latest.SourceSystem)
		p.LatestSourceEventIds, p.LatestQuantities = append(p.LatestSourceEventIds, a.latest.SourceEventID), append(p.LatestQuantities, a.latest.Quantity)
	}
	if err := q.AddUsageHourly(ctx, p); err != nil {
		return fmt.Errorf("add %d facts to %d hourly rollups: %w", len(facts), len(keys), err)
	}
	return addDistinctDays(ctx, q, facts)
}

// dayKey names one usage_distinct_day row.
type dayKey struct {
	tenantID, meterCode string
	day                 time.Time // UTC midnight
	value               string
}

// addDistinctDays adds the hours of the unique_count facts (those with a
// value) to their (UTC day, value) rows, merged here first, in key order.
func addDistinctDays(ctx context.Context, q *db.Queries, facts []fact) error {
	rows := map[dayKey]int32{}
	for _, f := range facts {
		if f.value == "" {
			continue
		}
		at := f.occurredAt.UTC()
		rows[dayKey{f.tenantID, f.meterCode, at.Truncate(24 * time.Hour), f.value}] |= 1 << at.Hour()
	}
	if len(rows) == 0 {
		return nil
	}
	keys := slices.SortedFunc(maps.Keys(rows), func(a, b dayKey) int {
		return cmp.Or(cmp.Compare(a.tenantID, b.tenantID), cmp.Compare(a.meterCode, b.meterCode),
			a.day.Compare(b.day), cmp.Compare(a.value, b.value))
	})
	var p db.AddUsageDistinctDaysParams
	for _, k := range keys {
		p.TenantIds, p.MeterCodes, p.Values = append(p.TenantIds, k.tenantID), append(p.MeterCodes, k.meterCode), append(p.Values, k.value)
		p.Days, p.Hours = append(p.Days, pgtype.Date{Time: k.day, Valid: true}), append(p.Hours, rows[k])
	}
	if err := q.AddUsageDistinctDays(ctx, p); err != nil {
		return fmt.Errorf("add %d values to their days: %w", len(keys), err)
	}
	return nil
}

// defineMeters records the meters of a batch of MeterDefined (the first
// definition of a code stays) and rolls up the facts of each that arrived
// before it.
func (a *App) defineMeters(ctx context.Context, tx pgx.Tx, ds []*envelope.Decoded, ps []events.MeterDefined) ([]inbox.Outcome, error) {
	q := db.New(tx)
	order := make([]int, len(ps))
	for i := range order {
		order[i] = i
	}
	// One lock order for every batch: by code.
	slices.SortStableFunc(order, func(a, b int) int { return cmp.Compare(ps[a].Code, ps[b].Code) })
	for _, i := range order {
		m := ps[i]
		if err := q.LockMeter(ctx, m.Code); err != nil {
			return nil, fmt.Errorf("lock meter %s: %w", m.Code, err)
		}
		if err := q.DefineMeter(ctx, db.DefineMeterParams{Code: m.Code, Aggregation: cmp.Or(m.Aggregation, catalog.Sum),
			ValueProperty: m.ValueProperty, Dimensions: orNone(m.Dimensions), EventType: cmp.Or(m.EventType, m.Code),
			DefinedAt: m.DefinedAt}); err != nil {
			return nil, inbox.ItemError(i, fmt.Errorf("define meter %s: %w", m.Code, err))
		}
		if err := rollUpLateMeter(ctx, q, m.Code); err != nil {
			return nil, err
		}
	}
	return make([]inbox.Outcome, len(ds)), nil
}

// rollUpLateMeter gives the facts of meter code that arrived before its
// definition their dimension values and adds them to their rollups, a chunk
// at a time (bounded memory however many there are).
func rollUpLateMeter(ctx context.Context, q *db.Queries, code string) error {
	m, err := q.GetMeterDefinition(ctx, code)
	if err != nil {
		return fmt.Errorf("read meter %s: %w", code, err)
	}
	meter := meterOf(m.Code, m.Aggregation, m.ValueProperty, m.Dimensions, m.EventType)
	for {
		rows, err := q.ListUnrolledFacts(ctx, db.ListUnrolledFactsParams{MeterCode: code, RowLimit: rollChunk})
		if err != nil {
			return fmt.Errorf("read the facts of meter %s: %w", code, err)
		}
		if len(rows) == 0 {
			return nil
		}
		var p db.SetFactDimensionsParams
		facts := make([]fact, len(rows))
		for i, r := range rows {
			var props map[string]string
			if err := json.Unmarshal(r.Properties, &props); err != nil {
				return fmt.Errorf("fact %s/%s/%s: properties: %w", r.TenantID, r.SourceSystem, r.SourceEventID, err)
			}
			dims, value := domain.DimensionValues(meter, props), domain.UniqueValue(meter, props)
			p.TenantIds, p.SourceSystems, p.SourceEventIds = append(p.TenantIds, r.TenantID), append(p.SourceSystems, r.SourceSystem),
				append(p.SourceEventIds, r.SourceEventID)
			p.Dims, p.Values = append(p.Dims, mustJSON(dims)), append(p.Values, value)
			facts[i] = fact{tenantID: r.TenantID, meterCode: code, occurredAt: r.OccurredAt, sourceSystem: r.SourceSystem,
				sourceEventID: r.SourceEventID, quantity: r.Quantity, dims: dims, value: value,
				unique: meter.Aggregation == catalog.UniqueCount}
		}
		if err := q.SetFactDimensions(ctx, p); err != nil {
			return fmt.Errorf("set the dimensions of %d facts of meter %s: %w", len(rows), code, err)
		}
		if err := addRollups(ctx, q, facts); err != nil {
			return err
		}
	}
}

// meterDefinitions reads the known meters among codes.
func meterDefinitions(ctx context.Context, q *db.Queries, codes []string) (map[string]catalog.Meter, error) {
	rows, err := q.GetMeterDefinitions(ctx, codes)
	if err != nil {
		return nil, fmt.Errorf("read meters %v: %w", codes, err)
	}
	out := make(map[string]catalog.Meter, len(rows))
	for _, r := range rows {
		out[r.Code] = meterOf(r.Code, r.Aggregation, r.ValueProperty, r.Dimensions, r.EventType)
	}
	return out, nil
}

func meterOf(code, aggregation, valueProperty string, dims []string, eventType string) catalog.Meter {
	return catalog.Meter{Code: code, Name: code, Aggregation: aggregation, ValueProperty: valueProperty,
		Dimensions: dims, EventType: eventType}
}

// setTenantZones keeps the zone of each tenant's latest period seen ending:
// the analytics' default zone.
func (a *App) setTenantZones(ctx context.Context, tx pgx.Tx, ds []*envelope.Decoded, ps []events.BillingPeriodEnded) ([]inbox.Outcome, error) {
	q := db.New(tx)
	for i, p := range ps {
		if err := q.SetTenantZone(ctx, db.SetTenantZoneParams{TenantID: ds[i].Envelope.TenantID, Period: p.Period,
			TimeZone: p.TimeZone}); err != nil {
			return nil, inbox.ItemError(i, fmt.Errorf("set the zone of %s: %w", ds[i].Envelope.TenantID, err))
		}
	}
	return make([]inbox.Outcome, len(ds)), nil
}

func mustJSON(v any) []byte {
	b, err := json.Marshal(v)
	if err != nil {
		panic("analytics: " + err.Error())
	}
	return b
}

func orEmpty(m map[string]string) map[string]string {
	if m == nil {
		return map[string]string{}
	}
	return m
}

func orNone(s []string) []string {
	if s == nil {
		return []string{}
	}
	return s
}

package app

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"
	"github.com/shopspring/decimal"

	"github.com/usagebilling/billing/pkg/catalog"
	"github.com/usagebilling/billing/pkg/rule"
	"github.com/usagebilling/billing/services/query/internal/db"
	"github.com/usagebilling/billing/services/query/internal/domain"
)

// maxChunkWindows bounds the windows one statement of a page reads.
const maxChunkWindows = 256

// Usage answers one page of the usage analytics (see analytics.go for the
// tables): the meter's aggregation per window of q.WindowSize in q.Zone (the
// tenant's zone when nil, UTC when query knows none), per group of q.GroupBy,
// over the facts that pass q.Filters, by occurredAt in [q.From, q.To); at
// most limit rows after position after (nil: from the start). Errors:
// meter_not_found, invalid_dimension, invalid_cursor, facts_archived (rule
// errors).
//
// A page reads only the windows its rows come from: it asks for the rows of
// one window (without groups: of as many windows as the page has rows),
// then of twice as many, ... (at most maxChunkWindows) until it has limit+1
// rows or reaches q.To, each window an index range of its hours.
func (a *App) Usage(ctx context.Context, q domain.UsageQuery, limit int, after *domain.UsagePosition) (domain.UsageReport, error) {
	var out domain.UsageReport
	if err := q.CheckRange(); err != nil {
		return out, err
	}
	dq := db.New(a.pool)
	m, err := dq.GetMeterDefinition(ctx, q.MeterCode)
	if errors.Is(err, pgx.ErrNoRows) {
		return out, rule.Errorf(rule.NotFound, domain.CodeMeterNotFound, "no meter %q in the catalog", q.MeterCode)
	}
	if err != nil {
		return out, fmt.Errorf("read meter %s: %w", q.MeterCode, err)
	}
	meter := meterOf(m.Code, m.Aggregation, m.ValueProperty, m.Dimensions, m.EventType)
	if err := q.CheckDimensions(meter); err != nil {
		return out, err
	}
	if q.Zone == nil {
		q.Zone = time.UTC
		name, err := dq.GetTenantZone(ctx, q.TenantID)
		switch {
		case errors.Is(err, pgx.ErrNoRows):
		case err != nil:
			return out, fmt.Errorf("read the zone of %s: %w", q.TenantID, err)
		default:
			if loc, err := time.LoadLocation(name); err == nil {
				q.Zone = loc
			}
		}
	}
	out = domain.UsageReport{MeterCode: meter.Code, Aggregation: meter.Aggregation, WindowSize: q.WindowSize,
		TimeZone: q.Zone.String(), Rows: []domain.UsageRow{}}
	first := domain.WindowStart(q.From, q.WindowSize, q.Zone)
	if after != nil && (after.Window.Before(first) || !after.Window.Before(q.To) || len(after.Dimensions) != len(q.GroupBy) ||
		!domain.WindowStart(after.Window, q.WindowSize, q.Zone).Equal(after.Window)) {
		return out, rule.Errorf(rule.Invalid, "invalid_cursor", "cursor must be a next value this query returned")
	}
	plan := planUsage(meter, q)
	if p, ok := plan.(usagePlan); ok && p.facts {
		if err := factsKept(ctx, dq, q); err != nil {
			return out, err
		}
	}
	w := first
	if after != nil {
		w = after.Window
	}
	// Without groups a window has one row at most: the first statement
	// reads as many windows as the page can show.
	chunk := 1
	if len(q.GroupBy) == 0 {
		chunk = min(limit+1, maxChunkWindows)
	}
	var rows []windowRow
	for len(rows) <= limit && w.Before(q.To) {
		var c windowChunk
		for len(c.starts) < chunk && w.Before(q.To) {
			next := domain.NextWindow(w, q.WindowSize, q.Zone)
			c.starts, c.los, c.his = append(c.starts, w), append(c.los, maxTime(w, q.From)), append(c.his, minTime(next, q.To))
			w = next
		}
		got, err := plan.read(ctx, a, c, after, limit+1-len(rows))
		if err != nil {
			return out, err
		}
		rows = append(rows, got...)
		chunk = min(2*chunk, maxChunkWindows)
	}
	if len(rows) > limit {
		rows = rows[:limit]
		last := rows[len(rows)-1]
		out.Next = &domain.UsagePosition{Window: last.window, Dimensions: last.dims}
	}
	for _, w := range rows {
		out.Rows = append(out.Rows, domain.UsageRow{From: maxTime(w.window, q.From),
			To: minTime(domain.NextWindow(w.window, q.WindowSize, q.Zone), q.To), Dimensions: w.dims, Value: w.value})
	}
	return out, nil
}

// windowRow is a row as read: its window's start, group values and value.
type windowRow struct {
	window time.Time
	dims   []string
	value  decimal.Decimal
}

// windowChunk are the windows one statement reads: each window's start
// and the range of its facts (the window clipped to the query's range).
type windowChunk struct {
	starts, los, his []time.Time
}

// usagePlan is the statement of one query: from the hourly rollups (sum,
// count, max, latest in a zone of whole-hour offsets over a range of whole
// hours) or from the facts (unique_count, other zones and ranges). The
// windows come from Go (domain.WindowStart, NextWindow) as arrays; for each
// window the statement reads its index range and aggregates its groups.
// Its text is built from the meter's dimension positions (integers) and
// fixed fragments; every value is a parameter.
type usagePlan struct {
	sql   string
	args  []any // $1..$len(args); then the chunk's starts, los, his, the cursor's window and groups, the limit
	facts bool  // it reads usage_fact, not the rollups
}

// windowReader reads the rows of a chunk of windows.
type windowReader interface {
	read(ctx context.Context, a *App, c windowChunk, after *domain.UsagePosition, limit int) ([]windowRow, error)
}

// planUsage chooses the tables that answer q: the hourly rollups for sum,
// count, max and latest, the distinct days for an ungrouped, unfiltered
// unique_count at day or month windows, when the windows are whole UTC hours
// (a zone of whole-hour offsets over a range of whole hours); else the
// facts.
func planUsage(m catalog.Meter, q domain.UsageQuery) windowReader {
	hours := domain.WholeHours(q.Zone, q.From, q.To) && q.From.Equal(q.From.Truncate(time.Hour)) && q.To.Equal(q.To.Truncate(time.Hour))
	if hours && m.Aggregation == catalog.UniqueCount && len(q.GroupBy) == 0 && len(q.Filters) == 0 && q.WindowSize != domain.WindowHour {
		return distinctDays{tenantID: q.TenantID, meterCode: q.MeterCode}
	}
	return newUsagePlan(m, q, hours && m.Aggregation != catalog.UniqueCount)
}

func newUsagePlan(m catalog.Meter, q domain.UsageQuery, rollup bool) usagePlan {
	pos := func(name string) int { return slices.Index(m.Dimensions, name) + 1 }
	args := []any{q.TenantID, q.MeterCode}
	param := func(v any) string { args = append(args, v); return "$" + strconv.Itoa(len(args)) }
	var where []string
	for _, name := range slices.Sorted(maps.Keys(q.Filters)) {
		where = append(where, fmt.Sprintf("dims[%d] = ANY(%s::text[])", pos(name), param(q.Filters[name])))
	}
	group := "ARRAY[]::text[]"
	if len(q.GroupBy) > 0 {
		parts := make([]string, len(q.GroupBy))
		for i, g := range q.GroupBy {
			parts[i] = fmt.Sprintf(`dims[%d] COLLATE "C"`, pos(g))
		}
		group = "ARRAY[" + strings.Join(parts, ", ") + "]"
	}
	var table, at, value string
	if rollup {
		table, at = "usage_hourly", "hour"
		switch m.Aggregation {
		case catalog.Count:
			value = "sum(facts)"
		case catalog.Max:
			value = "max(max)"
		case catalog.Latest:
			value = `(array_agg(latest_quantity ORDER BY latest_at DESC, latest_source_system DESC, latest_source_event_id DESC))[1]`
		default:
			value = "sum(sum)"
		}
	} else {
		table, at = "usage_fact", "occurred_at"
		switch m.Aggregation {
		case catalog.Count:
			value = "count(*)"
		case catalog.Max:
			value = "max(quantity)"
		case catalog.Latest:
			value = `(array_agg(quantity ORDER BY occurred_at DESC, source_system DESC, source_event_id DESC))[1]`
		case catalog.UniqueCount:
			value = "count(DISTINCT value)"
		default:
			value = "sum(quantity)"
		}
	}
	n := len(args)
	cond := ""
	if len(where) > 0 {
		cond = " AND " + strings.Join(where, " AND ")
	}
	sql := fmt.Sprintf(`SELECT w.s, x.g, x.v
FROM unnest($%[6]d::timestamptz[], $%[7]d::timestamptz[], $%[8]d::timestamptz[]) WITH ORDINALITY AS w(s, lo, hi, n)
CROSS JOIN LATERAL (
    SELECT %[1]s AS g, (%[2]s)::numeric AS v
    FROM %[3]s
    WHERE tenant_id = $1 AND meter_code = $2 AND %[4]s >= w.lo AND %[4]s < w.hi%[5]s
    GROUP BY 1
) x
WHERE $%[9]d::timestamptz IS NULL OR w.s > $%[9]d OR (w.s = $%[9]d AND x.g > $%[10]d::text[])
ORDER BY w.n, x.g
LIMIT $%[11]d`, group, value, table, at, cond, n+1, n+2, n+3, n+4, n+5, n+6)
	return usagePlan{sql: sql, args: args, facts: !rollup}
}

// factsKept refuses (facts_archived) a query that reads fact rows over a
// range some of whose facts were archived with their month: the rollups
// keep them, the fact rows do not, and an answer without them would be
// wrong. Spans are per tenant, meter and month archived (usage_fact_archived,
// from the first to the last occurredAt of its facts), so the refusal is
// exact for the months and may be wider than the facts (a month's late
// facts stretch its span back).
func factsKept(ctx context.Context, dq *db.Queries, q domain.UsageQuery) error {
	s, err := dq.ArchivedFactSpan(ctx, db.ArchivedFactSpanParams{TenantID: q.TenantID, MeterCode: q.MeterCode,
		FromAt: q.From, ToAt: q.To})
	if errors.Is(err, pgx.ErrNoRows) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("read the archived spans of %s: %w", q.MeterCode, err)
	}
	return rule.Errorf(rule.Unprocessable, domain.CodeFactsArchived,
		"the facts of meter %q that occurred from %s to %s were archived with %s, and this query reads facts "+
			"(unique_count grouped, filtered or by hour, a zone whose offset is not whole hours, or a range off the hour): "+
			"the rollups answer whole hours of a zone of whole-hour offsets (sum, count, max, latest; unique_count by day or month, "+
			"ungrouped and unfiltered), the facts from after %s",
		q.MeterCode, s.OccurredFrom.UTC().Format(time.RFC3339Nano), s.OccurredTo.UTC().Format(time.RFC3339Nano), s.Partition,
		s.OccurredTo.UTC().Format(time.RFC3339Nano))
}

// read reads the rows of the chunk's windows after position after, at
// most limit.
func (p usagePlan) read(ctx context.Context, a *App, c windowChunk, after *domain.UsagePosition, limit int) ([]windowRow, error) {
	var cw *time.Time
	cd := []string{}
	if after != nil {
		cw, cd = &after.Window, after.Dimensions
	}
	rows, err := a.pool.Query(ctx, p.sql, append(slices.Clone(p.args), c.starts, c.los, c.his, cw, cd, limit)...)
	if err != nil {
		return nil, fmt.Errorf("read usage windows: %w", err)
	}
	out, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (windowRow, error) {
		var w windowRow
		err := row.Scan(&w.window, &w.dims, &w.value)
		return w, err
	})
	if err != nil {
		return nil, fmt.Errorf("read usage windows: %w", err)
	}
	return out, nil
}

// distinctDays answers an ungrouped unique_count from usage_distinct_day:
// a window of whole UTC hours covers the days from its first hour's to its
// last hour's, and its count is the distinct values of those days' rows
// whose hours meet the window's hours of that day. A chunk of windows that
// are each one whole UTC day (day windows of UTC) counts rows: the key is
// unique per day and value.
type distinctDays struct{ tenantID, meterCode string }

const (
	allHours        = 1<<24 - 1
	distinctDaysSQL = `SELECT w.s, ARRAY[]::text[], x.v
FROM unnest($3::timestamptz[], $4::date[], $5::date[], $6::int[], $7::int[]) WITH ORDINALITY AS w(s, d0, dn, m0, mn, n)
CROSS JOIN LATERAL (
    SELECT (%s)::numeric AS v
    FROM usage_distinct_day
    WHERE tenant_id = $1 AND meter_code = $2 AND day >= w.d0 AND day <= w.dn
      AND hours & (CASE WHEN day = w.d0 THEN w.m0 WHEN day = w.dn THEN w.mn ELSE ` + "16777215" + ` END) <> 0
) x
WHERE x.v > 0 AND ($8::timestamptz IS NULL OR w.s > $8)
ORDER BY w.n
LIMIT $9`
)

func (d distinctDays) read(ctx context.Context, a *App, c windowChunk, after *domain.UsagePosition, limit int) ([]windowRow, error) {
	n := len(c.starts)
	d0s, dns, m0s, mns := make([]pgtype.Date, n), make([]pgtype.Date, n), make([]int32, n), make([]int32, n)
	single := true
	for i := range n {
		first, last := c.los[i].UTC(), c.his[i].Add(-time.Hour).UTC()
		d0s[i] = pgtype.Date{Time: first.Truncate(24 * time.Hour), Valid: true}
		dns[i] = pgtype.Date{Time: last.Truncate(24 * time.Hour), Valid: true}
		if d0s[i].Time.Equal(dns[i].Time) {
			m0s[i] = hourBits(first.Hour(), last.Hour())
			mns[i] = m0s[i]
		} else {
			m0s[i], mns[i] = hourBits(first.Hour(), 23), hourBits(0, last.Hour())
		}
		single = single && d0s[i].Time.Equal(dns[i].Time) && m0s[i] == allHours
	}
	value := "count(DISTINCT value)"
	if single {
		value = "count(*)"
	}
	var cw *time.Time
	if after != nil {
		cw = &after.Window
	}
	rows, err := a.pool.Query(ctx, fmt.Sprintf(distinctDaysSQL, value), d.tenantID, d.meterCode, c.starts, d0s, dns, m0s, mns, cw, limit)
	if err != nil {
		return nil, fmt.Errorf("read distinct values by day: %w", err)
	}
	out, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (windowRow, error) {
		var w windowRow
		err := row.Scan(&w.window, &w.dims, &w.value)
		return w, err
	})
	if err != nil {
		return nil, fmt.Errorf("read distinct values by day: %w", err)
	}
	return out, nil
}

// hourBits is the mask of hours from to through (UTC hours of one day).
func hourBits(from, through int) int32 {
	var m int32
	for h := from; h <= through; h++ {
		m |= 1 << h
	}
	return m
}

func maxTime(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}

func minTime(a, b time.Time) time.Time {
	if a.Before(b) {
		return a
	}
	return b
}
